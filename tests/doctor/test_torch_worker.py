"""The torch worker does what training does first, with the real torch and the real dynamic loader: every
kernel's extension is imported on its own and fails in the loader's own words (bench/fake_kernels.py makes
extensions that are damaged, truncated, linked to a missing library, or missing a symbol), each is classified by
those words and gets the finding that names its fix under every scope; a malformed allocator config is refused
as torch refuses it. One worker run (one torch import) serves the whole module."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fake_kernels import install
from olmo_doctor.loader_errors import classify
from olmo_doctor.probes import dists, torch_probe
from olmo_doctor.rules.engine import run_rules
from tests.helpers import stand_in_torch

FAKE_TORCH = stand_in_torch()
FAULTS = {"flash_attn": "corrupt", "flash_attn_3": "undefined-symbol", "xformers": "missing-library",
          "torchao": "truncated"}
KIND = {"corrupt": "corrupt", "undefined-symbol": "abi", "missing-library": "missing_library", "truncated": "corrupt"}
# the finding each fault gets: FlashAttention-3 has no rule of its own for an ABI failure, so the generic one
CODE = {"flash_attn": "OD290", "flash_attn_3": "OD292", "xformers": "OD291", "torchao": "OD290"}


@pytest.fixture(scope="module")
def worker_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    site = tmp_path_factory.mktemp("site")
    for kernel, kind in FAULTS.items():
        install(site, kernel, kind)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(site))
        mp.syspath_prepend(str(site))
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:maybe")
        dists._index.cache_clear()
        try:
            facts = torch_probe.probe()
            facts["env.PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:maybe"
        finally:
            dists._index.cache_clear()
    return facts


@pytest.mark.parametrize("kernel", FAULTS)
def test_each_kernel_fails_in_the_loaders_words(worker_facts: dict[str, object], kernel: str) -> None:
    assert worker_facts[f"{kernel}.import_ok"] is False
    error = str(worker_facts[f"{kernel}.import_error"])
    assert classify(error) == KIND[FAULTS[kernel]], error
    assert "Python process" not in error  # each import failed on its own, none took the worker down


@pytest.mark.parametrize("scope", ["install", "train", "all"])
def test_every_scope_names_each_failure_by_its_cause(worker_facts: dict[str, object], scope: str) -> None:
    findings = {f.code: f for f in run_rules(worker_facts, scope=scope)}
    for kernel, code in CODE.items():
        assert code in findings, (scope, kernel, sorted(findings))
        quoted = str(worker_facts[f"{kernel}.import_error"]).split(": ", 1)[1]
        assert quoted in findings[code].message  # the loader's words, verbatim
    assert findings["OD290"].severity == ("error" if scope == "install" else "warning")
    # none of them is called a torch-ABI problem but the one that is
    assert "OD160" not in findings and "OD161" not in findings and "OD244" not in findings


def test_the_allocator_config_is_parsed_as_torch_parses_it(worker_facts: dict[str, object]) -> None:
    """torch >= 2.9 parses PYTORCH_CUDA_ALLOC_CONF without a GPU: the worker quotes its refusal, and OD277 names it."""
    error = worker_facts.get("torch.alloc_conf_error")
    assert isinstance(error, str) and "maybe" in error
    [finding] = [f for f in run_rules(worker_facts, scope="train") if f.code == "OD277"]
    assert error in finding.title and "torch says" in finding.message


def test_torch_facts_next_to_the_failures(worker_facts: dict[str, object]) -> None:
    """What torch said before the kernels is kept, and CUDA's start is judged on this machine as it is."""
    assert worker_facts["torch.cuda_available"] in (True, False)
    assert isinstance(worker_facts["torch.cuda_device_count"], int)
    assert "torch.import_error" not in worker_facts or worker_facts["torch.import_error"] is None


def test_a_crash_is_one_kernels_answer_and_the_rest_are_still_tried(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An import that kills the interpreter costs only its own answer: the kernels after it run in a new worker."""
    site = tmp_path / "site"
    install(site, "xformers", "corrupt")
    (site / "torch").mkdir()  # a stand-in torch: this is about the worker's kernels, not torch's own facts
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH)
    # imported first, and aborts (no core file left behind)
    (site / "flash_attn_2_cuda.py").write_text("import os, resource\nresource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
                                               "os.abort()\n")
    info = site / "flash_attn-2.8.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    facts = torch_probe.dynamic_facts(site / "torch", ["flash_attn", "xformers"])
    assert facts["flash_attn.import_ok"] is False
    assert "killed the Python process" in str(facts["flash_attn.import_error"])
    assert facts["xformers.import_ok"] is False and classify(facts["xformers.import_error"]) == "corrupt"


@pytest.mark.parametrize(("start", "said"), [
    ("import os, resource\n        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n        os.abort()",
     "starting CUDA killed the Python process (SIGABRT)"),
    ("import time\n        time.sleep(60)", "starting CUDA killed the Python process (it did not finish in time"),
], ids=["crash", "hang"])
def test_cuda_start_that_kills_or_hangs_the_worker_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            start: str, said: str) -> None:
    """A driver that crashes or hangs torch.cuda.is_available(): CUDA's start is recorded as failed, with how,
    the kernels are still judged in a fresh worker, and a hang is not cached (the next check asks again)."""
    site = tmp_path / "site"
    install(site, "xformers", "corrupt")
    (site / "torch").mkdir()
    head, tail = FAKE_TORCH.rsplit("class cuda:", 1)  # only torch.cuda.is_available() misbehaves
    source = head + "class cuda:" + tail.replace("    def is_available():\n        return False",
                                                 f"    def is_available():\n        {start}")
    assert source != FAKE_TORCH
    (site / "torch" / "__init__.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    facts = torch_probe.dynamic_facts(site / "torch", ["xformers"], timeout=3)
    assert facts["torch.cuda_available"] is False and str(facts["torch.cuda_init_error"]).startswith(said)
    assert classify(facts["xformers.import_error"]) == "corrupt"  # the kernel after it was still tried
    cached = list((tmp_path / "cache" / "olmo-doctor" / "torch-facts").glob("*.json"))
    assert bool(cached) == (said.endswith("(SIGABRT)"))

"""Each refusal the README promises for `olmo train` is enforced where the run starts, on the device it runs on
(here the CPU, the device CI has): one line, exit 2, no step taken, for a recipe and for the smoke run alike.
The README's words for each: fp8 "refused in one line otherwise" (no float8 tensor cores); a named attention
backend the device cannot run; `device` "auto, cpu, cuda or cuda:N"; cuda_graph "ignored with a warning
otherwise"; a run_dir or data path that is a URL (nothing but local paths is supported)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from olmo.config import TrainConfig
from olmo.recipe import to_yaml

CLI = Callable[..., tuple[int, str, str]]

REFUSED = [
    ("fp8-without-float8-tensor-cores", ["precision=fp8"], "float8 tensor cores"),
    ("flash-attn-on-cpu", ["model.attn_backend=flash_attn"], "needs a CUDA device"),
    ("flash-attn-3-on-cpu", ["model.attn_backend=flash_attn_3"], "needs a CUDA device"),
    ("xformers-on-cpu", ["model.attn_backend=xformers"], "needs a CUDA device"),
    ("flex-on-cpu", ["model.attn_backend=flex"], "CUDA devices only"),
    ("mps", ["device=mps"], "not one olmo trains on"),
    ("xla", ["device=xla"], "not one olmo trains on"),
    ("meta", ["device=meta"], "not one olmo trains on"),
    ("not-a-device", ["device=gpu0"], "not a torch device"),
    ("run-dir-s3", ["run_dir=s3://bucket/run"], "is a URL"),
    ("run-dir-hf", ["run_dir=hf://org/model"], "is a URL"),
    ("data-gs", ["data.paths=[gs://bucket/tokens]"], "is a URL"),
    ("data-https", ["data.paths=[https://example.com/tokens]"], "is a URL"),
    ("init-from-http", ["init_from=http://example.com/ckpt"], "is a URL"),
]
if not torch.cuda.is_available():
    REFUSED.append(("cuda-without-cuda", ["device=cuda"], "cannot use CUDA here"))


@pytest.fixture(autouse=True)
def no_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo.cli.gate

    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    monkeypatch.delenv("OLMO_FP8_EMULATION", raising=False)


@pytest.mark.parametrize("how", ["recipe", "smoke"])
@pytest.mark.parametrize(("case", "sets", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_promised_refusal_holds_on_this_device(case: str, sets: list[str], words: str, how: str, cli: CLI,
                                                 tmp_path: Path, tiny_data: Path,
                                                 micro: Callable[..., TrainConfig]) -> None:
    overrides = [a for s in sets for a in ("--set", s)]
    if how == "recipe":
        cfg = micro(tiny_data, tmp_path / "run", steps=2)
        recipe = tmp_path / "r.yaml"
        recipe.write_text(to_yaml(cfg))
        argv = ["train", str(recipe), *overrides]
    else:
        argv = ["train", "--smoke", "--steps", "4", "--keep", str(tmp_path / "keep"), *overrides]
    code, out, err = cli(*argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and words in lines[0], err
    assert "Traceback" not in err + out and "step " not in out
    assert not list(tmp_path.rglob("step*")) and not list(Path(".").glob("s3:*"))


def test_cuda_graph_off_a_gpu_is_ignored_with_a_warning(cli: CLI, tmp_path: Path) -> None:
    code, out, err = cli("train", "--smoke", "--steps", "4", "--device", "cpu", "--set", "cuda_graph=true")
    assert code == 0 and "cuda_graph is on but ignored" in out + err, err


def test_an_empty_device_is_refused(cli: CLI) -> None:
    code, _, err = cli("train", "--smoke", "--device", "")
    assert code == 2 and err.strip() == "olmo: --device is empty; give auto, cpu, cuda or cuda:N"

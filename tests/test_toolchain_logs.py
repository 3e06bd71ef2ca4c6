"""`diagnose` on the toolchain causes (OD1xx signatures): the project's own log fixtures and the public corpus
cases of these causes must name the right root cause first."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import CORPUS

from olmo_doctor import tables
from olmo_doctor.diagnose import diagnose_file, diagnose_text
from olmo_doctor.facts import Facts
from olmo_doctor.rules.model import load_rules

ROOT = Path(__file__).resolve().parent
LOGS = ROOT / "fixtures" / "logs"

RULES = load_rules()
TOOLCHAIN_CAUSES = sorted({r.cause for r in RULES if r.code.startswith("OD1") and r.signatures} - {"no_gpu"})
FIXTURES = sorted(p for cause in TOOLCHAIN_CAUSES for p in (LOGS / cause).glob("*.log"))
VERSION = re.compile(r"\d+\.\d+(?:\.\d+)*(?:\+\w+)?")


def test_every_toolchain_cause_has_two_fixtures() -> None:
    for cause in TOOLCHAIN_CAUSES:
        assert len(list((LOGS / cause).glob("*.log"))) >= 2, f"tests/fixtures/logs/{cause}/ needs >= 2 logs"


@pytest.mark.parametrize("path", FIXTURES, ids=[f"{p.parent.name}/{p.name}" for p in FIXTURES])
def test_fixture_root_cause_ranks_first(path: Path) -> None:
    findings = diagnose_file(path)
    assert findings, f"nothing recognised in {path.name}"
    assert findings[0].cause == path.parent.name, [(f.code, f.cause, f.confidence) for f in findings[:3]]
    assert findings[0].matched_lines, "the root cause must quote the log line it matched"


def test_accepted_minor_mismatch_is_not_a_cause() -> None:
    """DeepSpeed's 'accepting this combination' line and torch's minor-mismatch warning are not failures."""
    log = (
        "Installed CUDA version 12.6 does not match the version torch was compiled with 12.4 but since the APIs "
        "are compatible, accepting this combination\n"
        "UserWarning: The detected CUDA version (12.6) has a minor version mismatch with the version that was "
        "used to compile PyTorch (12.4). Most likely this shouldn't be a problem.\n"
    )
    findings = diagnose_text(log)
    assert all(f.code != "OD110" for f in findings)


def env_facts(env: dict[str, str]) -> Facts:
    """The corpus `env` (free text per key) as the facts a pasted report would give."""
    facts: Facts = {}
    if m := VERSION.search(env.get("driver", "")):
        facts["driver.version"] = m.group(0)
    if m := VERSION.search(env.get("python", "")):
        facts["python.version"] = m.group(0)
    if m := VERSION.search(env.get("cuda_nvcc", "")):
        facts["nvcc.version"] = ".".join(m.group(0).split(".")[:2])
    torch = env.get("torch", "")
    if (m := VERSION.match(torch.strip())) is not None:
        facts["torch.version"] = m.group(0)
        if cu := re.search(r"\+cu(\d+)(\d)\b", m.group(0)):
            facts["torch.cuda"] = f"{cu.group(1)}.{cu.group(2)}"
    elif m := re.search(r"built with CUDA (\d+\.\d+)", torch):
        facts["torch.cuda"] = m.group(1)
    if gpu := env.get("gpu"):
        name = re.sub(r"^\d+x\s*", "", gpu).split("(")[0].strip()
        cc = tables.gpu_name_to_cc(name)
        facts.update({"gpu.count": 1, "gpu.0.name": name, **({"gpu.0.compute_capability": cc} if cc else {})})
    return facts


def _corpus() -> list[dict[str, object]]:
    cases = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    return [c for c in cases if c["category"] in TOOLCHAIN_CAUSES]


CASES = _corpus()
assert CASES, f"{CORPUS} holds no toolchain case"


def test_corpus_toolchain_cases_rank_the_confirmed_cause_first() -> None:
    results = []
    for case in CASES:
        findings = diagnose_text(str(case["log"]), env_facts(case["env"]))  # type: ignore[arg-type]
        top = findings[0].cause if findings else None
        results.append((case["id"], case["category"], top))
    correct = sum(expected == top for _, expected, top in results)
    print(f"toolchain corpus: {correct}/{len(results)} correct")
    assert correct == len(results), [r for r in results if r[1] != r[2]]


def test_corpus_toolchain_cases_without_facts() -> None:
    """From the log alone every case but the silent driver one (its log is only `is_available()` / `False`)."""
    for case in CASES:
        findings = diagnose_text(str(case["log"]))
        if case["category"] == "driver_too_old":
            continue
        assert findings and findings[0].cause == case["category"], case["id"]


TOOLCHAIN_RULES = [r for r in RULES if r.code.startswith("OD1") and r.signatures]


@pytest.mark.parametrize("rule", TOOLCHAIN_RULES, ids=[r.code for r in TOOLCHAIN_RULES])
def test_diagnose_example_lines(rule) -> None:
    """Each rule's [diagnose] fires / quiet example lines match / do not match its signatures."""
    hints = rule.diagnose
    assert hints.get("title") and hints.get("fires"), f"{rule.code}: add a [diagnose] title and example lines"
    for line in hints["fires"]:
        assert any(s.pattern.search(line) for s in rule.signatures), f"{rule.code} misses {line!r}"
    for line in hints.get("quiet", []):
        assert not any(s.pattern.search(line) for s in rule.signatures), f"{rule.code} wrongly matches {line!r}"

"""`diagnose` on the corpus of real failure logs: the confirmed cause must come first for every case.

The corpus is tests/fixtures/corpus/failure_logs.jsonl (real reports from public issue trackers). Each case's
`env` (what the reporter stated about the machine) is turned into the facts a report would give, as `--report`
does.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helpers import CORPUS

from olmo_doctor.compat.gpus import name_to_cc
from olmo_doctor.diagnose import diagnose_text
from olmo_doctor.facts import Facts


def load_cases() -> list[dict[str, Any]]:
    """Every case of the corpus; a missing corpus file fails the collection loudly."""
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def _version(text: str) -> str | None:
    m = re.match(r"\s*v?(\d+(?:\.\d+)+(?:\.post\d+)?(?:\+\w+)?)", text)
    return m.group(1) if m else None


def env_facts(env: dict[str, str]) -> Facts:
    """What a report of the reporter's machine would say, from the case's free-text `env` fields."""
    facts: Facts = {}
    if torch := env.get("torch"):
        facts["torch.version"] = _version(torch)
        cuda = re.search(r"\+cu(\d+)(\d)\b", torch) or re.search(r"CUDA (\d+)\.(\d+)", torch)
        facts["torch.cuda"] = f"{cuda.group(1)}.{cuda.group(2)}" if cuda else None
    if nvcc := env.get("cuda_nvcc"):
        facts["nvcc.version"] = ".".join((_version(nvcc) or "").split(".")[:2]) or None
    if python := env.get("python"):
        facts["python.version"] = _version(python)
    if driver := env.get("driver"):
        facts["driver.version"] = _version(driver)
        cuda = re.search(r"CUDA (\d+\.\d+)", driver)
        facts["driver.cuda_version"] = cuda.group(1) if cuda else None
    if gpu := env.get("gpu"):
        m = re.match(r"\s*(\d+)\s*x\s*(.*)", gpu)
        count, name = (int(m.group(1)), m.group(2)) if m else (1, gpu)
        name = re.sub(r"\s*\(.*", "", name).strip()
        sm = re.search(r"sm_(\d+)(\d)", gpu)
        cc = f"{sm.group(1)}.{sm.group(2)}" if sm else name_to_cc(name)
        memory = re.search(r"(\d+)\s*GB", gpu)
        facts["gpu.count"] = count
        for i in range(count):
            facts[f"gpu.{i}.name"] = name
            facts[f"gpu.{i}.compute_capability"] = cc
            if memory:
                facts[f"gpu.{i}.memory_gb"] = float(memory.group(1))
        if "no nvlink" in gpu.lower():
            facts["gpu.nvlink"] = False
    if os_text := env.get("os"):
        facts["os.name"] = os_text
        facts["os.wsl"] = "wsl" in os_text.lower()
        facts["os.container"] = "container" if re.search(r"container|docker", os_text, re.I) else False
        if ram := re.search(r"(\d+)\s*GB RAM", os_text):
            facts["mem.total_gb"] = float(ram.group(1))
        if cores := re.search(r"(\d+)-core", os_text):
            facts["cpu.count"] = int(cores.group(1))
    return facts


CASES = load_cases()


def test_every_corpus_case_names_its_cause_first(capsys: pytest.CaptureFixture[str]) -> None:
    wrong = []
    for case in CASES:
        findings = diagnose_text(case["log"], env_facts(case.get("env") or {}))
        got = findings[0].cause if findings else "nothing"
        if got != case["category"]:
            wrong.append(f"{case['id']}: expected {case['category']}, got {got} "
                         f"({', '.join(f'{f.cause} {f.confidence}' for f in findings[:3])})")
    with capsys.disabled():
        print(f"\ndiagnose corpus: {len(CASES) - len(wrong)}/{len(CASES)} correct")
    assert not wrong, "\n".join(wrong)


def test_corpus_logs_alone_mostly_suffice() -> None:
    """Without the env facts the log must still carry the diagnosis for all but the cases that need facts."""
    needs_facts = {"driver_too_old"}  # `is_available() -> False` alone cannot tell a too-old driver from a CPU torch
    for case in CASES:
        if case["category"] in needs_facts:
            continue
        findings = diagnose_text(case["log"])
        assert findings and findings[0].cause == case["category"], case["id"]
        assert findings[0].matched_lines, f"{case['id']}: the root cause must quote the log lines"


def test_quoted_line_numbers_point_at_the_quoted_text() -> None:
    for case in CASES:
        lines = case["log"].split("\n")
        for finding in diagnose_text(case["log"], env_facts(case.get("env") or {})):
            for m in finding.matched_lines:
                first = lines[m.line - 1].strip()
                assert (first and first[:20] in m.text) or m.text[:20] in first, (case["id"], m)

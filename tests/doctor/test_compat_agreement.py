"""One answer from olmo_doctor/compat/ wherever it is asked: for every driver floor in the tables (and the driver
just below it), every compute capability of the GPU table, mixed machines and the Python range's edges,

- install.sh's `python3 -m olmo_doctor.compat pick` (run by a bare Python, as install.sh runs it before any venv),
- the rules: the wheel rules that fire (OD105, OD147, OD148, OD180, OD181) and `torch_index()`,
- the fixes: the index OD155's fix command and reinstall_torch action name,
- build-kernels: the refusals its plan carries, and the compute capability it resolves from a GPU name,

give the same answer. The drivers of install.sh's dry run are checked at the floors the answer changes at.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from olmo_doctor.build.plan import BuildRequest, plan_build, target_ccs
from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.compat import drivers, gpus, pick, versions, wheels
from olmo_doctor.compat.release import release
from olmo_doctor.facts import Facts
from olmo_doctor.rules.engine import fires, run_rules, to_finding
from olmo_doctor.rules.expr import FUNCTIONS, Unknown, evaluate
from olmo_doctor.rules.model import load_rules

ROOT = Path(__file__).resolve().parents[2]
WHEEL_RULES = ("OD105", "OD147", "OD148", "OD180", "OD181")
RULES = {r.code: r for r in load_rules()}


def _just_below(version: str) -> str:
    """'525.60.13' -> '525.60.12', '570.26' -> '570.25.99', '580.65.06' -> '580.65.05'."""
    parts = version.split(".")
    if int(parts[-1]) > 0:
        return ".".join([*parts[:-1], str(int(parts[-1]) - 1).zfill(len(parts[-1]))])
    return ".".join([*parts[:-2], str(int(parts[-2]) - 1), "99"])


FLOORS = sorted({*drivers.DRIVER_FLOOR_LINUX.values(), *drivers.DRIVER_FLOOR_MAJOR.values()}, key=release)
DRIVERS = sorted({"418.87.01", "999.1", *FLOORS, *map(_just_below, FLOORS)}, key=release)
CCS = sorted({cc for _, _, rows in gpus.FAMILIES for _, cc in rows} | {"8.9", "9.0"}, key=release)
MACHINES: list[tuple[str | None, ...]] = [
    *[(cc,) for cc in CCS], (None,), ("7.0", "9.0"), ("7.0", "10.0"), ("6.1", "12.0"), ("9.0", "9.0"),
]


def _python_edges() -> set[str]:
    """The oldest and newest Python of each current index's last torch, and the minor just outside each."""
    out: set[str] = set()
    for index in wheels.CURRENT_GPU_INDEXES:
        for edge in wheels.TORCH_PYTHON[index.torch_last]:
            major, minor = release(edge)[:2]
            out |= {f"{major}.{minor - 1}.0", f"{major}.{minor}.0", f"{major}.{minor + 1}.0"}
    return out


PYTHONS = sorted(_python_edges(), key=release)


def _rows(driver: str) -> Iterator[tuple[str, tuple[str | None, ...], str]]:
    yield from ((driver, ccs, py) for ccs, py in itertools.product(MACHINES, PYTHONS))


def _cli_args(driver: str | None, ccs: tuple[str | None, ...], python: str) -> list[str]:
    args = ["pick", "--python", python] + (["--driver", driver] if driver else [])
    return args + [a for i, cc in enumerate(ccs) for a in ("--gpu", f"GPU {i}|{cc or ''}")]


# Runs each row through the pick command's own main() in one bare interpreter (-S: no site-packages, so nothing
# but the standard library is importable), then reports which modules it had to load.
_BARE = """
import contextlib, io, json, sys
from olmo_doctor.compat.pick import main
out = []
for argv in json.load(sys.stdin):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    out.append([code, dict(line.split("=", 1) for line in buf.getvalue().splitlines())])
foreign = sorted(m for m in sys.modules if m.split(".")[0] not in sys.stdlib_module_names | {"olmo_doctor", "__main__"})
print(json.dumps({"answers": out, "foreign": foreign}))
"""


@pytest.fixture(scope="module")
def command_answers() -> dict[str, tuple[int, dict[str, str]]]:
    rows = [_cli_args(*row) for driver in DRIVERS for row in _rows(driver)]
    rows += [_cli_args(None, (), "3.12.3")]
    proc = subprocess.run([sys.executable, "-S", "-c", _BARE], input=json.dumps(rows), capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["foreign"] == [], f"the pick command imported more than the standard library: {got['foreign']}"
    return {json.dumps(argv): tuple(answer) for argv, answer in zip(rows, got["answers"], strict=True)}


def _facts(driver: str, ccs: tuple[str | None, ...], python: str) -> Facts:
    facts: Facts = {"gpu.count": len(ccs), "driver.version": driver, "python.version": python, "os.arch": "x86_64",
                    "torch.version": f"{wheels.LATEST_TORCH}.0+cpu", "torch.cuda": None}
    for i, cc in enumerate(ccs):
        facts[f"gpu.{i}.name"] = f"GPU {i}"
        facts[f"gpu.{i}.compute_capability"] = cc
    return facts


def _rule_index(facts: Facts) -> str | None:
    try:
        return str(evaluate("torch_index()", facts))
    except Unknown:
        return None


def _fix_index(facts: Facts) -> str | None:
    """The index OD155's unsafe fix (install torch's CUDA build) names, in its command and in its action."""
    fired, extra, bound = fires(RULES["OD155"], facts)
    assert fired
    fix = next(f for f in to_finding(RULES["OD155"], bound, extra).fixes if f.action)
    action: Any = fix.action
    index = action["index"] if isinstance(action, dict) else action[0]["index"]
    assert fix.commands[-1].endswith(f"/whl/{index}"), fix.commands
    return None if index == "unknown" else str(index)


@pytest.mark.parametrize("driver", DRIVERS)
def test_install_command_rules_and_fixes_give_one_answer(driver: str, command_answers: dict[str, Any]) -> None:
    for _, ccs, python in _rows(driver):
        row = (driver, ccs, python)
        code, out = command_answers[json.dumps(_cli_args(*row))]
        chosen = pick.choose(driver, list(ccs), python)
        expected = chosen.index or chosen.fallback
        # install.sh's view: the command prints the index, or refuses naming the rule (exit 3)
        assert (out.get("index"), out.get("refuse")) == (chosen.index and chosen.index.name, chosen.refuse), row
        assert code == (3 if chosen.refuse else 0), row
        facts = _facts(*row)
        fired = {c for c in WHEEL_RULES if fires(RULES[c], facts)[0]}
        assert (chosen.refuse is None) == (not fired) and (chosen.refuse is None or chosen.refuse in fired), (
            row, fired, chosen)
        want = expected.download_name if expected else None
        assert _rule_index(facts) == want, row
        if python == PYTHONS[1]:  # the rendered fix reads the same function; once per machine is enough
            assert _fix_index(facts) == want, row


@pytest.mark.parametrize("driver", DRIVERS)
def test_build_kernels_refuses_with_the_rule_install_sh_names(driver: str) -> None:
    recipe = find_recipe("flash-attn", None)
    for ccs in MACHINES:
        facts: Facts = {**_facts(driver, ccs, "3.12.3"), "torch.version": "2.14.0+cu126", "torch.cuda": "12.6"}
        refusal = pick.choose(driver, list(ccs), "3.12.3").refuse
        findings = run_rules(facts, scope="install", rules=[RULES[c] for c in WHEEL_RULES])
        blockers = {f.code for f in plan_build(facts, recipe, BuildRequest("flash-attn"), findings).blockers}
        assert (refusal in blockers) if refusal else not blockers & set(WHEEL_RULES), (driver, ccs, blockers)


def test_no_gpu_gets_the_cpu_build_from_the_command(command_answers: dict[str, Any]) -> None:
    code, out = command_answers[json.dumps(_cli_args(None, (), "3.12.3"))]
    assert code == 0 and out["index"] == "cpu"


# Real names as nvidia-smi, NVML and collect_env print them, one or more per generation.
GPU_NAMES = ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "NVIDIA GB10", "NVIDIA GeForce RTX 5090",
             "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA L40S", "NVIDIA GeForce RTX 4090",
             "NVIDIA A100-SXM4-80GB", "NVIDIA A10G", "NVIDIA GeForce RTX 3090", "Tesla T4", "Quadro RTX 8000",
             "Tesla V100-SXM2-32GB", "Tesla P100-PCIE-16GB", "NVIDIA GeForce GTX 1080 Ti", "Tesla M60",
             "Tesla K80", "NVIDIA Jetson AGX Orin", "NVIDIA Jetson AGX Thor", "NVIDIA Future GPU 9000"]


@pytest.mark.parametrize("name", GPU_NAMES)
def test_a_gpu_name_means_one_compute_capability_everywhere(name: str) -> None:
    by_install = pick.gpu_ccs([f"{name}|"])[0]  # old nvidia-smi: no compute_cap field, the name is looked up
    by_rules = FUNCTIONS["gpu_name_to_cc"](name) if gpus.name_to_cc(name) else None
    _, by_build = target_ccs({"gpu.count": 1, "gpu.0.name": name}, BuildRequest("flash-attn"))
    assert [by_install] * 2 == [by_rules, by_build[0] if by_build else None]
    assert (by_install is None) == (name == "NVIDIA Future GPU 9000")
    # and the machine it makes gets the same wheel whether the GPU came with its cc or only its name
    assert pick.pick("580.95.05", [by_install], "3.12.3") == pick.pick("580.95.05", pick.gpu_ccs([name]), "3.12.3")


def test_numeric_and_pep440_order_agree_on_every_value_of_the_tables() -> None:
    values = [*DRIVERS, *drivers.DRIVER_FLOOR_LINUX, *PYTHONS, *CCS, "570.26.0", "12.0", "12", "3.10.0"]
    for a, b in itertools.product(values, repeat=2):
        va, vb = versions.parse_version(a), versions.parse_version(b)
        assert va is not None and vb is not None
        assert (release(a) < release(b), release(a) == release(b)) == (va < vb, va == vb), (a, b)


def _bare_python(tmp_path: Path) -> Path:
    """An interpreter without site-packages, as on a machine where install.sh runs before any venv exists."""
    wrapper = tmp_path / "python3-bare"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.parametrize(("driver", "cc", "name"), [
    ("525.60.12", "9.0", "NVIDIA H100 80GB HBM3"), ("525.60.13", "9.0", "NVIDIA H100 80GB HBM3"),
    ("570.26", "9.0", "NVIDIA H100 80GB HBM3"), ("570.26", "12.0", "NVIDIA GeForce RTX 5090"),
    ("580.65.05", "12.0", "NVIDIA GeForce RTX 5090"), ("580.65.06", "9.0", "NVIDIA H200"),
    ("580.65.06", "7.0", "Tesla V100-SXM2-32GB"), ("470.57.02", "7.0", "Tesla V100-SXM2-32GB"),
])
def test_install_sh_dry_run_installs_what_the_fix_names(tmp_path: Path, driver: str, cc: str, name: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncase "$*" in\n  -L) echo "GPU 0: x";;\n  *) echo "{driver}, {cc}, {name}";;\nesac\n')
    smi.chmod(0o755)
    proc = subprocess.run(["bash", str(ROOT / "install.sh"), "--dry-run", "--python", str(_bare_python(tmp_path))],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path)})
    chosen = pick.choose(driver, [cc], None)
    rule = _rule_index(_facts(driver, (cc,), "3.12.3"))
    if chosen.index is None:
        assert proc.returncode == 2 and f"olmo-doctor explain {chosen.refuse}" in proc.stderr, proc.stderr
        fallback = chosen.fallback
        assert rule == (fallback.download_name if fallback else None)
        assert fallback is None or f"--torch-index {fallback.url}" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    url = chosen.index.url or f"{wheels.DOWNLOAD}{chosen.index.download_name}"  # PyPI carries cu130's files
    assert f"index: {chosen.index.url or 'PyPI, the default index'}" in proc.stdout
    assert url.endswith(f"/{rule}")

"""Reading a report is linear in its size, however hostile the text: every pattern of olmo_doctor/reports/ on
near-miss lines built from its own parse tree, and the whole reader on pastes made to provoke each reader (long
runs of names, of versions, of printouts, of tool lines), timed in CPU time at n and 4n bytes.

A linear reader takes about 4x as long on 4x the text; a quadratic one 16x. The bound (8x, plus a small constant
for timer noise on tiny inputs) passes any linear reader on a loaded machine and fails any quadratic one.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable

import pytest

from olmo_doctor import reports as reports_pkg
from olmo_doctor.report import parse_text
from tests._adversarial import build, recipes
from tests.scaling import assert_linear

NOISE_S = 0.02  # timer noise on the few-microsecond searches of an 8 KiB line


def _patterns() -> list[tuple[str, re.Pattern[str]]]:
    found = []
    for info in pkgutil.iter_modules(reports_pkg.__path__):
        module = importlib.import_module(f"olmo_doctor.reports.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                found.append((f"{info.name}.{name}", value))
        for sig in getattr(module, "LINES", ()):
            found.append((f"{info.name}.LINES[{sig.needle}]", sig.pattern))
    return found


PATTERNS = _patterns()


@pytest.mark.parametrize(("name", "pattern"), PATTERNS, ids=[n for n, _ in PATTERNS])
def test_every_reader_pattern_is_linear_on_near_miss_lines(name: str, pattern: re.Pattern[str]) -> None:
    for label, recipe in recipes(pattern.pattern).items():
        assert_linear(pattern.search, lambda n, r=recipe: build(r, n), 8 << 10, f"{name} ({label})", NOISE_S)


# Pastes that make each reader work: names without values, values without names, names a window apart,
# printouts without output, tool lines that almost match, a table of rows, brackets and quotes unclosed.
HOSTILE: dict[str, Callable[[int], str]] = {
    "alias storm": lambda n: ("torch python gcc driver nvcc cudnn " * (n // 36 + 1))[:n],
    "versions without names": lambda n: ("2.4.0+cu121 " * (n // 12 + 1))[:n],
    "name then filler": lambda n: "torch" + " version ...." * (n // 13),
    "lines of near misses": lambda n: "torch 2.4.0 [GCC 1.1] 8x GPUs A100 x9 torch 2.4 driver 5 nvcc 1.\n" * (n // 66),
    "printouts without output": lambda n: 'python -c "import torch; print(torch.__version__)"\n' * (n // 52),
    "repl expressions": lambda n: ">>> torch.__version__\n" * (n // 22),
    "pip list rows": lambda n: "".join(f"package-{i:06d}          1.{i}.0\n" for i in range(n // 30)),
    "capability warnings": lambda n: "RTX 5090 with CUDA capability sm_120 is not compatible\n" * (n // 55),
    "xformers headers": lambda n: "xFormers was built for:\n    PyTorch 2.0.1 (you have\n" * (n // 50),
    "smi headers": lambda n: "| NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version:\n" * (n // 66),
    "unclosed brackets": lambda n: "PyTorch (" * (n // 9) + "\n",
    "wheel name near misses": lambda n: ("torch-2.4.0-cp310-" * (n // 18 + 1))[:n] + "\n",
    "import errors": lambda n: "version `GLIBC_2.32' not found (required by /x/\n" * (n // 48),
    "gpu words": lambda n: ("2x RTX 3090 " * (n // 12 + 1))[:n],
    "documentation words": lambda n: ("olmo-doctor check " * (n // 18 + 1))[:n],
    "issue form fields": lambda n: "### Python version\n\n3.1\n" * (n // 24),
    "commands quoted in prose": lambda n: ("I ran `pip install torch` with torch 2.4 " * (n // 41 + 1))[:n] + "\n",
    "xformers lines without header": lambda n: "    PyTorch 2.0.1 with CUDA 1201 (you have 2.1.0)\n" * (n // 50),
    "too-old-GPU warnings": lambda n: "".join(f"Found GPU{i % 100} Tesla K{i} which is of cuda capability 3.7.\n"
                                              for i in range(n // 50)),
    "listed GPUs and warnings": lambda n: "".join(
        f"GPU {i % 8}: NVIDIA RTX A{i}\nNVIDIA RTX A{i} with CUDA capability sm_86 is not compatible\n"
        for i in range(n // 80)),
    "wsl mounts": lambda n: ("/mnt/c/Users/a " * (n // 15 + 1))[:n] + "\n",
    "conda rows with columns": lambda n: "pytorch 2.5.1 cuda126_py312h 35.3 MiB conda https://x/ a b c d\n" * (n // 60),
    "xformers.info fields": lambda n: "pytorch.version:   2.4.0+cu121 x\nbuild.torch_version:   \n" * (n // 50),
    "dkms rows": lambda n: "nvidia-current, 470.199.02, 5.10.0-26-amd64, x86_64, a, b\n" * (n // 58),
    "compact tags": lambda n: ("py310-torch231-cu12 py3.10_torch2.3-cu121 " * (n // 42 + 1))[:n] + "\n",
    "alternatives": lambda n: ("Python Version: 3.10/3.11/3.12 or 3.13 | " * (n // 41 + 1))[:n] + "\n",
    "glued GPU models": lambda n: ("GPU3090GPU: 4090 GPU 5090x 8x 4090*2080ti 3090 x " * (n // 49 + 1))[:n] + "\n",
    "alternate name and value lines": lambda n: "torch\n2.4\npython\n" * (n // 17),
    "gpu index lists": lambda n: ("GPU 0,1,2,3,4,5,6,7,8,9,1,2,3,4,5,6,7: x\n" * (n // 40 + 1))[:n],
    "markdown wheel links": lambda n: ("torch: [torch-2.4.0-cp310-cp310-x.whl](https://x/" * (n // 50 + 1))[:n] + "\n",
    "release news": lambda n: ("pytorch 2.11 changes the stable version on PyPI; the script builds torch " *
                               (n // 73 + 1))[:n] + "\n",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_reading_a_hostile_paste_is_linear(kind: str) -> None:
    def run(text: str) -> object:
        try:
            return parse_text(text)
        except Exception as e:  # a refusal is a fine answer; the time to reach it is what is measured
            return e

    assert_linear(run, HOSTILE[kind], 24 << 10, kind, NOISE_S)

"""The free-text reader's vocabulary x value shapes: each fact in every way people write it, and the contexts that
make a mention something other than a fact about this machine (a requirement, an intent, a denial, another
thing's build, a comparison, a path). Lines are tested one at a time through the whole reader (report.parse_text),
so signatures, printouts and mentions all get their say."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.facts import FactValue
from olmo_doctor.report import load_report, parse_text
from olmo_doctor.reports.vocabulary import cuda_from_int, cudnn_version

READ: list[tuple[str, dict[str, FactValue]]] = [
    # torch, every spelling and separator
    ("torch==2.5.1", {"torch.version": "2.5.1"}),
    ("pytorch=2.2.0", {"torch.version": "2.2.0"}),
    ("PyTorch : 2.0.1+cu117", {"torch.version": "2.0.1+cu117"}),
    ("- **PyTorch**: `2.4.0`", {"torch.version": "2.4.0"}),
    ("the version torch is 2.0.1", {"torch.version": "2.0.1"}),
    ("torch.__version__ → 2.9.1+cpu", {"torch.version": "2.9.1+cpu"}),
    ("torch.__version__ -> 2.6.0", {"torch.version": "2.6.0"}),
    ("torch version .................... 2.3.0+cu121", {"torch.version": "2.3.0+cu121"}),
    ("torch                     2.1.0+cu121", {"torch.version": "2.1.0+cu121"}),
    ("* PyTorch version:torch2.8.0+cu128", {"torch.version": "2.8.0+cu128"}),
    # whose CUDA: torch's
    ("PyTorch index: `cu121`", {"torch.cuda": "12.1"}),
    ("PyTorch: 2.2.0 (installed via conda, compiled with CUDA 11.8)", {"torch.version": "2.2.0", "torch.cuda": "11.8"}),
    ("torch.version.cuda: 12.4", {"torch.cuda": "12.4"}),
    ("torch cuda version ............... 12.1", {"torch.cuda": "12.1"}),
    # whose CUDA: the toolkit's
    ("Build cuda_12.1.r12.1/compiler.32688072_0", {"nvcc.version": "12.1"}),
    ("- cuda_12.1", {"nvcc.version": "12.1"}),
    ("System CUDA (nvcc): 12.9", {"nvcc.version": "12.9"}),
    ("nvcc version ..................... 12.0", {"nvcc.version": "12.0"}),
    ("Cuda compilation tools, release 12.4, V12.4.131", {"nvcc.version": "12.4", "nvcc.full_version": "12.4.131"}),
    # whose CUDA: the driver's
    ("| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |",
     {"driver.version": "535.104.05", "driver.cuda_version": "12.2"}),
    ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).",
     {"driver.cuda_version": "11.4"}),
    ("nvidia-smi shows CUDA 12.2 and driver 535.104.05",
     {"driver.cuda_version": "12.2", "driver.version": "535.104.05"}),
    ("nvcc -V shows 12.1", {"nvcc.version": "12.1"}),
    # compilers and C libraries
    ("I'm using GCC 14 and CUDA 12.8", {"gcc.version": "14"}),
    ("- GCC & G++: 14.3.0", {"gcc.version": "14.3.0"}),
    ("gcc (Ubuntu 13.2.0-23ubuntu4) 13.2.0", {"gcc.version": "13.2.0"}),
    ("gcc version 10.2.1 20210110 (Debian 10.2.1-6)", {"gcc.version": "10.2.1"}),
    ("-- The CXX compiler identification is GNU 15.2.0", {"gcc.version": "15.2.0"}),
    ("glibc 2.41 with CUDA 12.8.93", {"glibc.version": "2.41"}),
    ("ldd (Ubuntu GLIBC 2.35-0ubuntu3.8) 2.35", {"glibc.version": "2.35"}),
    ("Platform: Linux-5.15.0-107-generic-x86_64-with-glibc2.31", {"glibc.version": "2.31"}),
    # Python
    ("ubuntu 18.04     python3.7.10", {"python.version": "3.7.10"}),
    ("Python版本：3.10.11", {"python.version": "3.10.11"}),
    ("Python 3.10.18 | packaged by Anaconda, Inc. | (main, Jun  5 2025) [MSC v.1929 64 bit (AMD64)] on win32",
     {"python.version": "3.10.18"}),
    ("torch-2.3.1-cp312-cp312-manylinux_2_28_x86_64.whl", {"torch.version": "2.3.1", "python.version": "3.12"}),
    # cuDNN in both forms, printed expressions with = and values
    ("cuDNN 8500", {"torch.cudnn": "8.5.0"}),  # the integer form is torch.backends.cudnn.version()'s
    ("cudnn version: 9.1.0", {"cudnn.version": "9.1.0"}),
    ("torch.cuda.is_available() = False", {"torch.cuda_available": False}),
    ("torch.backends.cudnn.version() = 90100", {"torch.cudnn": "9.1.0"}),
    ("NCCL version 2.21.5+cuda12.4", {"torch.nccl": "2.21.5+cuda12.4"}),
    # kernels and tools
    ("flash-attn==2.7.4.post1", {"flash_attn.version": "2.7.4.post1"}),
    ("flash_attn               2.8.2", {"flash_attn.version": "2.8.2"}),
    ("FA3: 3.0.0b1", {"flash_attn_3.version": "3.0.0b1"}),
    ("xformers 0.0.28.post3", {"xformers.version": "0.0.28.post3"}),
    ("torchao==0.13.0", {"torchao.version": "0.13.0"}),
    ("setuptools                68.0.0", {"setuptools.version": "68.0.0"}),
    ("pip 24.0 from /usr/lib/python3/dist-packages/pip (python 3.12)",
     {"pip.version": "24.0", "python.version": "3.12"}),
    ("transformers==4.48.0", {"python.packages": ["transformers==4.48.0"]}),
    ("deepspeed info ................... 0.15.5+unknown, unknown, unknown",
     {"python.packages": ["deepspeed==0.15.5+unknown"]}),
    ("triton 3.1.0", {"python.packages": ["triton==3.1.0"]}),
    ("vllm==0.6.3.post1", {"python.packages": ["vllm==0.6.3.post1"]}),
]


@pytest.mark.parametrize(("line", "expected"), READ, ids=[r[0][:50] for r in READ])
def test_a_mention_in_any_common_shape_is_read(line: str, expected: dict[str, FactValue]) -> None:
    facts = parse_text(line + "\n")
    assert {k: facts.get(k) for k in expected} == expected


NOT_FACTS: list[tuple[str, tuple[str, ...]]] = [
    ("requires torch 2.6 or newer", ("torch.version",)),
    ("torch 2.6+ is required", ("torch.version",)),
    ('    "torch>=2.7.1",', ("torch.version",)),
    ("I took the cu128 wheel instead of torch 2.4", ("torch.version",)),
    ("this is not python 3.12", ("python.version",)),
    ("FlashAttention supports CUDA 11.6 and above", ("nvcc.version",)),
    ("please upgrade to torch 2.6", ("torch.version",)),
    ("deepspeed wheel compiled w. ...... torch 1.9, cuda 11.1", ("torch.version", "torch.cuda")),
    ("xformers was built for torch 2.0.1", ("torch.version",)),
    ("other environments, including CUDA 11.x and PyTorch ≤ 2.7", ("torch.version",)),
    ("e.g. torch 2.1", ("torch.version",)),
    ("pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124", ("torch.version", "torch.cuda")),
    ("ERROR: No matching distribution found for torch==1.13.1", ("torch.version",)),
    ("/usr/local/lib/python3.10/site-packages/torch/__init__.py", ("python.version", "torch.version")),
    ("Python 3.10.12 (main, Nov 20 2023) [GCC 11.4.0] on linux", ("gcc.version",)),
    ("CUDA 12.1", ("nvcc.version", "torch.cuda", "driver.cuda_version")),  # whose CUDA? not said
    ("cuda is 11.8", ("nvcc.version", "torch.cuda", "driver.cuda_version")),
    ("torchvision 0.19.1 torchaudio 2.4.1 torch-grammar 0.3.3", ("torch.version",)),
    ("ImportError: version `GLIBC_2.32' not found (required by x.so)", ("glibc.version",)),
    ("torch 2.1 vs torch 2.4", ("torch.version",)),  # two machines or attempts: unknown
    ("| NVIDIA-SMI 545.46   Driver Version: 546.80   CUDA Version: ERR!   |", ("driver.cuda_version",)),
]


@pytest.mark.parametrize(("line", "unread"), NOT_FACTS, ids=[r[0][:50] for r in NOT_FACTS])
def test_a_requirement_negation_or_other_context_is_not_a_fact(line: str, unread: tuple[str, ...]) -> None:
    facts = parse_text(line + "\n")
    assert [k for k in unread if k in facts] == []


def test_the_smi_number_is_not_the_driver() -> None:
    # under WSL nvidia-smi's own version differs from the Windows driver it reports
    facts = parse_text("| NVIDIA-SMI 545.46   Driver Version: 546.80   CUDA Version: ERR!   |\n")
    assert facts["driver.version"] == "546.80"


def test_value_conversions() -> None:
    assert cudnn_version("8902") == "8.9.2" and cudnn_version("90100") == "9.1.0" and cudnn_version("8.9") == "8.9"
    assert cuda_from_int("11040") == "11.4" and cuda_from_int("12020") == "12.2" and cuda_from_int("7") is None


def test_printouts_map_values_to_the_expressions_that_printed_them() -> None:
    text = ('$ python -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"\n'
            "2.5.1+cpu None False\n")
    facts = parse_text(text)
    assert facts["torch.version"] == "2.5.1+cpu" and facts["torch.cuda_available"] is False
    repl = ">>> import torch\n>>> torch.__version__\n'2.7.1+cu126'\n>>> flash_attn.__version__\n'2.8.3'\n"
    facts = parse_text(repl)
    assert facts["torch.version"] == "2.7.1+cu126" and facts["flash_attn.version"] == "2.8.3"
    # a print of labels prints the names itself: the output line is read like any other
    labelled = "python -c \"import torch; print('torch', torch.__version__)\"\ntorch 2.6.0\n"
    assert parse_text(labelled)["torch.version"] == "2.6.0"


def test_a_requirement_beside_a_fact_keeps_the_fact() -> None:
    # requirement words act on their own clause, not the whole line
    facts = parse_text("my requirements.txt has torch==2.1.0 but I installed torch 2.5.1 instead\n")
    assert facts["torch.version"] == "2.5.1"
    assert "os.wsl" not in parse_text("I'm not using WSL2; torch 2.4.1 on bare metal\n")


def test_newer_env_commands_and_url_wheels() -> None:
    # transformers / accelerate env from 2024 on: "(accelerator?)" and the accelerator's name
    facts = parse_text("- PyTorch version (accelerator?): 2.5.1+cu124 (CUDA)\n")
    assert facts["torch.version"] == "2.5.1+cu124" and facts["torch.cuda_available"] is True
    # pip freeze of a wheel installed from a URL: its "+" escaped as %2B
    line = "torch @ https://download.pytorch.org/whl/cu121/torch-2.1.0%2Bcu121-cp310-cp310-linux_x86_64.whl\n"
    assert parse_text(line)["torch.version"] == "2.1.0+cu121"


def test_cudnn_in_torchs_integer_form_is_a_version_not_an_impossible_value(tmp_path: Path) -> None:
    # a labelled line and a hand-written one alike: 8500 is cuDNN 8.5.0, and the report is judged. The integer form
    # is what torch.backends.cudnn.version() prints (collect_env names the system's cuDNN by its library's dotted
    # release), so it is torch's cuDNN (cases6.toml 513: a script printing torch's version, CUDA and cuDNN)
    path = tmp_path / "r.txt"
    path.write_text("PyTorch version: 2.7.1+cu126\nIs debug build: False\nCUDA used to build PyTorch: 12.6\n"
                    "cuDNN version: 8500\n")
    assert load_report(path)["torch.cudnn"] == "8.5.0"
    path.write_text("torch 2.7.1, cudnn 90100\n")
    assert load_report(path)["torch.cudnn"] == "9.1.0"

"""The report reader on the families the second corpus (tests/fixtures/report_corpus/cases2.toml) found it missing,
each as a family: a neighbour (another text of the same kind, worded differently) that must read the same, and a
trap (a text that looks alike but states something else) that must not. Texts go through the whole reader
(report.parse_text), so signatures, printouts, forms and mentions all get their say."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.facts import FactValue
from olmo_doctor.report import load_report, parse_text

READ: list[tuple[str, str, dict[str, FactValue]]] = [
    # a word saying which build between the name and its value: nightly, stable, wheel, build
    ("build word", "I use the latest PyTorch nightly (2.7.0.dev20250301+cu128) now",
     {"torch.version": "2.7.0.dev20250301+cu128", "torch.cuda": "12.8"}),
    ("build word", "torch stable 2.5.1 from pip", {"torch.version": "2.5.1"}),
    ("build word", "* Flash-Attention wheel: 2.7.4.post1", {"flash_attn.version": "2.7.4.post1"}),
    ("build word", "xformers build 0.0.29.post1", {"xformers.version": "0.0.29.post1"}),
    # a CUDA named by its full release is still compared as major.minor; the toolkit keeps its release
    ("full release", "cuda-toolkit                 12.9.1          0    conda",
     {"nvcc.version": "12.9", "nvcc.full_version": "12.9.1"}),
    ("full release", "nvcc version: 12.4.131", {"nvcc.version": "12.4", "nvcc.full_version": "12.4.131"}),
    ("full release", "torch.version.cuda = 12.1.105", {"torch.cuda": "12.1"}),
    # Python has no local build tag
    ("python tag", "python 3.12.7+gc", {"python.version": "3.12.7"}),
    ("python tag", "Python: 3.11.4+local (conda)", {"python.version": "3.11.4"}),
    # a requirement said with "request" is not the machine's; the machine's own value beside it is
    ("request cue", "my glibc is 2.31, but the wheel requests GLIBC 2.32\nPython 3.10", {"glibc.version": "2.31"}),
    # nvidia-smi's CUDA in prose, with "is" or "=" between
    ("smi prose", "Even nvidia-smi shows cuda version is 12.4", {"driver.cuda_version": "12.4"}),
    ("smi prose", "nvidia-smi reports CUDA Version = 12.8", {"driver.cuda_version": "12.8"}),
    # cpp_extension's mismatch as an unformatted tuple, in either quote style
    ("mismatch tuple", "RuntimeError: ('The detected CUDA version (%s) mismatches the version that was used to "
     "compilePyTorch (%s). Please make sure to use the same CUDA versions.', '12.8', '13.0')",
     {"nvcc.version": "12.8", "torch.cuda": "13.0"}),
    ("mismatch tuple", 'RuntimeError: ("The detected CUDA version (%s) mismatches the version that was used to compile'
     ' PyTorch (%s).", "11.8", "12.1")', {"nvcc.version": "11.8", "torch.cuda": "12.1"}),
    # torchvision's CUDA check names torch's CUDA first
    ("torchvision", "RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major "
     "versions. PyTorch has CUDA Version=12.4 and torchvision has CUDA Version=11.8. Please reinstall the torchvision "
     "that matches your PyTorch install.", {"torch.cuda": "12.4"}),
    # Windows names the module whose DLL did not load
    ("dll", "ImportError: DLL load failed while importing flash_attn_2_cuda: The specified module could not be found.",
     {"flash_attn.import_ok": False}),
    ("dll", "ImportError: DLL load failed while importing flash_attn_2_cuda: 找不到指定的模块。",
     {"flash_attn.import_ok": False}),
    # an install command quoted inside a sentence is not read; the sentence around it is
    ("quoted command", "When I run `pip install flash-attn` with Python 3.11.9 and PyTorch 2.6.0 installed, it fails",
     {"python.version": "3.11.9", "torch.version": "2.6.0"}),
    ("quoted command", "After `uv pip install -U torch` I now have torch 2.7.1", {"torch.version": "2.7.1"}),
    # WSL: said without its "2", or a shell in a Windows drive WSL mounted
    ("wsl", "- OS: WSL Ubuntu 22.04 on Windows 11\n- torch 2.7.1", {"os.wsl": True}),
    ("wsl", "(base) me@PC:/mnt/c/Users/me/project$ python --version\nPython 3.11.9", {"os.wsl": True}),
    # conda-like rows with more columns (pixi list), and Anaconda's gpu_ build strings
    ("conda row", "pytorch   2.4.0   cuda124_py311h2c9e1d3_300   32.1 MiB   conda   https://conda.anaconda.org/conda-forge/",
     {"torch.version": "2.4.0", "torch.cuda": "12.4"}),
    ("conda row", "pytorch                   2.3.0           gpu_cuda121py312h3c6a9e5_100",
     {"torch.version": "2.3.0", "torch.cuda": "12.1"}),
    # a Jetson module named in prose is its GPU
    ("jetson", "Running on a Jetson Orin Nano with JetPack 6.1", {"gpu.count": 1, "gpu.0.compute_capability": "8.7"}),
    ("jetson", "* **Device:** NVIDIA Jetson Xavier NX", {"gpu.count": 1, "gpu.0.compute_capability": "7.2"}),
    # a wheel fetched from a URL states the interpreter it was matched to, not what is installed
    ("url wheel", "  Downloading https://download.pytorch.org/whl/cu121/torch-2.4.0%2Bcu121-cp311-cp311-linux_x86_64.whl",
     {"python.version": "3.11"}),
    ("url wheel", "torch-2.4.0+cu121-cp311-cp311-linux_x86_64.whl", {"torch.version": "2.4.0+cu121"}),
    # xformers' "built for" lines say both torches, with or without the header line above them
    ("xformers", "    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.6.0+cu124)\n    Python  3.12.7 (you have 3.12.8)",
     {"torch.version": "2.6.0+cu124", "xformers.built_for_torch": "2.5.1+cu124", "python.version": "3.12.8"}),
    ("xformers", "xFormers was built for:\n    PyTorch 2.1.0 (you have 2.2.1+cu118)",
     {"torch.version": "2.2.1+cu118", "xformers.built_for_torch": "2.1.0"}),
    # a device index before a GPU's name is no count of GPUs
    ("device index", "Total VRAM 24564 MB Device: cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync torch 2.7.1",
     {"gpu.count": 1, "gpu.0.compute_capability": "8.9"}),
    ("device index", "GPU:NVIDIA GeForce RTX 4060 Ti\nPython 3.10.11", {"gpu.count": 1}),
]


@pytest.mark.parametrize(("family", "text", "expected"), READ, ids=[f"{r[0]}: {r[1][:40]}" for r in READ])
def test_a_neighbour_of_a_corpus_miss_is_read(tmp_path: Path, family: str, text: str,
                                              expected: dict[str, FactValue]) -> None:
    path = tmp_path / "report.txt"
    path.write_text(text + "\n")
    facts = load_report(path)  # the whole path: what a report implies (cc of a name, CUDA of a tag) included
    assert {k: facts.get(k) for k in expected} == expected, family


TRAPS: list[tuple[str, str, tuple[str, ...]]] = [
    # a word that names the package and not its value stays the other package's
    ("build word", "* Flash-Attention wheel: 2.7.4.post1", ("wheel.version",)),
    ("request cue", "the project requests torch 2.6 or newer", ("torch.version",)),
    ("request cue", "GR00T request GLibc == 2.32", ("glibc.version",)),
    # another CUDA between nvidia-smi and the number is not the driver's
    ("smi prose", "nvidia-smi works but nvcc says CUDA 11.8", ("driver.cuda_version",)),
    ("smi prose", "nvidia-smi is fine, the torch CUDA is 12.1", ("driver.cuda_version",)),
    ("mismatch tuple", "('The detected CUDA version (%s) mismatches the version that was used to compile "
     "PyTorch (%s).')", ("nvcc.version", "torch.cuda")),
    ("torchvision", "PyTorch has CUDA Version=12.4 and torchvision has CUDA Version=11.8", ("nvcc.version",)),
    # a DLL of a module no package of ours owns says nothing about them
    ("dll", "ImportError: DLL load failed while importing _C: The specified procedure could not be found.",
     ("flash_attn.import_ok", "torch.import_error", "xformers.import_ok")),
    ("quoted command", "I ran `pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124`",
     ("torch.version", "torch.cuda")),
    ("wsl", "this is WSL 1 on an old laptop", ("os.wsl",)),
    ("wsl", "data lives in /mnt/data/imagenet on the cluster", ("os.wsl",)),
    ("wsl", "I'm not on WSL, this is native Ubuntu", ("os.wsl",)),
    ("conda row", "torch 2.4.0+cu121, CUDA 12.1, driver 535.104, RTX 4090", ("os.conda_env",)),
    ("jetson", "cloned dusty-nv/jetson-containers to build it", ("gpu.count",)),
    ("url wheel", "* *Failed URL:* `https://developer.download.nvidia.com/compute/redist/jp/v512/pytorch/"
     "torch-2.1.0a0+41361538.nv23.06-cp310-cp310-linux_aarch64.whl`", ("torch.version",)),
    ("xformers", "PyTorch 2.5.1 with CUDA 12.4 works here", ("xformers.built_for_torch",)),
    ("device index", "cuda:0 and cuda:1 hold 2 x RTX 3090 and a T4", ("gpu.count",)),
    ("url wheel", "DEBUG At least one requirement is not satisfied: https://github.com/Dao-AILab/flash-attention/"
     "releases/download/v2.5.8/flash_attn-2.5.8+cu122torch2.3cxx11abiFALSE-cp310-cp310-linux_x86_64.whl",
     ("flash_attn.version",)),
]


@pytest.mark.parametrize(("family", "text", "unread"), TRAPS, ids=[f"{r[0]}: {r[1][:40]}" for r in TRAPS])
def test_a_look_alike_of_a_corpus_miss_states_nothing_wrong(family: str, text: str, unread: tuple[str, ...]) -> None:
    facts = parse_text(text + "\n")
    assert [k for k in unread if k in facts] == [], family


FORM = "### OS\n\nLinux\n\n### Python version\n\n3.11.9\n\n### PyTorch version\n\n2.6.0+cu124\n\n### Model\n\nAny\n"


def test_an_issue_forms_answers_are_read_under_their_headings() -> None:
    facts = parse_text(FORM)
    assert (facts["python.version"], facts["torch.version"]) == ("3.11.9", "2.6.0+cu124")
    # no blank line between heading and answer reads the same
    assert parse_text("## Torch version\n2.5.1\n")["torch.version"] == "2.5.1"


def test_a_heading_over_a_paragraph_or_another_field_is_no_answer() -> None:
    # a section's first line is not the heading's value ...
    text = "### PyTorch version\n\n2.1.0 at first\nthen the resolver pulled another one in\n\n### Logs\n"
    assert "torch.version" not in parse_text(text + "python 3.10\n")
    # ... nor is the next heading, nor an answer that is an attempt
    assert "python.version" not in parse_text("### Python version\n\n### CUDA\n\n12.4\npython?\n" + "torch 2.7.1\n")
    assert "python.version" not in parse_text("### Python version\n\nI tried 3.10 and 3.12\n\ntorch 2.7.1\n")


def test_each_gpu_torch_warns_about_is_one_gpu() -> None:
    two = ("Found GPU0 Tesla K80 which is of cuda capability 3.7.\nPyTorch no longer supports this GPU because it is "
           "too old.\nFound GPU1 Tesla K80 which is of cuda capability 3.7.\n")
    facts = parse_text(two)
    assert facts["gpu.count"] == 2 and facts["gpu.1.compute_capability"] == "3.7"
    mixed = ("Found GPU0 NVIDIA GeForce GTX 1080 Ti which is of cuda capability 6.1.\n"
             "Found GPU1 Tesla P100-PCIE-16GB which is of cuda capability 6.0.\n"
             "NVIDIA GeForce GTX 1080 Ti with CUDA capability sm_61 is not compatible with the current PyTorch "
             "installation.\n")
    facts = parse_text(mixed)
    assert facts["gpu.count"] == 2
    assert (facts["gpu.0.compute_capability"], facts["gpu.1.compute_capability"]) == ("6.1", "6.0")
    # the same GPU in both warnings is one GPU
    one = ("Found GPU0 NVIDIA GeForce GTX 1080 Ti which is of cuda capability 6.1.\n"
           "NVIDIA GeForce GTX 1080 Ti with CUDA capability sm_61 is not compatible with the current PyTorch "
           "installation.\n")
    assert parse_text(one)["gpu.count"] == 1


def test_collect_env_platform_names_the_architecture_and_a_count_is_no_gpu_name(tmp_path: Path) -> None:
    path = tmp_path / "tail.txt"
    path.write_text("Python version: 3.10.19 (main) [Clang 20.1.4 ] (64-bit runtime)\n"
                    "Python platform: Linux-5.15.136-tegra-aarch64-with-glibc2.35\nIs CUDA available: False\n"
                    "CUDA runtime version: 12.2.140\n")
    assert load_report(path)["os.arch"] == "aarch64"
    path.write_text("python: 3.12\nresources:\n  gpu: 1\ntorch 2.7.1\n")
    assert "gpu.count" not in load_report(path)
    path.write_text("PyTorch version: 2.6.0\nOS: Ubuntu 22.04\nGPU: 4090\n")
    assert load_report(path)["gpu.0.compute_capability"] == "8.9"  # a model number alone still names a GPU

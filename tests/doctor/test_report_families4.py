"""The families behind the misses of the fourth report corpus (tests/fixtures/report_corpus/cases4.toml, 11/25 on
its first run), each in several wordings and with the near misses that must not be read, so that a fix holds for
the family rather than for the one thread it was seen in. Where a case comes from is named beside it; the others
are the same tool's output or sentence written another way.
"""

from __future__ import annotations

import pytest
from helpers import report_facts

from olmo_doctor.errors import UsageError
from olmo_doctor.reports.tool_outputs import CUDA_ERRORS

facts = report_facts


# --- Unsloth's banner: "CUDA" is the GPU's capability, "CUDA Toolkit" is torch.version.cuda (unslothai/unsloth,
# its models/_utils.py banner; threads in cases4.toml 301-303)
BANNERS = [
    ("O^O/ \\_/ \\    Torch: 2.5.1+cu124. CUDA: 6.1. CUDA Toolkit: 12.4. Triton: 3.1.0\n"
     "\\        /    Bfloat16 = FALSE. FA [Xformers = 0.0.28.post3. FA2 = False]",
     "2.5.1+cu124", "12.4", "0.0.28.post3"),
    ("O^O/ \\_/ \\    Pytorch: 2.3.0+cu121. CUDA = 6.1. CUDA Toolkit = 12.1.\n"
     "\\        /    Bfloat16 = FALSE. FA [Xformers = 0.0.26.post1. FA2 = False]",
     "2.3.0+cu121", "12.1", "0.0.26.post1"),
    ("O^O/ \\_/ \\    Torch: 2.7.0+cu128. CUDA: 12.0. CUDA Toolkit: 12.8. Triton: 3.3.0\n"
     "\\        /    Bfloat16 = TRUE. FA [Xformers = None. FA2 = False]", "2.7.0+cu128", "12.8", None),
]


@pytest.mark.parametrize(("text", "torch", "cuda", "xformers"), BANNERS)
def test_unsloth_banner_names_torchs_cuda_not_nvcc(text: str, torch: str, cuda: str, xformers: str | None) -> None:
    got = facts(text)
    assert got["torch.version"] == torch and got["torch.cuda"] == cuda
    assert "nvcc.version" not in got
    assert got.get("xformers.version") == xformers  # "None" only says xformers did not import: unread


def test_the_banners_label_elsewhere_in_the_paste_is_torchs_too_and_only_then() -> None:
    bullets = "- PyTorch: 2.3.0+cu121\n- CUDA Toolkit: 12.1\n"
    with_banner = bullets + BANNERS[1][0]
    assert "nvcc.version" not in facts(with_banner) and facts(with_banner)["torch.cuda"] == "12.1"
    assert facts("- CUDA Toolkit: 12.1\n- PyTorch: 2.3.0+cu121")["nvcc.version"] == "12.1"  # no banner: the toolkit


# --- torch.__config__.show() embedded in other tools' env dumps (lmdeploy check_env: cases4.toml 304)
@pytest.mark.parametrize(("flags", "archs"), [
    ("-gencode;arch=compute_80,code=sm_80;-gencode;arch=compute_90,code=sm_90", ["sm_80", "sm_90"]),
    ("-gencode;arch=compute_90,code=sm_90;-gencode;arch=compute_90,code=compute_90", ["sm_90", "compute_90"]),
    ("-gencode;arch=compute_120,code=[sm_120,compute_120]", ["sm_120", "compute_120"]),
])
def test_torch_build_flags_are_its_arch_list(flags: str, archs: list[str]) -> None:
    text = ("PyTorch: 2.4.0+cu121\nPyTorch compiling details: PyTorch built with:\n"
            f"  - NVCC architecture flags: {flags}\n")
    assert facts(text)["torch.arch_list"] == archs


# --- CUDA failing to start, in torch's and other runtimes' words (cases4.toml 315, 320; torch's message:
# c10/cuda/CUDAFunctions.cpp)
@pytest.mark.parametrize("line", [
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 802: system not yet initialized",
    "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
    "before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized "
    "(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:109.)",
    'msg="Unable to load cudart library /usr/lib/ollama/libcudart.so.12.4.127: cudart init failure: 802"',
    "cudaSetDevice err: 802",
    "cuInit err: 802",
])
def test_cuda_start_errors_read_alike_in_every_form(line: str) -> None:
    text = f"GPU: NVIDIA H200\n{line}\n"
    assert facts(text)["torch.cuda_init_error"] == f"Error 802: {CUDA_ERRORS['802']}"


def test_two_forms_of_one_error_agree_and_two_errors_stay_unknown() -> None:
    both = ("RuntimeError: Unexpected error from cudaGetDeviceCount() ... Error 804: forward compatibility was "
            "attempted on non supported HW\ncuInit err: 804\n")
    assert facts(f"GPU: NVIDIA A100\n{both}")["torch.cuda_init_error"].startswith("Error 804")  # type: ignore[union-attr]
    two = "GPU: NVIDIA A100\ncuInit err: 804\ncudaSetDevice err: 999\n"
    assert "torch.cuda_init_error" not in facts(two)


# --- nvidia-smi --query-gpu ... --format=csv (cases4.toml 320)
def test_smi_query_csv_gives_each_gpus_fields() -> None:
    text = ("$ nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv\nname, compute_cap, driver_version\n"
            "NVIDIA H100 80GB HBM3, 9.0, 550.54.15\nNVIDIA H100 80GB HBM3, 9.0, 550.54.15\n")
    got = facts(text)
    assert got["gpu.count"] == 2 and got["gpu.1.compute_capability"] == "9.0"
    assert got["driver.version"] == "550.54.15"


def test_a_csv_row_that_is_no_capability_is_not_read() -> None:
    got = facts("compute_cap\nunknown\nGPU: NVIDIA A100\n")
    assert got.get("gpu.0.compute_capability") == "8.0"  # from the name, not from the "unknown" row


# --- torch named only by its build tag under a generic label (cases4.toml 318)
@pytest.mark.parametrize("line", ["- Framework & Version: 2.6.0+cu124", "Framework: 2.6.0+cu124",
                                  "* **DL framework**: `2.6.0+cu124`", "Backend: 2.6.0+cu124"])
def test_a_framework_label_with_a_cuda_build_tag_is_torch(line: str) -> None:
    got = facts(f"- GPU: NVIDIA A100\n{line}\n")
    assert got["torch.version"] == "2.6.0+cu124" and got["torch.cuda"] == "12.4"


@pytest.mark.parametrize("line", ["- torchvision: 0.21.0+cu124", "- Framework: TensorFlow 2.15.0",
                                  "- Framework version: 0.21.0+cu124"])
def test_other_packages_and_versions_are_not_torch(line: str) -> None:
    assert "torch.version" not in facts(f"- GPU: NVIDIA A100\n{line}\n")


# --- `pip show torch` of a PyPI wheel (cases4.toml 316): its CUDA is the release's PyPI build's
SHOW = "Name: torch\nVersion: {v}\nSummary: Tensors\nLocation: /env/lib/python3.10/site-packages\nRequires: {r}\n"


@pytest.mark.parametrize(("version", "requires", "cuda"), [
    ("2.2.1", "filelock, nvidia-cublas-cu12, nvidia-cuda-runtime-cu12, sympy", "12.1"),
    ("2.5.1", "nvidia-cuda-runtime-cu12, triton", "12.4"),
    ("2.2.1", "filelock, sympy, typing-extensions", None),  # no CUDA wheels: a CPU or conda build, not guessed
    ("2.2.1", "nvidia-cuda-runtime-cu11", None),  # CUDA 11 wheels are not PyPI's 2.2 build
])
def test_pip_show_torch_requirements_say_its_cuda(version: str, requires: str, cuda: str | None) -> None:
    got = facts("GPU: NVIDIA RTX 4090\n" + SHOW.format(v=version, r=requires))
    assert got["torch.version"] == version and got.get("torch.cuda") == cuda


def test_a_local_build_tag_wins_over_the_requirements() -> None:
    got = facts("GPU: NVIDIA RTX 4090\n" + SHOW.format(v="2.2.1+cu118", r="nvidia-cuda-runtime-cu12"))
    assert got["torch.cuda"] == "11.8"


# --- the driver's CUDA said in prose (cases4.toml 321)
@pytest.mark.parametrize(("sentence", "cuda"), [
    ("The installed driver is compatible with CUDA 12.4 while the CUDA toolkit 12.5 is installed.", "12.4"),
    ("My driver supports up to CUDA 12.2.", "12.2"),
    ("the NVIDIA driver supports CUDA 11.8 only", "11.8"),
])
def test_the_drivers_cuda_in_prose(sentence: str, cuda: str) -> None:
    assert facts(f"GPU: Tesla T4\n{sentence}\n")["driver.cuda_version"] == cuda


def test_a_toolkit_or_torch_that_supports_a_cuda_is_not_the_driver() -> None:
    for text in ("Driver 535 is installed and torch supports CUDA 12.1", "the driver is fine, nvcc supports CUDA 12.1"):
        assert facts(f"GPU: Tesla T4\n{text}\n").get("driver.cuda_version") != "12.1", text


# --- a script's prints and their bare output below (cases4.toml 309, Dao-AILab/flash-attention#631)
SCRIPT = "import torch\nprint(torch.__version__)\nprint(torch.version.cuda)\nprint(torch.cuda.is_available())\n"


@pytest.mark.parametrize("gap", ["", "I get:\n", "```\nI received the following output:\n```\n"])
def test_a_scripts_output_below_it_is_read_in_order(gap: str) -> None:
    script = f"```\n{SCRIPT}```\n" if gap.startswith("```") else SCRIPT
    got = facts(f"{script}{gap}2.1.0\n11.8\nTrue\n")
    assert (got["torch.version"], got["torch.cuda"], got["torch.cuda_available"]) == ("2.1.0", "11.8", True)


def test_output_that_does_not_parse_as_the_prints_is_not_read() -> None:
    with pytest.raises(UsageError):  # nothing else stated: not a report
        facts(f"{SCRIPT}It fails with:\nsegmentation fault\ncore dumped\nno output\n")


def test_a_traceback_names_the_module_whose_import_failed() -> None:
    text = ("torch 2.1.0+cu118\n  File \"/env/flash_attn/flash_attn_interface.py\", line 8, in <module>\n"
            "    import flash_attn_2_cuda as flash_attn_cuda\n"
            "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n")
    got = facts(text)
    assert got["flash_attn.import_ok"] is False and "libcudart.so.12" in str(got["flash_attn.import_error"])


# --- recipes and requirements are no machine (cases4.toml 323, 324)
DOCKERFILE = ("FROM nvidia/cuda:12.1.0-devel-ubuntu22.04\nRUN pip install torch==2.5.1 && \\\n"
              "    pip install flash_attn-2.7.4.post1+cu12torch2.5cxx11abiFALSE-cp310-cp310-linux_x86_64.whl\n"
              "ENV CUDA_HOME=/usr/local/cuda-12.1\n")


def test_a_dockerfile_alone_is_refused() -> None:
    with pytest.raises(UsageError):
        facts(f"Here is my Dockerfile:\n```\n{DOCKERFILE}```\n")


def test_a_dockerfile_beside_real_output_keeps_the_output() -> None:
    got = facts(f"```\n{DOCKERFILE}```\nInside the container:\nCuda compilation tools, release 12.1, V12.1.105\n")
    assert got["nvcc.version"] == "12.1" and "flash_attn.version" not in got and "python.version" not in got


@pytest.mark.parametrize("line", ["torch 2.7.1+cu128 does not support sm_70, so bump version to 2.8.0+cu128",
                                  "Bumps torch from 2.4.0 to 2.5.1."])
def test_a_dependency_bump_is_no_machine(line: str) -> None:
    with pytest.raises(UsageError):
        facts(line + "\n")


# --- a reply naming the other person's version first (cases4.toml 319, hank-ai/darknet#129)
@pytest.mark.parametrize("text", ["I see that you are using GCC 13. I'm using GCC 14.",
                                  "You're using gcc 13, I have gcc 14.", "you use GCC 13 while I use GCC 14"])
def test_the_other_persons_version_is_not_the_writers(text: str) -> None:
    assert facts(text + " NVCC 12.0.\n")["gcc.version"] == "14"

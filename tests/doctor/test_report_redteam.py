"""Reports as people really paste them, played against `check --from-report`: every wrapping must give the
facts of the unwrapped report, a value that would be shell code must never run, and a rule that infers from
torch's CUDA build must still fire when the report (like every collect_env) does not print torch's arch list."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo_doctor.api import run_check
from olmo_doctor.report import load_report
from tests import shells
from tests.helpers import FIXTURES, run_cli

BASE = (FIXTURES / "reports" / "torch2.4-h100-a100-mixed.txt").read_text()
WANT = {"torch.version": "2.4.1+cu124", "torch.cuda": "12.4", "gpu.count": 4, "gpu.1.name": "NVIDIA H100 80GB HBM3",
        "gpu.2.name": "NVIDIA A100-SXM4-80GB", "gpu.2.compute_capability": "8.0", "driver.version": "550.90.07",
        "python.version": "3.11.9", "glibc.version": "2.35", "cudnn.version": "9.1.0", "nvcc.version": "12.4"}


def _bold_bullets(text: str) -> str:
    # the issue-template habit: every "Label: value" line as a bold markdown bullet, GPU lines included
    return "\n".join(f"- **{ln.split(':', 1)[0]}**:{ln.split(':', 1)[1]}" if re.match(r"[A-Z][^:\[/]*:", ln) else ln
                     for ln in text.splitlines())


def _html_br(text: str) -> str:
    # forum / web-mail HTML: each line ends in <br> and a newline, angle brackets escaped
    return "<p>" + "".join(html_line + "<br>\n" for html_line in text.replace(">", "&gt;").splitlines()) + "</p>"


WRAPPINGS: dict[str, Callable[[str], bytes]] = {
    "crlf": lambda t: t.replace("\n", "\r\n").encode(),
    "cr-cr-lf-windows-twice-translated": lambda t: t.replace("\n", "\r\r\n").encode(),
    "cr-only-classic-mac": lambda t: t.replace("\n", "\r").encode(),
    "double-spaced-web-copy": lambda t: t.replace("\n", "\n\n").encode(),
    "shell-prompt-and-runpy-warning": lambda t: ("(olmo) $ python -m torch.utils.collect_env\n<frozen runpy>:128: "
                                                 "RuntimeWarning: 'torch.utils.collect_env' found in sys.modules\n"
                                                 + t).encode(),
    "utf16-bom-crlf": lambda t: t.replace("\n", "\r\n").encode("utf-16"),
    "cp1252-smart-quotes-around": lambda t: ("Here\u2019s the \u201coutput\u201d:\r\n" + t + "Thanks \u2013 B")
    .encode("cp1252"),
    "fullwidth-colons": lambda t: ("环境信息如下：\n" + t.replace(": ", "：")).encode(),
    "slack-inline-fence": lambda t: ("```" + t.rstrip("\n") + "```\n").encode(),
    "email-quoted": lambda t: ("On Mon, Bob wrote:\n" + "".join("> " + ln + "\n" for ln in t.splitlines())).encode(),
    "ansi-coloured-labels": lambda t: re.sub(r"^([^:\n]+):", "\x1b[1;32m\\1\x1b[0m:", t, flags=re.M).encode(),
    "osc-title-and-bell": lambda t: ("\x1b]0;user@gpu01: ~\x07" + t.replace("GPU 0:", "\x1b]8;;\x07GPU 0:")).encode(),
    "tab-after-colon": lambda t: t.replace(": ", ":\t").encode(),
    "bold-bullets": lambda t: _bold_bullets(t).encode(),
    "html-br-lines": lambda t: _html_br(t).encode(),
    "details-in-issue": lambda t: f"### Versions\n<details>\n<summary>env</summary>\n\n```\n{t}```\n</details>\n"
    .encode(),
    "followed-by-traceback": lambda t: (t + "\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                                        "ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c10\n").encode(),
}


@pytest.mark.parametrize("name", sorted(WRAPPINGS))
def test_wrapped_report_gives_the_facts(tmp_path: Path, name: str) -> None:
    path = tmp_path / "report.txt"
    path.write_bytes(WRAPPINGS[name](BASE))
    facts = load_report(path)
    assert {k: facts.get(k) for k in WANT} == WANT


# report text, the blocking rule it must raise, and the torch build (version, CUDA) that would serve the GPU
ARCH_CASES = {
    "rtx5090-cu121-windows": ("PyTorch version: 2.4.0+cu121\nCUDA used to build PyTorch: 12.1\n"
                              "OS: Microsoft Windows 11 Home\nIs CUDA available: True\n"
                              "GPU models and configuration: GPU 0: NVIDIA GeForce RTX 5090\n"
                              "Nvidia driver version: 572.16\n", "OD142", ("2.8.0+cu128", "12.8")),
    "gb200-cu124-aarch64": ("PyTorch version: 2.5.1+cu124\nCUDA used to build PyTorch: 12.4\n"
                            "OS: Ubuntu 24.04.1 LTS (aarch64)\nIs CUDA available: True\n"
                            "GPU models and configuration:\nGPU 0: NVIDIA GB200\nGPU 1: NVIDIA GB200\n"
                            "Nvidia driver version: 570.86.15\n", "OD142", ("2.8.0+cu128", "12.8")),
    "v100-cu130": ("PyTorch version: 2.9.0+cu130\nCUDA used to build PyTorch: 13.0\nOS: Ubuntu 22.04.5 LTS (x86_64)\n"
                   "Is CUDA available: True\nGPU models and configuration: GPU 0: Tesla V100-SXM2-32GB\n"
                   "Nvidia driver version: 580.65.06\n", "OD141", ("2.9.0+cu126", "12.6")),
}


@pytest.mark.parametrize("name", sorted(ARCH_CASES))
def test_torch_build_without_the_gpus_arch_is_an_error_from_a_report(tmp_path: Path, name: str) -> None:
    text, code, (good_torch, good_cuda) = ARCH_CASES[name]
    path = tmp_path / "report.txt"
    path.write_text(text)
    assert code in [f.code for f in run_check(from_report=path).errors]
    # the same report with a torch that carries the GPU's kernels stays quiet
    path.write_text(re.sub(r"CUDA used to build PyTorch: \S+", f"CUDA used to build PyTorch: {good_cuda}",
                           re.sub(r"PyTorch version: \S+", f"PyTorch version: {good_torch}", text)))
    assert code not in [f.code for f in run_check(from_report=path).findings]


@pytest.mark.parametrize("shell", shells.POSIX)
def test_report_values_never_run_as_shell(tmp_path: Path, shell: str) -> None:
    marker = tmp_path / "pwned"
    text = (BASE.replace("GPU 0: NVIDIA H100 80GB HBM3", f"GPU 0: NVIDIA H100; touch {marker} `touch {marker}`")
            .replace("Nvidia driver version: 550.90.07", f"Nvidia driver version: 550.90.07 $(touch {marker})"))
    path = tmp_path / "report.txt"
    path.write_text(text)
    checked = run_cli("check", "--from-report", str(path))
    assert checked.returncode in (0, 1) and "Traceback" not in checked.stderr
    env = run_cli("env", "--from-report", str(path))
    assert env.returncode == 0
    proc = shells.run(shell, 'eval "$1"', tmp_path, arg=env.stdout)
    assert proc.returncode == 0 and not marker.exists(), proc.stderr


def test_cuda_unavailable_next_to_a_listed_gpu_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "report.txt"
    text = ("PyTorch version: 2.3.0+cu121\nCUDA used to build PyTorch: 12.1\nOS: Ubuntu 22.04.4 LTS (x86_64)\n"
            "Python version: 3.10.14\nIs CUDA available: False\nGPU models and configuration: GPU 0: NVIDIA GeForce "
            "RTX 4090\nNvidia driver version: 535.171.04\n")
    path.write_text(text)
    # (torch 2.3 is also below the trainer's floor: OD208, a second root cause of its own)
    assert [f.code for f in run_check(from_report=path).errors] == ["OD005", "OD208"]
    path.write_text(text.replace("available: False", "available: True"))
    assert [f.code for f in run_check(from_report=path).findings if f.code not in ("OD208", "OD119")] == []
    # a driver too old for the wheel explains it: one root cause, OD005 shown beneath it, not beside it
    path.write_text(text.replace("535.171.04", "470.239.06"))
    nested = {f.code: f.root for f in run_check(from_report=path).findings}
    assert nested["OD005"] == "OD105" and nested["OD105"] is None


def test_two_reports_pasted_back_to_back_are_not_mixed(tmp_path: Path) -> None:
    path = tmp_path / "two.txt"
    node_a = ("node A:\nPyTorch version: 2.7.1+cu126\nCUDA used to build PyTorch: 12.6\n"
              "OS: Ubuntu 22.04.4 LTS (x86_64)\nIs CUDA available: True\n"
              "GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB\n\n")
    node_b = node_a.replace("node A", "node B").replace("OS:", "Python version: 3.8.10\nOS:") + \
        "Nvidia driver version: 418.67\n"
    path.write_text(node_a + node_b)
    facts = load_report(path)
    # node B's Python and driver are not node A's: they stay unknown instead of judging a machine that is neither
    assert "python.version" not in facts and "driver.version" not in facts and facts["gpu.count"] == 1
    res = run_cli("check", "--from-report", str(path))
    assert res.returncode == 0 and "holds 2 collect_env reports" in res.stderr
    # one report alone gives no such note
    path.write_text(node_b)
    assert "holds" not in run_cli("check", "--from-report", str(path)).stderr


@pytest.mark.parametrize(("line", "cuda"), [
    ("[conda] pytorch                   2.1.0           py3.10_cuda11.8_cudnn8.7.0_0    pytorch", "11.8"),
    ("[conda] pytorch                   1.0.0           py3.6_cuda9.0.176_cudnn7.4.1_1    pytorch", "9.0"),
    ("[conda] pytorch                   2.4.1           cuda120_py311h7b4f2e3_300    conda-forge", "12.0"),
    ("[conda] pytorch                   2.1.0           py3.10_cpu_0    pytorch", None),
])
def test_conda_build_string_names_torchs_cuda(tmp_path: Path, line: str, cuda: str | None) -> None:
    path = tmp_path / "libs.txt"
    path.write_text(f"Versions of relevant libraries:\n[pip3] numpy==1.26.0\n{line}\n")
    facts = load_report(path)
    assert "torch.cuda" in facts and facts["torch.cuda"] == cuda


def test_rocm_torch_is_not_called_a_cpu_build(tmp_path: Path) -> None:
    path = tmp_path / "rocm.txt"
    path.write_text("PyTorch version: 2.3.0+rocm6.0\nCUDA used to build PyTorch: N/A\nROCM used to build PyTorch: "
                    "6.0.32830-d62f6a171\nOS: Ubuntu 22.04.4 LTS (x86_64)\nIs CUDA available: True\n"
                    "GPU models and configuration: AMD Instinct MI250X/MI250 (gfx90a:sramecc+:xnack-)\n")
    out = " ".join(run_cli("check", "--from-report", str(path)).stdout.split())
    assert "ROCm build" in out and "CPU build" not in out


def test_a_mac_has_no_nvidia_gpu(tmp_path: Path) -> None:
    path = tmp_path / "mac.txt"
    text = ("PyTorch version: 2.2.2\nCUDA used to build PyTorch: None\nOS: macOS 14.4.1 (arm64)\n"
            "Python version: 3.11.8\nPython platform: macOS-14.4.1-arm64-arm-64bit\nIs CUDA available: False\n"
            "GPU models and configuration: No CUDA\n")
    path.write_text(text)
    assert load_report(path)["gpu.count"] == 0
    # on Linux a bare "No CUDA" GPU line (no driver line saying the same) does not state the count
    linux = (text.replace("macOS 14.4.1 (arm64)", "Ubuntu 22.04.4 LTS (x86_64)")
             .replace("macOS-14.4.1-arm64-arm-64bit", "Linux-6.5.0-x86_64-with-glibc2.35"))
    path.write_text(linux)
    assert "gpu.count" not in load_report(path)
    # collect_env writes "No CUDA" into the GPU and driver lines only when nvidia-smi found no GPU: none there
    path.write_text(linux + "Nvidia driver version: No CUDA\n")
    assert load_report(path)["gpu.count"] == 0
    path.write_text(linux.replace("available: False", "available: True") + "Nvidia driver version: No CUDA\n")
    assert "gpu.count" not in load_report(path)


# the issue template's free-text GPU line: (value, GPU count, compute capability of GPU 0)
TEMPLATE_GPUS = [
    ("3090 x 2", 2, "8.6"), ("2 x 3090", 2, "8.6"), ("RTX3090", 1, "8.6"), ("2080ti", 1, "7.5"),
    ("GTX1080Ti x 4", 4, "6.1"), ("A6000", 1, "8.6"), ("RTX4090 24GB", 1, "8.9"), ("1660 super", 1, "7.5"),
    ("A100*8", 8, "8.0"), ("8x A100 80GB", 8, "8.0"), ("A10", 1, "8.6"), ("4090", 1, "8.9"),
]


@pytest.mark.parametrize(("value", "count", "cc"), TEMPLATE_GPUS)
def test_template_gpu_shorthand(tmp_path: Path, value: str, count: int, cc: str) -> None:
    path = tmp_path / "template.txt"
    path.write_text("## Environment\n - PyTorch Version (e.g., 1.0): 2.6.0\n - OS (e.g., Linux): Ubuntu 22.04\n"
                    f" - GPU models and configuration: {value}\n")
    facts = load_report(path)
    assert (facts["gpu.count"], facts["gpu.0.compute_capability"]) == (count, cc)
    name = str(facts["gpu.0.name"])  # kept as written, without the count
    assert name in value and not re.search(r"(?:^|\s)[x*]\s|[x*]\s*\d+$|^\d+\s*[x*]", name)


# hand-written environments as issues carry them: (text, facts it must give)
HAND_WRITTEN = [
    ("**Environment**\n- PyTorch: 2.4.0+cu121\n- CUDA: 12.1\n- GPU: A100\n",
     {"torch.version": "2.4.0+cu121", "torch.cuda": "12.1", "gpu.count": 1, "gpu.0.compute_capability": "8.0"}),
    ("torch: 2.4.0\ncuda: 12.1\npython: 3.10\n", {"torch.version": "2.4.0", "python.version": "3.10"}),
    (" - PyTorch Version (e.g., 1.0): 2.1\n - OS (e.g., Linux): Linux\n", {"torch.version": "2.1", "os.name": "Linux"}),
    ("Torch Version: 2.5.1 | CUDA: 12.4 | GPU: RTX 4090 | Python: 3.11\n",
     {"torch.version": "2.5.1", "gpu.count": 1, "gpu.0.compute_capability": "8.9", "python.version": "3.11"}),
    ("Torch version: 2.5.1\nGPUs: 2x RTX 4090\nDriver: 550.54.15\n",
     {"torch.version": "2.5.1", "gpu.count": 2, "gpu.1.compute_capability": "8.9", "driver.version": "550.54.15"}),
]


@pytest.mark.parametrize(("text", "want"), HAND_WRITTEN)
def test_hand_written_environment_is_read(tmp_path: Path, text: str, want: dict[str, object]) -> None:
    path = tmp_path / "env.md"
    path.write_text(text)
    facts = load_report(path)
    assert {k: facts.get(k) for k in want} == want
    # "CUDA: 12.1" does not say whose CUDA it is (torch's, the toolkit's, the driver's): it is not read as nvcc
    assert "nvcc.version" not in facts

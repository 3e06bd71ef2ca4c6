"""A report of one or a few lines is a partial report, not "not a report": `PyTorch version: 2.5.1+cu124`,
`torch 2.4.0+cu121, CUDA 12.1, driver 535.104, RTX 4090`, the nvidia-smi header or table, `nvidia-smi -L`. What
it states becomes facts, what it does not stays unknown (rules that need it stay quiet), and only text that states
nothing about a machine is refused, with one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmo_doctor.api import run_check
from olmo_doctor.errors import UsageError
from olmo_doctor.report import load_report, parse_text
from tests.helpers import run_cli
from tests.scaling import assert_linear

SMI_HEADER = "| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |"
SMI_TABLE = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
| N/A   31C    P0             71W /  700W |       1MiB /  81559MiB |      0%      Default |
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:3B:00.0 Off |                    0 |
| N/A   30C    P0             70W /  700W |       1MiB /  81559MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""

PARTIAL = [
    ("PyTorch version: 2.5.1+cu124\n", {"torch.version": "2.5.1+cu124", "torch.cuda": "12.4"},
     {"gpu.count", "driver.version", "python.version"}),
    ("torch 2.4.0+cu121, CUDA 12.1, driver 535.104, RTX 4090\n",
     {"torch.version": "2.4.0+cu121", "torch.cuda": "12.1", "driver.version": "535.104", "gpu.count": 1,
      "gpu.0.compute_capability": "8.9"}, {"nvcc.version", "python.version"}),
    (SMI_HEADER + "\n", {"driver.version": "535.104.05", "driver.cuda_version": "12.2"},
     {"gpu.count", "torch.version"}),
    (SMI_TABLE, {"driver.version": "570.86.15", "driver.cuda_version": "12.8", "gpu.count": 2,
                 "gpu.1.compute_capability": "9.0"}, {"torch.version"}),
    ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5a1e0f3c-1111-2222-3333-444455556666)\n",
     {"gpu.count": 1, "gpu.0.compute_capability": "8.0"}, {"driver.version"}),
    ("> torch==2.3.1 / python 3.11.9 / 8x H100 80GB\n",
     {"torch.version": "2.3.1", "python.version": "3.11.9", "gpu.count": 8}, {"torch.cuda"}),
    ("torch.__version__  = 2.5.1+cu124\ntorch.version.cuda: 12.4\n",
     {"torch.version": "2.5.1+cu124", "torch.cuda": "12.4"}, {"gpu.count"}),
    ("gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\ncuDNN 9.1.0\n", {"gcc.version": "11.4.0", "cudnn.version": "9.1.0"},
     {"torch.version"}),
    ("torch==2.5.1+cu124\nflash-attn==2.7.4.post1\nxformers 0.0.28.post3\n",
     {"torch.version": "2.5.1+cu124", "flash_attn.version": "2.7.4.post1", "xformers.version": "0.0.28.post3"},
     {"ninja.version"}),
    ("WSL2 on Windows 11, 2x RTX 3090, torch 2.5.1+cu124\n", {"os.wsl": True, "gpu.count": 2}, {"driver.version"}),
    ("I'm on Windows, pytorch 2.2.0+cu118 and nvcc 12.1, gcc 11.4.0\n",
     {"torch.version": "2.2.0+cu118", "torch.cuda": "11.8", "nvcc.version": "12.1", "gcc.version": "11.4.0"},
     {"gpu.count"}),
]


@pytest.mark.parametrize(("text", "stated", "unknown"), PARTIAL, ids=[f"partial{i}" for i in range(len(PARTIAL))])
def test_a_few_lines_are_read_as_partial_facts(tmp_path: Path, text: str, stated: dict[str, object],
                                               unknown: set[str]) -> None:
    path = tmp_path / "env.txt"
    path.write_text(text)
    facts = load_report(path)
    assert {k: facts.get(k) for k in stated} == stated
    assert not unknown & set(facts), "a value the text does not state must stay unknown"
    assert facts["facts.partial"] is True


@pytest.mark.parametrize("text", [
    "torchvision 0.19.1\n",  # another package, not torch
    "pytorch3d 0.7.5 and torch_geometric 2.5.0\n",
    '  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1532, in _wrapped_call_impl\n',
    "CUDA 12.1\n",  # whose CUDA? (torch's, the toolkit's, the driver's): not a fact
    "hello world\nthis is not a report\n",
])
def test_text_without_a_machine_fact_is_still_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "x.txt"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        load_report(path)
    assert "\n" not in str(err.value)


def test_cli_reads_a_one_line_report_and_marks_the_rest_unknown(tmp_path: Path) -> None:
    path = tmp_path / "one-line.txt"
    path.write_text("PyTorch version: 2.7.1+cu126\n")
    res = run_cli("check", "--json", "--from-report", str(path))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["facts"]["torch.version"] == "2.7.1+cu126"
    assert {"gpu.count", "driver.version", "nvcc.version"} <= set(data["unknown"])
    # nothing judged on what the line does not say: only the note naming the toolkit a build needs, and the
    # rules that could not run, by the fact they lack
    assert [f["code"] for f in data["findings"]] == ["OD119"]
    assert "OD110" in data["not_judged"]["nvcc.version"] and "OD101" in data["not_judged"]["driver.version"]
    assert data["sources"]["torch.version"] == {"line": 1, "text": "PyTorch version: 2.7.1+cu126"}
    bad = tmp_path / "prose.txt"
    bad.write_text("my training is slow, please help\n")
    res = run_cli("check", "--from-report", str(bad))
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_rules_judge_what_a_partial_report_states(tmp_path: Path) -> None:
    # WSL2 said in passing, with two GPUs: the WSL2 multi-GPU NCCL rule has all it needs
    path = tmp_path / "wsl.txt"
    path.write_text("WSL2, 2x RTX 3090, torch 2.5.1+cu124\n")
    assert "OD221" in [f.code for f in run_check(from_report=path).findings]
    path.write_text("Ubuntu 22.04, 2x RTX 3090, torch 2.5.1+cu124\n")  # WSL2 unknown: the rule stays quiet
    assert "OD221" not in [f.code for f in run_check(from_report=path).findings]
    # the driver stated next to torch's CUDA is enough to judge them against each other ...
    path = tmp_path / "env.txt"
    path.write_text("torch 2.4.0+cu121, driver 470.82.01, RTX 3090\n")
    codes = [f.code for f in run_check(from_report=path).errors]
    assert "OD101" in codes
    # ... and a newer driver is not
    path.write_text("torch 2.4.0+cu121, driver 550.54.15, RTX 3090\n")
    assert "OD101" not in [f.code for f in run_check(from_report=path).findings]


@pytest.mark.parametrize("line", [
    "torch", "torch ", "GPU 0: a ", "|   0  NVIDIA x", "NVIDIA-SMI 1.", "2x RTX ", "driver ", "python 3.",
    "gcc (x", "torch.version.cuda", "cudnn ",
])
def test_free_form_reading_is_linear_on_long_near_miss_lines(line: str) -> None:
    # CPU time at n and 4n repeats of the near miss, not a wall-clock bound (tests/scaling.py)
    assert_linear(parse_text, lambda n: line * (n // len(line)) + "\n", 32 << 10, repr(line), slack_s=0.02)

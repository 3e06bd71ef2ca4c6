"""The GPU name -> compute capability table (olmo_doctor/compat/gpus.py): a sample per generation and per naming
style."""

from __future__ import annotations

import pytest

from olmo_doctor.compat import gpus, release, wheels
from olmo_doctor.rules.expr import FUNCTIONS

CASES = [
    # Blackwell
    ("NVIDIA B200", "10.0"), ("NVIDIA GB200", "10.0"), ("NVIDIA B300 SXM6 AC", "10.3"), ("NVIDIA GB300", "10.3"),
    ("NVIDIA GeForce RTX 5090", "12.0"), ("NVIDIA GeForce RTX 5090 D", "12.0"),
    ("NVIDIA GeForce RTX 5070 Ti Laptop GPU", "12.0"), ("NVIDIA GeForce RTX 5060", "12.0"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"), ("NVIDIA RTX PRO 4000 Blackwell", "12.0"),
    ("NVIDIA GB10", "12.1"), ("NVIDIA Thor", "11.0"), ("Jetson AGX Thor", "11.0"),
    # Hopper
    ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA H100 PCIe", "9.0"), ("NVIDIA H100 NVL", "9.0"), ("NVIDIA H200", "9.0"),
    ("NVIDIA H800", "9.0"), ("NVIDIA H20", "9.0"), ("NVIDIA GH200 480GB", "9.0"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "9.0"),
    # Ada
    ("NVIDIA L4", "8.9"), ("NVIDIA L40", "8.9"), ("NVIDIA L40S", "8.9"), ("NVIDIA L20", "8.9"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9"), ("NVIDIA RTX 4000 SFF Ada Generation", "8.9"),
    ("NVIDIA RTX 2000 Ada Generation Laptop GPU", "8.9"), ("NVIDIA GeForce RTX 4090", "8.9"),
    ("NVIDIA GeForce RTX 4090 D", "8.9"), ("NVIDIA GeForce RTX 4090 Laptop GPU", "8.9"),
    ("NVIDIA GeForce RTX 4070 SUPER", "8.9"), ("NVIDIA GeForce RTX 4060 Ti", "8.9"),
    # Ampere
    ("NVIDIA A100-SXM4-40GB", "8.0"), ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "8.0"), ("NVIDIA A100 80GB PCIe", "8.0"),
    ("NVIDIA A800-SXM4-80GB", "8.0"), ("NVIDIA A30", "8.0"), ("GRID A100D-40C", "8.0"),
    ("NVIDIA A10G", "8.6"), ("NVIDIA A10", "8.6"), ("NVIDIA A40", "8.6"), ("NVIDIA A16", "8.6"), ("NVIDIA A2", "8.6"),
    ("NVIDIA RTX A6000", "8.6"), ("NVIDIA RTX A4000", "8.6"), ("NVIDIA RTX A2000 Laptop GPU", "8.6"),
    ("NVIDIA GeForce RTX 3090", "8.6"), ("NVIDIA GeForce RTX 3060 Laptop GPU", "8.6"),
    ("NVIDIA GeForce RTX 3050 Ti Laptop GPU", "8.6"), ("Orin", "8.7"), ("NVIDIA Jetson AGX Orin", "8.7"),
    # Turing
    ("Tesla T4", "7.5"), ("NVIDIA T4", "7.5"), ("GRID T4-16Q", "7.5"), ("Quadro RTX 8000", "7.5"),
    ("Quadro RTX 6000", "7.5"), ("NVIDIA TITAN RTX", "7.5"), ("NVIDIA GeForce RTX 2080 Ti", "7.5"),
    ("GeForce RTX 2070 SUPER", "7.5"), ("NVIDIA GeForce GTX 1660 Ti", "7.5"),
    ("NVIDIA GeForce GTX 1650 Ti with Max-Q Design", "7.5"), ("NVIDIA T1000", "7.5"), ("Quadro T2000", "7.5"),
    # Volta, Xavier
    ("Tesla V100-SXM2-32GB", "7.0"), ("Tesla V100-PCIE-16GB", "7.0"), ("Tesla V100S-PCIE-32GB", "7.0"),
    ("NVIDIA TITAN V", "7.0"), ("Quadro GV100", "7.0"), ("Xavier", "7.2"),
    # Pascal
    ("Tesla P100-PCIE-16GB", "6.0"), ("Tesla P40", "6.1"), ("Tesla P4", "6.1"), ("GeForce GTX 1080 Ti", "6.1"),
    ("NVIDIA GeForce GTX 1060 6GB", "6.1"), ("GeForce GTX 1050 with Max-Q Design", "6.1"), ("TITAN Xp", "6.1"),
    ("NVIDIA TITAN X (Pascal)", "6.1"), ("Quadro P4000", "6.1"), ("GeForce MX250", "6.1"), ("NVIDIA Tegra X2", "6.2"),
    # Maxwell
    ("GeForce GTX TITAN X", "5.2"), ("GeForce GTX 980 Ti", "5.2"), ("GeForce GTX 960", "5.2"),
    ("Tesla M40 24GB", "5.2"),
    ("Tesla M60", "5.2"), ("GRID M60-8Q", "5.2"), ("Quadro M4000", "5.2"), ("GeForce GTX 750 Ti", "5.0"),
    ("GeForce GTX 960M", "5.0"), ("GeForce 940MX", "5.0"), ("Quadro K2200", "5.0"), ("Tesla M10", "5.0"),
    ("NVIDIA Tegra X1", "5.3"),
    # Kepler
    ("Tesla K80", "3.7"), ("Tesla K40m", "3.5"), ("Tesla K20Xm", "3.5"), ("GeForce GTX 780 Ti", "3.5"),
    ("GeForce GTX TITAN Black", "3.5"), ("GeForce GTX 770", "3.0"), ("GeForce GTX 680", "3.0"), ("GRID K520", "3.0"),
    ("GeForce GT 730", "3.5"), ("Quadro K4000", "3.0"),
    # Fermi and earlier
    ("GeForce GTX 580", "2.0"), ("GeForce GTX 480", "2.0"), ("Tesla C2050", "2.0"), ("GeForce GTX 560 Ti", "2.1"),
    ("GeForce GT 430", "2.1"), ("GeForce GTX 285", "1.3"), ("GeForce GTX 260", "1.3"), ("GeForce GT 240", "1.2"),
    ("GeForce 8800 GTX", "1.0"),
]


@pytest.mark.parametrize(("name", "cc"), CASES)
def test_name_to_cc(name: str, cc: str) -> None:
    assert gpus.name_to_cc(name) == cc
    assert FUNCTIONS["gpu_name_to_cc"](name) == cc  # the rules' lookup is the same table


@pytest.mark.parametrize("name", ["Matrox G200eR2", "AMD Radeon RX 7900 XTX", "llvmpipe", "", "NVIDIA Future GPU 9000"])
def test_unknown_names_are_none(name: str) -> None:
    assert gpus.name_to_cc(name) is None


def test_every_row_is_sourced_and_valid() -> None:
    for family, source, rows in gpus.FAMILIES:
        assert source.startswith("https://"), family
        for _pattern, cc in rows:
            assert release.major_minor(cc) is not None


def test_lookup_names_the_family() -> None:
    hit = gpus.lookup("Tesla V100-SXM2-32GB")
    assert hit is not None and hit[1] == "Volta and Xavier" and hit[2] == gpus.NVIDIA_LEGACY


def test_old_nvidia_smi_without_compute_cap_uses_the_table() -> None:
    """A 470-series nvidia-smi refuses the compute_cap field; the probe asks again without it and looks the GPU
    up by name instead of reporting no GPU."""
    from olmo_doctor.probes import gpu
    from olmo_doctor.run import FakeRunner, Result

    run = FakeRunner({
        " ".join(gpu.SMI_QUERY): Result(ok=False, stderr='Field "compute_cap" is not a valid field to query.',
                                        returncode=2),
        " ".join(gpu.OLD_SMI_QUERY): "Tesla K80, 11441, 00000000:00:04.0, 470.57.02\n"
                                     "Tesla V100-SXM2-16GB, 16160, 00000000:00:05.0, 470.57.02\n",
    })
    facts = gpu.probe(run, use_nvml=False)
    assert facts["gpu.count"] == 2 and facts["driver.version"] == "470.57.02"
    assert (facts["gpu.0.compute_capability"], facts["gpu.1.compute_capability"]) == ("3.7", "7.0")
    assert facts["gpu.1.memory_gb"] == 16.9


# torch's arch lists as its capability warning prints them (tests/fixtures/report_corpus 05 and 75: an RTX 5080 and
# 5090 with a CUDA 11 torch, "sm_37 ... sm_90 compute_37"; both threads settled by a torch built for sm_120).
CUDA11_TORCH = ["sm_37", "sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "compute_37"]


@pytest.mark.parametrize(("archs", "cc", "torch_runs", "ptx_runs"), [
    (CUDA11_TORCH, "12.0", False, True),    # old PTX: the driver could JIT it, torch and its libraries do not
    (CUDA11_TORCH, "10.0", False, True),
    (CUDA11_TORCH, "8.9", True, True),      # sm_80/sm_86 cubins run on 8.9 (same major, higher minor)
    (["sm_80", "compute_80"], "9.0", False, True),   # an extension built with 8.0+PTX JIT-compiles on an H100
    (["sm_90", "compute_90"], "9.0", True, True),
    (["sm_75", "sm_120", "compute_120"], "12.1", True, True),  # GB10 on a cu128/cu130 wheel
    (["sm_86"], "8.0", False, False),       # a cubin never runs on a lower minor
    (["sm_90"], "10.0", False, False),
])
def test_torch_counts_only_its_gpus_major_while_an_extensions_ptx_runs_on_later_gpus(
        archs: list[str], cc: str, torch_runs: bool, ptx_runs: bool) -> None:
    assert wheels.torch_build_covers(archs, cc) is torch_runs
    assert wheels.covers(archs, cc) is ptx_runs
    assert wheels.torch_build_covers([], cc) is None and wheels.torch_build_covers(archs, "?") is None

"""GPU health, InfiniBand and Xid probes, replayed through a fake NVML, a fake nvidia-smi and a fake sysfs; the
health rules fire on the recorded values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmo_doctor.facts import FACT_KEYS, documented_key
from olmo_doctor.probes import gpu_health, infiniband, xid
from olmo_doctor.rules.engine import run_rules
from olmo_doctor.run import FakeRunner


class NotSupported(Exception):
    pass


class FakeNVML:
    """Two GPUs: GPU 0 healthy, GPU 1 with ECC errors, a pending remap, thermal slowdown, x8 link, a link down."""

    NVML_FEATURE_ENABLED = 1

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NotSupported("driver not loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return [0, 3][h] if counter == 0 else [0, 5][h]

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        raise NotSupported  # Ampere and newer remap rows instead

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        raise NotSupported

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return (0, 0, 0, 0) if h == 0 else (1, 2, 1, 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0x1 if h == 0 else 0x40 | 0x8

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return [35, 90][h]

    def nvmlDeviceGetTemperatureThreshold(self, h: int, kind: int) -> int:
        return 92

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 120_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return 1  # idle GPUs drop their link generation: not a fault

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return 5

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return [16, 8][h]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return 16

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 4:
            raise NotSupported  # this fake board has 4 links per GPU
        return 0 if (h == 1 and link == 2) else 1


def test_nvml_health_facts() -> None:
    nv = FakeNVML()
    facts: Any = gpu_health.nvml_health(nv)
    assert nv.shutdown
    assert facts["gpu.0.ecc.volatile_uncorrected"] == 0 and facts["gpu.1.ecc.volatile_uncorrected"] == 3
    assert facts["gpu.1.ecc.aggregate_uncorrected"] == 5
    assert facts["gpu.1.retired_pages.pending"] is None  # not supported: unknown, not False
    assert facts["gpu.1.remapped_rows.pending"] is True and facts["gpu.1.remapped_rows.failed"] is False
    assert facts["gpu.0.throttle_reasons"] == ["gpu_idle"]
    assert facts["gpu.1.throttle_reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert facts["gpu.1.power_limit_w"] == 700.0 and facts["gpu.0.power_w"] == 120.0
    assert facts["gpu.1.pcie.width"] == 8 and facts["gpu.1.pcie.gen_max"] == 5
    assert facts["gpu.1.nvlink.2.state"] == "down" and facts["gpu.1.nvlink.3.state"] == "up"
    assert "gpu.1.nvlink.4.state" not in facts
    assert (facts["gpu.1.nvlink.up"], facts["gpu.1.nvlink.down"]) == (3, 1)
    assert (facts["gpu.0.nvlink.up"], facts["gpu.0.nvlink.down"]) == (4, 0)


def test_nvml_unusable_gives_none() -> None:
    assert gpu_health.nvml_health(FakeNVML(fail_init=True)) is None


def test_health_rules_fire_on_recorded_nvml_values_and_name_the_gpu() -> None:
    facts: Any = {"gpu.count": 2, "gpu.0.name": "NVIDIA H200", "gpu.1.name": "NVIDIA H200",
                  **(gpu_health.nvml_health(FakeNVML()) or {})}
    found = {f.code: f for f in run_rules(facts, scope="train")}
    for code in ("OD300", "OD301", "OD303", "OD305", "OD306", "OD308"):
        assert code in found, code
        assert found[code].title.startswith("GPU 1"), found[code].title
    assert "OD302" not in found and "OD304" not in found and "OD307" not in found  # not failed, default power
    healthy = {k: v for k, v in facts.items() if not k.startswith("gpu.1.")} | {"gpu.count": 1}
    assert not {f.code for f in run_rules(healthy, scope="train")} & {"OD300", "OD301", "OD303", "OD306", "OD308"}


SMI_OUT = ("0, 0, No, 34, 71.50, 700.00, 700.00, 1, 5, 16, 16, 0x0000000000000001\n"
           "2, [N/A], No, 88, 300.10, 500.00, 700.00, 4, 4, 8, 16, 0x0000000000000048\n")


def test_nvidia_smi_fallback() -> None:
    names = [f for f, _, _ in gpu_health.SMI_FIELDS]
    new = f"nvidia-smi --query-gpu={','.join([*names, 'clocks_event_reasons.active'])} --format=csv,noheader,nounits"
    old = new.replace("clocks_event_reasons", "clocks_throttle_reasons")
    run = FakeRunner({old: SMI_OUT})  # an older driver that only knows the old field name
    facts: Any = gpu_health.smi_health(run)
    assert run.calls == [new, old]
    assert facts["gpu.health_source"] == "nvidia-smi"
    assert facts["gpu.1.ecc.volatile_uncorrected"] == 2 and facts["gpu.1.ecc.aggregate_uncorrected"] is None
    assert facts["gpu.1.throttle_reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert facts["gpu.1.power_limit_w"] == 500.0 and facts["gpu.1.pcie.width"] == 8
    codes = {f.code for f in run_rules({"gpu.count": 2, **facts}, scope="train")}
    assert {"OD300", "OD303", "OD304", "OD306"} <= codes
    assert gpu_health.smi_health(FakeRunner({})) is None


def _port(root: Path, dev: str, port: str, state: str, phys: str, rate: str) -> None:
    d = root / dev / "ports" / port
    d.mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "phys_state").write_text(phys + "\n")
    (d / "rate").write_text(rate + "\n")
    (d / "link_layer").write_text("InfiniBand\n")


def test_infiniband_ports(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    _port(tmp_path, "mlx5_1", "1", "1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)")
    _port(tmp_path, "mlx5_2", "1", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)")
    _port(tmp_path, "evil.name", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    facts: Any = infiniband.probe(tmp_path)
    assert facts["ib.mlx5_0.1.state"] == "ACTIVE" and facts["ib.mlx5_0.1.rate_gbps"] == 400.0
    assert facts["ib.evil_name.1.state"] == "ACTIVE"  # a dot in a device name never makes a deeper key
    assert facts["ib.ports_down"] == ["mlx5_1:1"] and facts["ib.active_ports"] == 2
    assert facts["ib.active_rate_gbps"] == 800.0
    assert "OD310" in {f.code for f in run_rules(facts, scope="train")}
    assert infiniband.probe(tmp_path / "absent") == {}


def test_xid_lines() -> None:
    lines = ["NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
             "NVRM: Xid (PCI:0000:3b:00): 13, pid=77, Graphics Exception",
             "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
             "NVRM: Xid (PCI:0000:3c:00): 13, pid=78, Graphics Exception"]
    facts: Any = xid.parse(lines)
    assert facts["xid.codes"] == ["13", "79"] and len(facts["xid.events"]) == 3
    assert "OD309" in {f.code for f in run_rules(facts, scope="train")}
    assert "OD309" not in {f.code for f in run_rules(xid.parse(lines[:2]), scope="train")}


def test_unreadable_kernel_log(tmp_path: Path) -> None:
    assert xid._read_kmsg(str(tmp_path / "no-kmsg")) is None


def test_every_health_key_is_documented(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    keys = {*(gpu_health.nvml_health(FakeNVML()) or {}), *infiniband.probe(tmp_path), *xid.parse([])}
    keys |= set(gpu_health.smi_health(FakeRunner({
        "nvidia-smi --query-gpu=" + ",".join([f for f, _, _ in gpu_health.SMI_FIELDS] + [gpu_health.SMI_REASONS[0]])
        + " --format=csv,noheader,nounits": SMI_OUT})) or {})
    missing = sorted(k for k in keys if documented_key(k) not in FACT_KEYS)
    assert not missing and len(keys) > 30


def test_report_values_of_the_wrong_type_never_crash_or_misfire() -> None:
    odd: list[dict[str, Any]] = [
        {"xid.readable": True, "xid.codes": "179"},  # a string where a list belongs: no substring match
        {"gpu.count": 1, "gpu.0.ecc.volatile_uncorrected": "many"},
        {"gpu.count": 1, "gpu.0.throttle_reasons": "hw_slowdownish"},
        {"gpu.count": 1, "gpu.0.nvlink.down": [1], "gpu.0.pcie.width": "x8", "gpu.0.pcie.width_max": 16},
        {"ib.ports_down": []},
    ]
    for facts in odd:
        codes = {f.code for f in run_rules(facts, scope="train")}
        assert not codes & {"OD300", "OD303", "OD306", "OD308", "OD309", "OD310"}, facts


def test_health_facts_replay_from_a_saved_report() -> None:
    from olmo_doctor.api import run_check
    from tests.helpers import FIXTURES

    result = run_check(scope="train", from_report=FIXTURES / "fleet" / "node3.json")
    codes = {f.code for f in result.findings}
    assert {"OD300", "OD301"} <= codes and result.has_errors
    clean = run_check(scope="train", from_report=FIXTURES / "fleet" / "node0.json")
    assert not {f.code for f in clean.findings} & {"OD300", "OD301", "OD303", "OD306", "OD308", "OD310"}

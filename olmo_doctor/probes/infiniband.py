"""InfiniBand / RoCE port facts from /sys/class/infiniband: per port state, physical state, rate, link layer.

Keys are `ib.<device>.<port>.<field>` (e.g. `ib.mlx5_0.1.state` = "ACTIVE"), plus totals a rule or the fleet
table can compare across nodes: active ports, their summed rate, and the ports that are not active. Reading
sysfs costs microseconds; a machine without RDMA devices gets no facts at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from olmo_common.bounded.files import read_text
from olmo_doctor.facts import Facts

ROOT = Path("/sys/class/infiniband")


def _read(path: Path) -> str | None:
    try:
        return read_text(path, "system file", errors="replace").strip()
    except OSError:
        return None


def _after_colon(text: str | None) -> str | None:
    """sysfs writes states as "4: ACTIVE" and "5: LinkUp": keep the name."""
    return text.split(":", 1)[-1].strip() if text else None


def _rate_gbps(text: str | None) -> float | None:
    """'200 Gb/sec (4X HDR)' -> 200.0 (gigabits per second, as sysfs prints it)."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def safe_name(name: str) -> str:
    """A device or port name as one dotted-key segment (sysfs names are data, not key syntax)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "_"


def _ports(devices: list[Path]) -> Iterator[tuple[Path, Path]]:
    """(device, port) folders, at most 64 devices of 16 ports each; a device without readable ports is skipped."""
    for dev in devices[:64]:
        try:
            port_dirs = sorted((dev / "ports").iterdir())
        except OSError:
            continue
        for port in port_dirs[:16]:
            yield dev, port


def _port(facts: Facts, p: str, port: Path) -> tuple[str | None, str | None, float | None]:
    """Record one port's state, physical state, rate and link layer under prefix p; the first three."""
    state = _after_colon(_read(port / "state"))
    phys = _after_colon(_read(port / "phys_state"))
    rate = _rate_gbps(_read(port / "rate"))
    facts[p + "state"], facts[p + "phys_state"], facts[p + "rate_gbps"] = state, phys, rate
    facts[p + "link_layer"] = _read(port / "link_layer")
    return state, phys, rate


def probe(root: Path = ROOT) -> Facts:
    try:
        devices = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return {}
    facts: Facts = {}
    ports: list[str] = []
    down: list[str] = []
    active = 0
    active_rate = 0.0
    for dev, port in _ports(devices):
        name = f"{safe_name(dev.name)}:{safe_name(port.name)}"
        state, phys, rate = _port(facts, f"ib.{safe_name(dev.name)}.{safe_name(port.name)}.", port)
        ports.append(name)
        if state == "ACTIVE":
            active, active_rate = active + 1, active_rate + (rate or 0.0)
        elif phys != "Disabled":  # an administratively disabled port is a choice, not a fault
            down.append(name)
    if not ports:
        return {}
    facts["ib.ports"] = ports
    facts["ib.ports_down"] = down
    facts["ib.active_ports"] = active
    facts["ib.active_rate_gbps"] = round(active_rate, 1)
    return facts

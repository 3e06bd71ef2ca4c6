"""Recent NVIDIA Xid events from the kernel ring buffer (/dev/kmsg), where this user may read it.

The driver logs GPU faults as `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus`. Reading
/dev/kmsg is non-blocking and bounded; it is only tried on a machine with an NVIDIA driver, and where the kernel
refuses (dmesg_restrict, a container without CAP_SYSLOG) `xid.readable` is false and the rules stay quiet.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable

from olmo_doctor.facts import Facts
from olmo_doctor.probes.gpu import driver_present

KMSG = "/dev/kmsg"
XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]*)\): (?P<code>\d+)\b")
MAX_RECORDS = 20000
MAX_SECONDS = 0.05


def parse(lines: Iterable[str]) -> Facts:
    """Xid facts from kernel log lines (kmsg records, dmesg or journalctl -k output)."""
    codes: list[str] = []
    events: list[str] = []
    for line in lines:
        m = XID.search(line)
        if m:
            if m.group("code") not in codes:
                codes.append(m.group("code"))
            events.append(line[m.start():][:200])
    return {"xid.readable": True, "xid.codes": codes, "xid.events": events[-5:]}


def _read_kmsg(path: str) -> list[str] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    lines: list[str] = []
    deadline = time.monotonic() + MAX_SECONDS
    try:
        while len(lines) < MAX_RECORDS and time.monotonic() < deadline:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break  # the end of the buffer
            except OSError as e:
                if e.errno == 32:  # EPIPE: a record was overwritten while reading; the next read goes on
                    continue
                return lines or None
            if not record:
                break
            lines.append(record.decode("utf-8", errors="replace").split(";", 1)[-1])
    finally:
        os.close(fd)
    return lines


def probe(path: str = KMSG) -> Facts:
    if not driver_present():
        return {}
    lines = _read_kmsg(path)
    return parse(lines) if lines is not None else {"xid.readable": False}

"""The machine's network interfaces, for judging NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME against them.

Only interfaces with an IPv4 or IPv6 address count: NCCL and gloo bind a socket to an address, so an interface
without one is as good as absent. Probed only when one of those variables is set (psutil costs ~30 ms to import).
"""

from __future__ import annotations

import os
from typing import Any

from olmo_doctor.facts import Facts

WATCHED = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def probe() -> Facts:
    if not any(os.environ.get(name) for name in WATCHED):
        return {}
    try:
        import psutil
    except ImportError:  # without psutil: every interface, addressed or not (the check errs towards quiet)
        return _every_interface()
    return _addressed_interfaces(psutil)


def _every_interface() -> Facts:
    import socket

    try:
        return {"net.interfaces": sorted(name for _, name in socket.if_nameindex())}
    except OSError:
        return {}


def _addressed_interfaces(psutil: Any) -> Facts:
    """The interfaces with an IPv4 or IPv6 address."""
    import socket

    try:
        addrs = psutil.net_if_addrs()
    except OSError:
        return {}
    families = (socket.AF_INET, socket.AF_INET6)
    return {"net.interfaces": sorted(name for name, items in addrs.items() if any(a.family in families
                                                                               for a in items))}

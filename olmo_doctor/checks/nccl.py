"""Conditions on NCCL's and gloo's environment variables, judged against this machine's interfaces and devices.

NCCL reads NCCL_SOCKET_IFNAME and NCCL_IB_HCA as a list of prefixes separated by commas; a leading `^` excludes
what matches instead of selecting it, and `=` (after the `^`, if any) makes each entry an exact name. An IB entry
may name a port (`mlx5_0:1`). A value that leaves nothing for NCCL to use stops a multi-GPU or multi-node run at
communicator creation ("Bootstrap : no socket interface found", "NET/IB : No device found"). gloo's
GLOO_SOCKET_IFNAME is a plain list of exact interface names. Source: NCCL's environment-variable documentation
and its parseStringList / matchIfList (src/misc/utils.cc).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue


def parse_list(spec: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """(exclude, exact, [(prefix, port or None)]) for an NCCL interface or HCA list."""
    exclude = spec.startswith("^")
    rest = spec[1:] if exclude else spec
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    items: list[tuple[str, int | None]] = []
    for entry in rest.split(","):
        name, _, port = entry.strip().partition(":")
        if name:
            items.append((name, int(port) if port.strip().isdigit() else None))
    return exclude, exact, items


def selected(spec: str, names: list[str]) -> list[str]:
    """The names (`iface`, or `device:port` for RDMA ports) NCCL would use under `spec`."""
    exclude, exact, items = parse_list(spec)

    def hit(full: str) -> bool:
        name, _, port = full.partition(":")
        return any((name == prefix if exact else name.startswith(prefix))
                   and (want is None or port == str(want)) for prefix, want in items)

    return [n for n in names if hit(n) != exclude]


def _multi_gpu(facts: Mapping[str, FactValue]) -> bool:
    """NCCL runs at all: a GPU plan with several GPUs here, or a job of several nodes (`check --fleet`)."""
    count = facts.get("gpu.count")
    several = facts.get("plan.fleet") is True or (isinstance(count, int) and count > 1)
    return facts.get("plan.device") != "cpu" and several


def _names(facts: Mapping[str, FactValue], key: str) -> list[str] | None:
    value = facts.get(key)
    return [str(v) for v in value] if isinstance(value, list) else None


@fact_check
def socket_ifname_matches_nothing(facts: Mapping[str, FactValue]) -> Context:
    """NCCL_SOCKET_IFNAME selects none of this machine's interfaces (with an address), on a multi-GPU plan."""
    spec, interfaces = facts.get("env.NCCL_SOCKET_IFNAME"), _names(facts, "net.interfaces")
    if not isinstance(spec, str) or not spec.strip() or interfaces is None or not _multi_gpu(facts):
        return None
    if selected(spec.strip(), interfaces):
        return None
    return {"interfaces": ", ".join(interfaces) or "none"}


def _leaves_something(spec: str, ports: list[str]) -> bool:
    """NCCL_IB_HCA selects a port, or is an exclusion on a machine without RDMA (NCCL uses sockets anyway)."""
    return bool(selected(spec, ports) or (parse_list(spec)[0] and not ports))


@fact_check
def ib_hca_matches_nothing(facts: Mapping[str, FactValue]) -> Context:
    """NCCL_IB_HCA selects none of this machine's RDMA ports, on a multi-GPU plan."""
    spec = _set(facts, "NCCL_IB_HCA")
    ports = _names(facts, "ib.ports") or []
    probed = facts.get("infiniband.present") is not None or bool(ports)  # a report may not say
    if spec is None or not probed or not _multi_gpu(facts):
        return None
    if _leaves_something(spec.strip(), ports):
        return None
    return {"ib_ports": ", ".join(ports) or "no RDMA devices (/sys/class/infiniband is empty)"}


def _absent(spec: str, interfaces: list[str]) -> list[str]:
    """The names of a comma-separated list this machine has no interface of."""
    return [n.strip() for n in spec.split(",") if n.strip() and n.strip() not in interfaces]


@fact_check
def gloo_ifname_matches_nothing(facts: Mapping[str, FactValue]) -> Context:
    """GLOO_SOCKET_IFNAME names an interface this machine does not have (gloo takes exact names)."""
    spec, interfaces = facts.get("env.GLOO_SOCKET_IFNAME"), _names(facts, "net.interfaces")
    if not isinstance(spec, str) or not spec.strip() or interfaces is None:
        return None
    missing = _absent(spec, interfaces)
    return {"missing": ", ".join(missing), "interfaces": ", ".join(interfaces) or "none"} if missing else None


@fact_check
def ib_transport_without_devices(facts: Mapping[str, FactValue]) -> Context:
    """NCCL_NET forces the InfiniBand transport on a machine without RDMA devices."""
    net = facts.get("env.NCCL_NET")
    if not isinstance(net, str) or net.strip().lower() != "ib" or facts.get("infiniband.present") is not False:
        return None
    return {} if facts.get("plan.device") != "cpu" else None


# NCCL reads these as integers (ncclLoadParam: strtoll, the whole value) and ignores anything else with
# "Invalid value ... using default"; these take one of a few words.
INTEGER_VARS = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_NTHREADS",
                "NCCL_NSOCKS_PERTHREAD", "NCCL_IB_GID_INDEX")
WORD_VARS = {"NCCL_P2P_LEVEL": ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4", "5"),
             "NCCL_SOCKET_FAMILY": ("AF_INET", "AF_INET6"),
             "NCCL_DEBUG": ("VERSION", "WARN", "INFO", "TRACE", "ABORT")}


def _set(facts: Mapping[str, FactValue], var: str) -> str | None:
    value = facts.get(f"env.{var}")
    return value if isinstance(value, str) and value.strip() else None


def _malformed(facts: Mapping[str, FactValue]) -> list[str]:
    bad = [f"{var}={value} (not an integer)" for var in INTEGER_VARS
           if (value := _set(facts, var)) is not None and not re.fullmatch(r"\s*-?\d+\s*", value)]
    bad += [f"{var}={value} (one of {', '.join(w for w in words if not w.isdigit())})"
            for var, words in WORD_VARS.items()
            if (value := _set(facts, var)) is not None and value.strip().upper() not in words]
    return bad


@fact_check
def nccl_value_malformed(facts: Mapping[str, FactValue]) -> Context:
    """An NCCL variable holds a value NCCL cannot read, so it silently uses its default instead."""
    bad = _malformed(facts)
    return {"malformed": "; ".join(bad), "first_var": bad[0].split("=", 1)[0]} if bad else None

"""Where this process sits in a torchrun or srun job: rank, world size, local rank, and its node's name.

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT; a plain `srun` sets SLURM_PROCID /
SLURM_NTASKS / SLURM_LOCALID, and the first host of SLURM_JOB_NODELIST serves as the rendezvous. The node name is
OLMO_DOCTOR_NODE_NAME when set (so one machine can pose as several nodes: `{rank}`, `{local_rank}` and
`{group_rank}` in it are replaced), else SLURMD_NODENAME, else the host name. Everything read here is data:
a name is reduced to letters, digits, '.', '_' and '-' before it names a node or a report file.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from olmo_doctor.errors import UsageError

LAUNCH_HINT = ("run it under torchrun or srun, e.g. PYTHONSAFEPATH=1 torchrun --nnodes N --nproc-per-node G "
               "-m olmo_doctor check --fleet")


@dataclass(frozen=True)
class Place:
    rank: int
    world: int
    local_rank: int
    node: str


def _int(env: Mapping[str, str], name: str) -> int:
    text = env.get(name, "")
    if not text.strip().isdigit():
        raise UsageError(f"{name}={text!r} is not a non-negative integer; {LAUNCH_HINT}")
    return int(text)


def first_host(nodelist: str) -> str | None:
    """The first host of a Slurm node list: 'gpu[003-005,9],login1' -> 'gpu003'."""
    m = re.match(r"\s*([A-Za-z0-9._-]+)(?:\[([0-9]+))?", nodelist)
    if not m:
        return None
    return m.group(1) + (m.group(2) or "")


def safe_node_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name.strip())[:64].lstrip(".") or "node"


def node_name(env: Mapping[str, str], rank: int, local_rank: int) -> str:
    raw = env.get("OLMO_DOCTOR_NODE_NAME") or env.get("SLURMD_NODENAME") or socket.gethostname()
    for token, value in (("{rank}", rank), ("{local_rank}", local_rank),
                         ("{group_rank}", env.get("GROUP_RANK", env.get("SLURM_NODEID", "0")))):
        raw = raw.replace(token, str(value))  # literal tokens only: the value is never a format string
    return safe_node_name(raw)


def _srun_rendezvous(env: Mapping[str, str], rank: int, world: int, local: int) -> None:
    """Under srun, torch's rendezvous variables from SLURM's (MASTER_ADDR: the job's first node)."""
    host = env.get("MASTER_ADDR") or first_host(env.get("SLURM_JOB_NODELIST", ""))
    if not host:
        raise UsageError("set MASTER_ADDR to the first node of the job "
                         "(MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1))")
    os.environ.update({"MASTER_ADDR": host, "MASTER_PORT": env.get("MASTER_PORT", "29500"),
                       "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local)})


# (rank, world size, local rank) variables of each launcher: torchrun's, then srun's
_LAUNCHERS = (("RANK", "WORLD_SIZE", "LOCAL_RANK"), ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def _ranks(env: Mapping[str, str]) -> tuple[int, int, int]:
    """(rank, world size, local rank) as the launcher set them; UsageError outside a launcher."""
    for rank_key, world_key, local_key in _LAUNCHERS:
        if rank_key in env and world_key in env:
            rank, world = _int(env, rank_key), _int(env, world_key)
            local = _int(env, local_key) if local_key in env else 0
            if rank_key == "SLURM_PROCID" and env is os.environ:
                _srun_rendezvous(env, rank, world, local)
            return rank, world, local
    raise UsageError(f"check --fleet needs a launcher: {LAUNCH_HINT}")


def place(env: Mapping[str, str] | None = None) -> Place:
    """This process's place in the job; sets the rendezvous variables for srun. UsageError outside a launcher."""
    env = os.environ if env is None else env
    rank, world, local = _ranks(env)
    if world < 1 or rank >= world:
        raise UsageError(f"rank {rank} does not fit a world of {world}; {LAUNCH_HINT}")
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        raise UsageError(f"MASTER_ADDR and MASTER_PORT are not set; {LAUNCH_HINT}")
    return Place(rank, world, local, node_name(env, rank, local))

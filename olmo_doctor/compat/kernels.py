"""What the kernel packages run on: flash-attn's arch tokens, the GPUs with float8 tensor cores, and the torchao
release made for each torch. (Each kernel's own minimums per version live in its recipe, recipes/*.toml.)
"""

from __future__ import annotations

from olmo_doctor.compat.release import major_minor
from olmo_doctor.compat.versions import parse_version


def flash_attn_arch(cc: object) -> str | None:
    """flash-attn 2's arch token for a compute capability. Only 80, 90, 100, 120 emit gencodes (flash_attn
    2.8.3.post2 setup.py L179-191); desktop 8.x runs sm_80 SASS; 10.3 runs 10.0; 12.1 runs 12.0 (same-major
    binary compatibility)."""
    mm = major_minor(cc)
    if mm is None or mm[0] < 8:
        return None
    return {8: "80", 9: "90", 10: "100", 12: "120"}.get(mm[0])


# Float8 tensor cores (the e4m3/e5m2 GEMMs torch._scaled_mm runs) exist from compute capability 8.9: Ada (8.9),
# Hopper (9.0), Blackwell (10.x, 12.x); Ampere (8.0, 8.6, 8.7) has none. Source: torch._scaled_mm's own check
# ("only supported on CUDA devices with compute capability >= 9.0 or 8.9"), and torchtitan's float8 converter,
# which swaps in torchao's Float8Linear only on SM89 or later (pytorch/torchtitan PR 1096).
# olmo/nn/float8.py refuses `precision: fp8` below it.
FLOAT8_MIN_CC = (8, 9)


# torch -> the torchao release made for it (what to reinstall when torchao fails to import against this torch).
# Up to 0.16.0 each torchao wheel is built against one torch and checks it by exact version: torchao's release
# compatibility table (https://github.com/pytorch/ao/issues/2919) and the `torchao_pytorch_compatible_versions`
# pairs in its torchao/__init__.py (0.15.0 with 2.9.1 and 2.10.0.dev, 0.16.0 with 2.10.0). 0.17.0 is ABI stable
# against torch 2.11 and later (https://github.com/pytorch/ao/pull/4154) and 0.18.0 requires torch >= 2.11 (its
# release notes, https://github.com/pytorch/ao/releases/tag/v0.18.0). Rows: the lowest torch of the row, in PEP 440
# order (a nightly 2.10.0.dev sorts before 2.10.0, as torchao's own pairs do), and the requirement.
TORCHAO_FOR_TORCH: tuple[tuple[str, str], ...] = (
    ("2.11", "torchao>=0.17.0"),
    ("2.10", "torchao==0.16.0"),
    ("2.9.1", "torchao==0.15.0"),
    ("2.9", "torchao==0.14.1"),
    ("2.8", "torchao==0.13.0"),
    ("2.5", "torchao==0.12.0"),  # 0.12.0: built for 2.7.1, 2.6.0 and 2.5.0
)


def torchao_for_torch(torch: object) -> str | None:
    """The pip requirement of the torchao release made for this torch ('2.10.0+cu128' -> 'torchao==0.16.0',
    '2.11.0' -> 'torchao>=0.17.0'); None for a torch older than 2.5 or an unreadable version."""
    v = parse_version(torch)
    if v is None:
        return None
    for lowest, requirement in TORCHAO_FOR_TORCH:
        floor = parse_version(lowest)
        if floor is not None and v >= floor:
            return requirement
    return None

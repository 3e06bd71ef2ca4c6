"""Stand-ins for the build cache's tests (the doctor's and the security ones): a flash-attn build plan for the
H200 and a minimal valid pure-Python wheel in place of a compiled one."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from olmo_doctor.build.plan import BuildRequest, plan_build
from olmo_doctor.build.recipes import find_recipe
from tests.machines import H200

FA = find_recipe("flash-attn")
WHEEL_FILE = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def flash_attn_plan(facts=H200, **req):
    return plan_build(facts, FA, BuildRequest(package="flash-attn", **req))


def stand_in_wheel(directory: Path, name: str = "olmo_doctor_cachetest", version: str = "1.0+olmo.hd128.bf16") -> Path:
    """A minimal valid pure-Python wheel (stands in for a compiled flash-attn wheel)."""
    dist = f"{name}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": WHEEL_FILE,
    }
    record = (
        "".join(
            f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
            for n, b in files.items()
        )
        + f"{dist}.dist-info/RECORD,,\n"
    )
    with zipfile.ZipFile(path, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr(f"{dist}.dist-info/RECORD", record)
    return path

"""Benchmark a cached kernel reinstall (`olmo-doctor build-kernels` with its wheel in the cache) against the anchor
measured in the same run: plain `pip install --no-deps --no-index --force-reinstall WHEEL` of the same wheel into
the same environment (what the install itself must cost). Target: the cached reinstall <= 5 s.

    python3 bench/cached_reinstall.py                      # flash-attn, --subset olmo, a 64 MB stand-in wheel
    python3 bench/cached_reinstall.py --package xformers --subset none --size-mb 120

No kernel is compiled: the wheel is a stand-in of the plan's exact name and version (a package of the kernel's
name holding --size-mb of incompressible bytes and --py-files modules, as a built kernel's wheel holds its .so and
its Python), stored in a fresh wheel cache under this machine's real plan key, as build-kernels stores what it
built. Everything happens in a throwaway venv (the machine's torch and this project are seen through a .pth
file, nothing is installed into them) with XDG_CACHE_HOME and XDG_STATE_HOME in a temp folder.

Sequence: the anchor installs the wheel once; `olmo-doctor check --scope install` then answers for the machine
(the torch worker runs: this is what the build before a reinstall did); then --repeats rounds of anchor and cached
reinstall, alternating. Each cached reinstall follows an install that changed the kernel's files and site-packages,
as it does after a build. Printed: each time, the medians, their ratio and difference, and how many torch-worker
answers the cached reinstalls added to the cache (0: no torch import). Exit 0 when every cached reinstall says
"cached", adds no worker answer and the median is <= 5 s; 1 otherwise; 2 when the machine cannot plan the build
(no GPU: build-kernels refuses, as it should). `--json FILE` saves the results.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 5.0
# build-kernels' package -> the module its wheel installs
MODULE = {"flash-attn": "flash_attn", "flash-attn-3": "flash_attn_3", "xformers": "xformers"}
PLAN = """
import json, sys
from olmo_doctor.commands.build_kernels import _plans
package, subset = sys.argv[1], sys.argv[2] or None
((recipe, plan),) = _plans([package], None, None, subset, None, (), None)
if not plan.ok:
    print(json.dumps({"refused": [b.code + " " + b.title for b in plan.blockers]}))
    sys.exit(0)
print(json.dumps({"version": plan.version, "digest": plan.cache_digest, "dist": recipe.package}))
"""
PUT = """
import sys
from pathlib import Path
from olmo_doctor.build import cache
from olmo_doctor.commands.build_kernels import _plans
package, subset, wheel = sys.argv[1], sys.argv[2] or None, Path(sys.argv[3])
((_, plan),) = _plans([package], None, None, subset, None, (), None)
print(cache.store(plan, wheel))
"""


def stand_in_wheel(folder: Path, dist: str, module: str, version: str, size_mb: int, py_files: int) -> Path:
    """A valid wheel named as the plan's: the kernel's module with a large binary payload and some Python."""
    name = dist.replace("-", "_")
    tag = f"{name}-{version}"
    files = {f"{module}/__init__.py": b"__version__ = '%s'\n" % version.encode()}
    files.update({f"{module}/part_{i}.py": b"def f():\n    return %d\n" % i for i in range(py_files)})
    files[f"{module}/_stand_in_kernel.so"] = os.urandom(size_mb << 20)
    files[f"{tag}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    files[f"{tag}.dist-info/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
                                       b"Tag: py3-none-any\n")
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},"
                     f"{len(b)}\n" for n, b in files.items()) + f"{tag}.dist-info/RECORD,,\n"
    path = folder / f"{tag}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr(f"{tag}.dist-info/RECORD", record)
    return path


def make_venv(venv: Path) -> str:
    """A venv whose own site-packages comes first, then every site folder of this Python (its torch, pip and this
    project's dependencies, whether this Python is a system one or itself a venv): installs go to the venv only."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    parents = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    Path(own, "zz_parent_environment.pth").write_text("".join(f"{p}\n" for p in parents))
    return python


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    return time.monotonic() - start, proc


def worker_answers(cache: Path) -> int:
    return len(list((cache / "olmo-doctor" / "torch-facts").glob("*.json")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--package", default="flash-attn", choices=sorted(MODULE))
    ap.add_argument("--subset", default="olmo", help="'none' for the full build's plan")
    ap.add_argument("--size-mb", type=int, default=64, help="the stand-in wheel's binary payload")
    ap.add_argument("--py-files", type=int, default=40, help="Python modules in the stand-in wheel")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", dest="json_out", help="also write the results to this file")
    args = ap.parse_args()
    subset = "" if args.subset == "none" else args.subset
    tmp = Path(tempfile.mkdtemp(prefix="olmo-bench-reinstall-"))
    try:
        return run(args, subset, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, subset: str, tmp: Path) -> int:
    python = make_venv(tmp / "venv")
    cache = tmp / "cache"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "XDG_STATE_HOME": str(tmp / "state"),
           "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    planned = subprocess.run([python, "-c", PLAN, args.package, subset], capture_output=True, text=True, env=env,
                             cwd=tmp)
    try:
        plan = json.loads(planned.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"bench: could not plan: {planned.stderr.strip()[-800:]}", file=sys.stderr)
        return 2
    if "refused" in plan:
        print(f"bench: build-kernels refuses this machine ({'; '.join(plan['refused'])}): nothing to reinstall",
              file=sys.stderr)
        return 2
    wheel = stand_in_wheel(tmp, plan["dist"], MODULE[args.package], plan["version"], args.size_mb, args.py_files)
    stored = subprocess.run([python, "-c", PUT, args.package, subset, str(wheel)], capture_output=True, text=True,
                            env=env, cwd=tmp, check=True).stdout.strip()
    anchor_argv = [python, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", "--quiet", stored]
    cached_argv = [python, "-m", "olmo_doctor", "build-kernels", "--package", args.package, "--no-verify", "--json",
                   *(["--subset", subset] if subset else [])]
    first, proc = timed(anchor_argv, env)
    if proc.returncode:
        print(f"bench: pip could not install the stand-in wheel: {proc.stderr.strip()[-800:]}", file=sys.stderr)
        return 1
    warm_s, _ = timed([python, "-m", "olmo_doctor", "check", "--scope", "install", "--json"], env)
    answers = worker_answers(cache)
    anchor, cached, statuses = [], [], []
    for _ in range(args.repeats):
        seconds, proc = timed(anchor_argv, env)
        anchor.append(seconds)
        seconds, proc = timed(cached_argv, env)
        cached.append(seconds)
        try:
            result = json.loads(proc.stdout)["results"][0]
        except (ValueError, KeyError, IndexError):
            result = {"status": f"no JSON (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"}
        statuses.append(result.get("status"))
    added = worker_answers(cache) - answers
    a, c = statistics.median(anchor), statistics.median(cached)
    results = {
        "package": args.package, "subset": args.subset, "wheel_mb": round(wheel.stat().st_size / 2**20, 1),
        "anchor_pip_s": [round(x, 2) for x in anchor], "cached_reinstall_s": [round(x, 2) for x in cached],
        "first_install_s": round(first, 2), "check_warm_up_s": round(warm_s, 2), "statuses": statuses,
        "anchor_median_s": round(a, 2), "cached_median_s": round(c, 2), "ratio": round(c / a, 2),
        "overhead_s": round(c - a, 2), "worker_answers_added": added,
    }
    checks = {f"cached reinstall median <= {TARGET_S:g} s": c <= TARGET_S,
              "every reinstall came from the cache": all(s == "cached" for s in statuses),
              "no torch worker ran (no torch import)": added == 0}
    results["checks"] = checks
    print(json.dumps(results, indent=1))
    print(f"\n{args.package}: cached reinstall {c:.2f} s vs plain pip install {a:.2f} s of the same "
          f"{results['wheel_mb']} MB wheel (ratio {c / a:.2f}, +{c - a:.2f} s); torch-worker answers added: {added}")
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

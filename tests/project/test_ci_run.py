"""`.ci/run`: step 1 (the README's test command) runs with every core kept busy, by a load that ends by itself,
and the shells the shell tests need are installed first."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI = (ROOT / ".ci" / "run").read_text()


def test_step_1_runs_beside_a_bounded_busy_loop_per_core() -> None:
    readme = re.search(r"Run the tests.*?```bash\n(.+?)\n```", (ROOT / "README.md").read_text(), re.S)
    assert readme
    lines = CI.splitlines()
    step1 = lines.index(readme.group(1))
    start = next(i for i, line in enumerate(lines) if "while :; do :; done" in line)
    assert start < step1 and re.search(r"\btimeout \d+ sh -c 'while :; do :; done' &", lines[start])
    assert any("nproc" in line for line in lines[start - 3:start])  # one per core
    assert "trap stop_load EXIT" in CI and any(line.strip() == "stop_load" for line in lines[step1:step1 + 4])


def test_the_load_stops_with_the_script(tmp_path: Path) -> None:
    """The load block of .ci/run, run on its own and ended early: no busy loop is left behind."""
    block = CI[CI.index("load=()"):CI.index('echo "==> .ci/run: step 1 runs beside')]
    script = tmp_path / "load.sh"
    script.write_text("set -uo pipefail\n" + block + "echo ${load[@]}\nexit 3\n")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    pids = proc.stdout.split()
    assert proc.returncode == 3 and pids
    alive = subprocess.run(["ps", "-o", "pid=", "-p", ",".join(pids)], capture_output=True, text=True).stdout.split()
    assert alive == []


def test_the_shells_are_installed_before_the_tests() -> None:
    install = CI.index("apt-get install")
    assert install < CI.index("./install.sh") and all(sh in CI[:install] for sh in ("zsh", "fish", "dash"))

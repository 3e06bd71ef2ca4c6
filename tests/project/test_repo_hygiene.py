"""The repository stands alone: no shipped file cites notes that do not ship, and no test reads outside it."""

from __future__ import annotations

import re

from helpers import ROOT

SHIPPED = [p for folder in ("olmo_doctor", "olmo", "olmo_common", "known_issues", "recipes", "bench", "tests")
           for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".toml", ".yaml", ".md", ".sh")]
SHIPPED += [ROOT / "README.md", ROOT / "install.sh", ROOT / "pyproject.toml", ROOT / ".ci" / "run"]
# the research notes and scratch folders that lived beside the repository while it was written
OUTSIDE_NOTES = re.compile(r"olmo_anchor|doctor_anchors|kernels_build\.md|shared/(?:bench|corpus|fixtures|research)"
                           r"|env_capture\.sh|\.\./shared|/work/shared")


def test_no_file_cites_notes_that_do_not_ship() -> None:
    this = ROOT / "tests" / "project" / "test_repo_hygiene.py"
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in SHIPPED if p != this and p.is_file()
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if OUTSIDE_NOTES.search(line)]
    assert not hits, f"citations of files that are not in the repository: {hits}"


def test_no_test_reads_above_the_repository() -> None:
    """`Path(__file__).parents[k]` never climbs past the repository root; no absolute path into the host."""
    hits = []
    for p in sorted((ROOT / "tests").rglob("*.py")):
        root_level = len(p.relative_to(ROOT).parts) - 1  # parents[root_level] is the repository root
        for n, line in enumerate(p.read_text().splitlines(), 1):
            climbs = [int(k) for k in re.findall(r"parents\[(\d+)\]", line)]
            if any(k > root_level for k in climbs) or re.search(r"Path\(\"/(?:work|root|home)\b", line):
                hits.append(f"{p.relative_to(ROOT)}:{n}")
    assert not hits, f"tests that reach outside the repository: {hits}"


def test_ci_runs_the_readme_test_command_verbatim_then_the_rest() -> None:
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"Run the tests.*?```bash\n(.+?)\n```", readme, re.S)
    assert command, "README.md has no test command block"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command.group(1) in ci, ".ci/run must run the README's test command verbatim"
    marks = re.search(r'-m "([^"]+)"', command.group(1))
    assert marks and "not slow" in marks.group(1) and "not network" in marks.group(1)
    assert any(line == 'select="(slow or network) and not gpu"' for line in ci), "the second step must run the rest"
    assert any('-m "$select"' in line for line in ci), "the second step must run what it selected"

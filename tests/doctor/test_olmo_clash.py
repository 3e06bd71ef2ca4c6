"""A foreign top-level `olmo` (allenai's ai2-olmo) is named in one line by both CLIs (rule OD260), exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRY = "import sys; from olmo_doctor.olmo_clash import olmo_main; sys.argv[0] = 'olmo'; olmo_main()"


def _fake_ai2_olmo(root: Path) -> Path:
    """What `pip install ai2-olmo` leaves: a top-level olmo/ package and its dist-info listing it."""
    (root / "olmo").mkdir(parents=True)
    marker = root / "ran"
    # if our CLI ever imported the foreign package's code, this file would appear
    (root / "olmo" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\nVERSION = '0.6.0'\n")
    info = root / "ai2_olmo-0.6.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ai2-olmo\nVersion: 0.6.0\n")
    (info / "RECORD").write_text("olmo/__init__.py,,\nai2_olmo-0.6.0.dist-info/METADATA,,\n")
    return marker


def test_olmo_names_the_clash_in_one_line(tmp_path: Path) -> None:
    marker = _fake_ai2_olmo(tmp_path / "site")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    proc = subprocess.run([sys.executable, "-c", ENTRY, "train", "--smoke"], capture_output=True, text=True,
                          env=env, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("olmo: `import olmo` loads ai2-olmo") and "OD260" in lines[0]
    assert "pip uninstall -y ai2-olmo" in lines[0] and proc.stdout == ""
    assert not marker.exists()  # nothing of the foreign package ran


def test_olmo_runs_normally_without_a_clash(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", ENTRY, "validate-shards", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == f"olmo: {tmp_path / 'none'} is not a directory"


def test_olmo_doctor_names_the_clash_instead_of_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import olmo_doctor.cli
    import olmo_doctor.olmo_clash

    def broken(**kwargs: object) -> None:  # a command importing the bundled trainer when `olmo` is ai2-olmo's
        raise ModuleNotFoundError("No module named 'olmo.smoke'")

    monkeypatch.setattr(olmo_doctor.cli, "app", broken)
    monkeypatch.setattr(olmo_doctor.olmo_clash, "foreign_origin", lambda: "ai2-olmo")
    with pytest.raises(SystemExit) as exc:
        olmo_doctor.cli.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("olmo-doctor: `import olmo` loads ai2-olmo") and "OD260" in err[0]

    monkeypatch.setattr(olmo_doctor.olmo_clash, "foreign_origin", lambda: None)  # a real bug stays a bug
    with pytest.raises(ModuleNotFoundError):
        olmo_doctor.cli.main()


def test_ai2_olmo_written_over_our_files_is_named_too(tmp_path: Path) -> None:
    """pip puts ai2-olmo's olmo/ into the same folder as ours: the origin looks like ours, the import breaks."""
    import olmo_doctor.olmo_clash as clash

    site = tmp_path / "site"
    _fake_ai2_olmo(site)
    (site / "olmo" / "__init__.py").write_text("raise ImportError('cannot import name Trainer from olmo.train')\n")
    code = ("import sys, olmo_doctor.olmo_clash as c; c.foreign_origin = lambda: None; sys.argv[0] = 'olmo'; "
            "c.olmo_main()")
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, "-c", code, "train", "--smoke"], capture_output=True, text=True, env=env,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"olmo: {clash.clash_line('ai2-olmo')}"]

"""Usage errors in both command lines, through their one shared error path (olmo_common/cli_errors.py): one line
on stderr, `PROG: ...`, exit 2, no traceback and no box, click's own errors with a `--help` pointer.

The table is the family of what a new user types wrong: an unknown command or option, a missing or malformed
value, a value no machine has (an --arch no GPU has, a rule code that does not exist), a file that is not what
its name or its option says (an empty or non-gzip `--source`, a plain log called `.gz`/`.bz2`/`.xz`, gzip called
`.bz2`, a format diagnose does not read), options that only mean something with another (`--fleet-*` without
`--fleet`), a URL where a local path goes, and an empty recipe. Each case runs the real entry point in-process.
"""

from __future__ import annotations

import bz2
import gzip
import io
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest


def _files(root: Path) -> dict[str, Path]:
    """Every bad file the table names, made once per test in `root`."""
    made: dict[str, Path] = {}

    def put(name: str, data: bytes) -> None:
        made[name] = root / name
        made[name].write_bytes(data)

    put("empty.tar.gz", b"")
    put("text.tar.gz", b"not an archive\n")
    put("gzip-not-tar.tar.gz", gzip.compress(b"just text, no tar inside\n" * 40))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz"):
        pass
    put("empty-tar.tar.gz", buf.getvalue())
    put("sdist.zip", b"PK\x03\x04")
    put("plain.log.gz", b"ERROR: something failed\n")
    put("plain.log.bz2", b"ERROR: something failed\n")
    put("plain.log.xz", b"ERROR: something failed\n")
    put("gzip.log.bz2", gzip.compress(b"ERROR: something failed\n"))
    put("bz2.log.xz", bz2.compress(b"ERROR: something failed\n"))
    put("build.log.zst", b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    put("empty.yaml", b"")
    put("comments.yaml", b"# nothing here\n")
    put("docs.jsonl.gz", b'{"text": "plain text named .gz"}\n')
    put("file.txt", b"a file, not a folder\n")
    (root / "no-setup").mkdir()
    made["no-setup"] = root / "no-setup"
    return made


DOCTOR: list[tuple[str, Callable[[dict[str, Path]], list[str]], str]] = [
    ("unknown-command", lambda f: ["nosuchcmd"], "No such command"),
    ("unknown-option", lambda f: ["check", "--bogus"], "No such option: --bogus"),
    ("missing-argument", lambda f: ["explain"], "Missing argument"),
    ("option-without-value", lambda f: ["check", "--scope"], "requires an argument"),
    ("not-a-number", lambda f: ["build-kernels", "--jobs", "x"], "is not a valid"),
    ("not-a-choice", lambda f: ["build-kernels", "--package", "banana"], "is not one of"),
    ("out-of-range", lambda f: ["verify", "--steps", "0"], "is not in the range"),
    ("unknown-scope", lambda f: ["check", "--scope", "banana"], "unknown scope"),
    ("unknown-format", lambda f: ["env", "--format", "xml"], "unknown format"),
    ("fix-unknown-code", lambda f: ["fix", "--only", "OD999"], "OD999: no such rule"),
    ("fix-one-unknown-of-two", lambda f: ["fix", "--only", "OD201,OD998"], "OD998: no such rule"),
    ("fix-project-is-a-file", lambda f: ["fix", "--project", str(f["file.txt"])], "is not a folder"),
    ("arch-banana", lambda f: ["build-kernels", "--arch", "banana", "--dry-run"], "not the compute capability"),
    ("arch-no-gpu-has", lambda f: ["build-kernels", "--arch", "9.9", "--dry-run"], "not the compute capability"),
    ("arch-zero", lambda f: ["build-kernels", "--arch", "0", "--dry-run"], "not the compute capability"),
    ("arch-negative", lambda f: ["build-kernels", "--arch", "-1", "--dry-run"], "not the compute capability"),
    ("arch-empty", lambda f: ["build-kernels", "--arch", "", "--dry-run"], "not the compute capability"),
    ("source-empty-file", lambda f: ["build-kernels", "--source", str(f["empty.tar.gz"]), "--dry-run"], "is empty"),
    ("source-not-gzip", lambda f: ["build-kernels", "--source", str(f["text.tar.gz"]), "--dry-run"],
     "is not gzip data"),
    ("source-gzip-not-tar", lambda f: ["build-kernels", "--source", str(f["gzip-not-tar.tar.gz"]), "--dry-run"],
     "not a readable tar.gz"),
    ("source-empty-archive", lambda f: ["build-kernels", "--source", str(f["empty-tar.tar.gz"]), "--dry-run"],
     "empty archive"),
    ("source-not-an-sdist", lambda f: ["build-kernels", "--source", str(f["sdist.zip"]), "--dry-run"],
     "give a source folder or a .tar.gz sdist"),
    ("source-folder-without-setup", lambda f: ["build-kernels", "--source", str(f["no-setup"]), "--dry-run"],
     "has no setup.py"),
    ("diagnose-plain-called-gz", lambda f: ["diagnose", str(f["plain.log.gz"])], "is not gzip data"),
    ("diagnose-plain-called-bz2", lambda f: ["diagnose", str(f["plain.log.bz2"])], "is not bz2 data"),
    ("diagnose-plain-called-xz", lambda f: ["diagnose", str(f["plain.log.xz"])], "is not xz data"),
    ("diagnose-gzip-called-bz2", lambda f: ["diagnose", str(f["gzip.log.bz2"])], "it is gzip data"),
    ("diagnose-bz2-called-xz", lambda f: ["diagnose", str(f["bz2.log.xz"])], "it is bz2 data"),
    ("diagnose-zstd", lambda f: ["diagnose", str(f["build.log.zst"])], "not zstd"),
    ("fleet-option-without-fleet", lambda f: ["check", "--fleet-timeout", "-1"], "go with --fleet"),
    ("fleet-size-without-fleet", lambda f: ["check", "--fleet-size-mb", "4"], "go with --fleet"),
    ("fleet-timeout-nan", lambda f: ["check", "--fleet", "--fleet-timeout", "nan"], "out of range"),
]

OLMO: list[tuple[str, Callable[[dict[str, Path]], list[str]], str]] = [
    ("unknown-command", lambda f: ["fly"], "No such command"),
    ("unknown-option", lambda f: ["train", "--fast"], "No such option"),
    ("option-without-value", lambda f: ["train", "--steps"], "requires an argument"),
    ("missing-argument", lambda f: ["export-hf"], "Missing argument"),
    ("out-of-range", lambda f: ["train", "--smoke", "--steps", "2"], "is not in the range"),
    ("empty-recipe", lambda f: ["train", str(f["empty.yaml"])], "is empty"),
    ("comments-only-recipe", lambda f: ["train", str(f["comments.yaml"])], "is empty"),
    ("empty-device", lambda f: ["train", "--smoke", "--device", ""], "--device is empty"),
    ("plain-input-called-gz", lambda f: ["prepare-data", "-i", str(f["docs.jsonl.gz"]), "-o",
                                         str(f["no-setup"] / "out"), "-t", "bundled"], "not gzip data"),
    ("url-output", lambda f: ["prepare-data", "-i", str(f["docs.jsonl.gz"]), "-o", "s3://bucket/tokens", "-t",
                              "bundled"], "s3://bucket/tokens is a URL"),
    ("url-input", lambda f: ["validate-shards", "gs://bucket/tokens"], "is a URL"),
    ("url-hf-dir", lambda f: ["import-hf", "hf://allenai/OLMo-2-0425-1B", "ck"], "is a URL"),
    ("url-recipe", lambda f: ["train", "https://example.com/recipe.yaml"], "is a URL"),
]


def _run(main: Callable[[], None], prog: str, argv: list[str], monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", [prog, *argv])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _one_line(prog: str, code: int, out: str, err: str, words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: ") and words in lines[0], err
    assert "Traceback" not in out + err and "╭" not in out + err and "Usage:" not in out + err


@pytest.mark.parametrize(("case", "argv", "words"), DOCTOR, ids=[c[0] for c in DOCTOR])
def test_doctor_usage_errors_are_one_line(case: str, argv: Callable[[dict[str, Path]], list[str]], words: str,
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from olmo_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    code, out, err = _run(main, "olmo-doctor", argv(_files(tmp_path)), monkeypatch, capsys)
    _one_line("olmo-doctor", code, out, err, words)


@pytest.mark.parametrize(("case", "argv", "words"), OLMO, ids=[c[0] for c in OLMO])
def test_olmo_usage_errors_are_one_line(case: str, argv: Callable[[dict[str, Path]], list[str]], words: str,
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from olmo.cli.main import main

    monkeypatch.chdir(tmp_path)
    code, out, err = _run(main, "olmo", argv(_files(tmp_path)), monkeypatch, capsys)
    _one_line("olmo", code, out, err, words)


@pytest.mark.parametrize("prog", ["olmo", "olmo-doctor"])
def test_click_errors_point_at_the_commands_help(prog: str, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from olmo.cli.main import main as olmo_main
    from olmo_doctor.cli import main as doctor_main

    main = olmo_main if prog == "olmo" else doctor_main
    code, _, err = _run(main, prog, ["train" if prog == "olmo" else "check", "--bogus"], monkeypatch, capsys)
    assert code == 2 and err.strip().endswith(f"(see `{prog} {'train' if prog == 'olmo' else 'check'} --help`)")


def test_both_command_lines_go_through_the_one_error_path() -> None:
    """Each `main` hands its app to olmo_common.cli_errors.run: one place decides what a usage error looks like."""
    root = Path(__file__).resolve().parents[2]
    for main in (root / "olmo" / "cli" / "main.py", root / "olmo_doctor" / "cli.py"):
        text = main.read_text()
        assert "cli_errors" in text and "run(app" in text and "standalone_mode" not in text, main


def test_one_line_is_inert() -> None:
    from olmo_common.cli_errors import one_line

    assert one_line("a\nb\x1b[31m c\u2028d \udcff") == "a b [31m c d \\xff"

"""Attacks on what olmo-doctor prints (issue #12): text from a report, a log or a file name is data for the
terminal too. Rich markup in a value (`[/]`, `[link=...]`) must print as written, never crash the printer or
restyle the output; control sequences that survive ANSI stripping (a lone ESC, the 8-bit CSI U+009B, CR, the
bidirectional overrides) must never reach the terminal; a multi-megabyte value or rule expression must not make
a command slow or exhaust memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.facts import MAX_VALUE, clean
from olmo_doctor.render import plain
from olmo_doctor.rules.expr import ExprError, Unknown, evaluate
from olmo_doctor.shell import CONTROL
from tests.machines import H200_CAPTURE
from tests.scaling import assert_linear

MARKUP = ["NVIDIA [/] H100", "H100 [/bold]", "[link=file:///etc/passwd]NVIDIA H100[/link]", "[blink]H100",
          "[bold red on white]OK[/]", "H100 [/link]", "[reverse]x[/reverse] [/]", "\\[/] H100", "NVIDIA [[/]]"]
# what a terminal would act on, after the log reader removed well-formed ANSI colour codes
TERMINAL = ["\x1bc", "\x1b\x1b]0;t\x07", "\u009b2J", "\r", "\u202e", "\u2066", "\x1b[" + "1;" * 40 + "m", "\x08",
            "\x7f", "\u0085", "\x1b#8", "\x1bP1$r\x1b\\"]


def report_with_gpu(tmp_path: Path, name: str) -> Path:
    text = (H200_CAPTURE / "collect_env.txt").read_text()
    assert "GPU 0: NVIDIA H200\n" in text, "the fixture names GPU 0"
    path = tmp_path / "r.txt"
    path.write_text(text.replace("GPU 0: NVIDIA H200\n", f"GPU 0: {name}\n"))
    return path


@pytest.mark.parametrize("value", MARKUP)
def test_markup_in_a_report_value_prints_as_written(tmp_path: Path, value: str) -> None:
    res = CliRunner().invoke(app, ["check", "--from-report", str(report_with_gpu(tmp_path, value))],
                             env={"COLUMNS": "400"})
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert res.exit_code in (0, 1), res.output
    assert value in res.output, res.output  # printed literally, not eaten as a style or a link


@pytest.mark.parametrize("value", MARKUP)
def test_markup_in_a_report_file_name_prints_as_written(tmp_path: Path, value: str) -> None:
    folder = tmp_path / value.replace("/", "").replace("\\", "") / "x["  # `x[` + `/b]`: a closing tag across folders
    folder.mkdir(parents=True)
    report = folder / "b]r.txt"
    report.write_text((H200_CAPTURE / "collect_env.txt").read_text())
    res = CliRunner().invoke(app, ["check", "--from-report", str(report)], env={"COLUMNS": "1000"})
    assert res.exit_code in (0, 1), res.output
    assert "x[/b]r.txt" in res.output


@pytest.mark.parametrize("seq", TERMINAL)
def test_control_sequences_in_a_log_never_reach_the_terminal(tmp_path: Path, seq: str) -> None:
    log = tmp_path / "build.log"
    log.write_text(f"ImportError: libcudart.so.12: cannot open shared object file A{seq}B [/] C\n")
    res = CliRunner().invoke(app, ["diagnose", str(log)], env={"COLUMNS": "400"})
    assert res.exit_code == 1, res.output
    assert "OD112" in res.output
    assert not CONTROL.search(res.output.replace("\n", "")), repr(res.output)
    if seq != "\r":  # a CR is a progress-bar redraw to the log reader: the line is cut there
        assert "[/] C" in res.output


@pytest.mark.parametrize("text", [*MARKUP, *TERMINAL, "tab\there", "two\nlines"])
def test_plain_prints_text_exactly_and_inertly(text: str) -> None:
    console = Console(file=None, width=400, force_terminal=True, color_system=None)
    with console.capture() as cap:
        console.print(plain(text), highlight=False)
    out = cap.get()
    assert not CONTROL.search(out.replace("\n", "").replace("\t", "")), repr(out)
    # as written, control characters shown as `?` (rich doubles a trailing backslash so it cannot escape a tag)
    shown = out.rstrip("\n").replace("?", "").replace("\\\\", "\\")
    expected = CONTROL.sub(lambda m: "\n" if m[0] == "\n" else "", text).replace("\\\\", "\\")
    assert "\t" in text or shown == expected, (text, out)


def test_a_huge_value_is_refused_as_a_fact_and_check_stays_fast(tmp_path: Path) -> None:
    big = "NVIDIA H100 " + "[/]" * 1_000_000
    assert clean({"gpu.0.name": big})["gpu.0.name"] is None
    assert clean({"gpu.0.name": "x" * MAX_VALUE})["gpu.0.name"] == "x" * MAX_VALUE
    res = CliRunner().invoke(app, ["check", "--from-report", str(report_with_gpu(tmp_path, big))])
    assert res.exit_code in (0, 1), res.output
    assert "gpu.0.name" in res.output and "[/][/]" not in res.output
    # the check costs the same whatever the size (rich once parsed a megabyte of escaped brackets for a minute)
    def report(n: int) -> Path:
        (tmp_path / str(n)).mkdir(exist_ok=True)
        return report_with_gpu(tmp_path / str(n), "NVIDIA H100 " + "[/]" * n)

    assert_linear(lambda path: CliRunner().invoke(app, ["check", "--from-report", str(path)]), report, 62_500, "check")


@pytest.mark.parametrize("source", [
    "[1] * 100000000000 == []", "'x' * 1000000000 == ''", "'a' * 99999999 * 99 == ''",
    "[1, 2] * 99999 * 99999 == []", "x.y * 100000000 == ''",
])
def test_rule_expressions_multiply_numbers_only(source: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(Unknown):
            evaluate(source, {"x.y": "abc"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # refused before multiplying: nothing of the product's size was allocated
    assert evaluate("2 * 3 == 6", {}) is True and evaluate("0.9 * x.n < 10", {"x.n": 10}) is True


@pytest.mark.parametrize("source", ["not " * 100_000 + "True", " + ".join(["1"] * 200_000), "not " * 900 + "True",
                                    " + ".join(["1"] * 900), "(" * 5000 + "1" + ")" * 5000])
def test_rule_expressions_nested_too_deep_are_refused(source: str) -> None:
    with pytest.raises(ExprError):
        evaluate(source, {})


@pytest.mark.parametrize("args", [["explain", "OD1\x1b[2J[/b]\nfake: line"], ["diagnose", "/nonexistent/a\x1bc\u2028b"],
                                  ["check", "--from-report", "/nonexistent/r\r\x9b2J\nfake"]])
def test_an_error_quoting_hostile_input_stays_one_inert_line(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str],
                                                             args: list[str]) -> None:
    import sys

    from olmo_doctor.cli import main

    monkeypatch.setattr(sys, "argv", ["olmo-doctor", *args])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("olmo-doctor: "), repr(err)
    assert not CONTROL.search(err.rstrip("\n")), repr(err)

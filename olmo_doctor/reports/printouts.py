"""What Python itself printed in a paste: `python -c "import torch; print(torch.__version__)"` with its output on the
next lines, a REPL's `>>> torch.__version__` then `'2.7.1+cu126'`, `pip show` blocks, and wheel file names
(`torch-2.3.1-cp310-cp310-win_amd64.whl`: the package, its version, the Python it is for).

A printed value has no name on its own line; the expression that printed it names it (vocabulary.EXPRESSIONS, and
any `<module>.__version__`). Values go to the expression in order: one `print(a, b)` per output line, its
arguments split on blanks. A script of print calls shown first and its output pasted below it (often in the next
code block, after a line of prose) is read the same way. A print of a label (`print('torch', torch.__version__)`)
prints the name itself, so the free-text reader reads that output line instead.
"""

from __future__ import annotations

import itertools
import re

from olmo_doctor.facts import FactValue
from olmo_doctor.reports.observe import Observation
from olmo_doctor.reports.vocabulary import VERSION, cudnn_version, expression_fact, package_fact

_COMMAND = re.compile(r"\bpython[\d.]{0,5}(?:\.exe)?\s{1,4}-c\s{1,4}(?P<q>['\"])(?P<code>[^\n]{1,600}?)(?P=q)")
_PRINT = re.compile(r"\bprint\(([^()]{0,200}(?:\([^()]{0,40}\)[^()]{0,200}){0,8})\)")
_REPL = re.compile(r"^\s{0,4}(?:>>>\s{0,4})?(?P<expr>[A-Za-z_][\w.]{0,80}(?:\(\))?)\s*$")
_PROMPT = re.compile(r"^\s{0,8}(?:>>>|\.\.\.|\$|#|❯|\(\S{1,60}\)\s|\S{1,80}[$#>]\s|[A-Za-z]:\\)")
_VALUE = {
    "version": re.compile(rf"['\"]?({VERSION})['\"]?"),
    "bool": re.compile(r"(True|False)"),
    "count": re.compile(r"(\d{1,3})"),
    "cudnn": re.compile(r"(\d{4,5}|\d{1,2}\.\d{1,2}(?:\.\d{1,3})?)"),
}
_WHEEL = re.compile(rf"(?<![\w.-])(?P<dist>[A-Za-z][A-Za-z0-9_.]{{0,60}}?)-(?P<ver>{VERSION})-"
                    r"(?P<py>cp\d{2,3}|py3|py2\.py3)-[\w.]{1,40}-[\w.]{1,60}\.whl\b")
# a URL and what is glued before it (a markdown link's text: "[torch-2.3.0-cp310-...whl](https://...)" offers a
# download just as the URL does)
_URL = re.compile(r"\S{0,200}://\S{0,2000}")
# a line labelled with a package's name: "torch: [torch-2.3.0a0+nv24.04-cp310-...whl](https://...)" says the wheel is
# the one in use
_LABEL = re.compile(r"^\s{0,8}(?:[-*•]\s{1,4})?\**(?P<name>[A-Za-z][\w.-]{0,40})\**\s{0,4}[:：]")
_FREEZE_URL = re.compile(r"^\s{0,8}[A-Za-z0-9][\w.-]{0,80}\s{0,4}@\s{0,4}\S{1,16}://")
_SHOW_NAME = re.compile(r"^Name:\s{0,4}([A-Za-z0-9][\w.-]{0,80})$")
_SHOW_VERSION = re.compile(r"^Version:\s{0,4}(\d[\w.+!-]{0,80})$")


def _value(kind: str, text: str) -> FactValue:
    m = _VALUE[kind].fullmatch(text.strip().strip(",")) if kind in _VALUE else None
    if m is None:
        return None
    raw = m.group(1)
    if kind == "bool":
        return raw == "True"
    if kind == "count":
        return int(raw)
    return cudnn_version(raw) if kind == "cudnn" else raw


def _args(call: str) -> list[str] | None:
    """The top-level arguments of one print call; None when one is a literal (a label the output names itself)."""
    exprs = [p.strip() for p in _top_level_split(call) if p.strip()]
    return None if any(p[:1] in "'\"" or p[:2].lower() in ("f'", 'f"') for p in exprs) else exprs


def _top_level_split(call: str) -> list[str]:
    """The call's text split at the commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in call:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _outputs(lines: list[str], start: int, count: int) -> list[tuple[int, str]]:
    """The next `count` non-blank lines after `start` that are output, not another prompt or command."""
    out: list[tuple[int, str]] = []
    for j in range(start + 1, min(start + 1 + count + 4, len(lines))):
        text = lines[j].strip()
        if not text:
            continue
        if _PROMPT.match(lines[j]) or _COMMAND.search(lines[j]):
            break
        out.append((j, text))
        if len(out) == count:
            break
    return out


def _printed(exprs: list[str], text: str) -> list[tuple[str, FactValue]]:
    """(fact, value) of one output line of `print(a, b, ...)`: its blank-separated tokens, one per expression."""
    tokens = text.split() if len(exprs) > 1 else [text]
    if len(tokens) != len(exprs):
        return []
    out: list[tuple[str, FactValue]] = []
    for expr, token in zip(exprs, tokens, strict=True):
        if (fact := expression_fact(expr)) and (value := _value(fact[1], token)) is not None:
            out.append((fact[0], value))
    return out


def _python_c(lines: list[str], i: int, obs: list[Observation], used: set[int]) -> None:
    m = _COMMAND.search(lines[i])
    prints = [_args(p.group(1)) for p in _PRINT.finditer(m.group("code"))] if m else []
    if not prints or any(p is None for p in prints):
        return
    for (j, text), exprs in zip(_outputs(lines, i, len(prints)), prints, strict=False):
        found = _printed(exprs or [], text)
        obs += [Observation(key, value, j, lines[j]) for key, value in found]
        used.update([j] if found else [])


def _repl(lines: list[str], i: int, obs: list[Observation], used: set[int]) -> None:
    m = _REPL.match(lines[i])
    fact = expression_fact(m.group("expr")) if m else None
    if fact is None:
        return
    for j, text in _outputs(lines, i, 1):
        if (value := _value(fact[1], text)) is not None:
            obs.append(Observation(fact[0], value, j, lines[j]))
            used.update((i, j))


def _wheels(lines: list[str], i: int, obs: list[Observation], used: set[int]) -> None:
    """A wheel file name states its package's version and the Python it is for. Inside a URL it is a download
    someone asked for (it may 404, or the install may fail): only the Python tag, which the installer matched to
    this interpreter, is read; pip freeze's "name @ https://..." is the installed one, and says so, as does a line
    labelled with the package's own name ("torch: [torch-...whl](https://...)")."""
    # a wheel in a URL has its local tag's "+" escaped: torch-2.1.0%2Bcu121-cp310-...whl
    line = lines[i].replace("%2B", "+").replace("%2b", "+")
    urls = [m.span() for m in _URL.finditer(line)] if "://" in line else []
    installed_from_url = bool(_FREEZE_URL.match(line))
    label = package_fact(lab.group("name")) if (lab := _LABEL.match(line)) else None
    for m in _WHEEL.finditer(line):
        fact = package_fact(m.group("dist"))
        if installed_from_url or fact == label or not any(a <= m.start() < b for a, b in urls):
            obs.append(Observation(fact, m.group("ver"), i, lines[i]))
        if (py := m.group("py")).startswith("cp"):
            obs.append(Observation("python.version", f"{py[2]}.{py[3:]}", i, lines[i]))


def _pip_show(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    for (i, line), (j, after) in itertools.pairwise(enumerate(lines)):
        if (name := _SHOW_NAME.match(line.strip())) and (version := _SHOW_VERSION.match(after.strip())):
            obs.append(Observation(package_fact(name.group(1)), version.group(1), j, after))
            used.update((i, j))


# one statement of a script that prints: an import, or a lone print call
_SCRIPT_LINE = re.compile(r"^\s{0,8}(?:import [\w., ]{1,200}|from [\w.]{1,80} import [^\n]{1,300}|"
                          r"print\(.{0,400}\))\s*$")
_STOP = re.compile(r"^\s{0,8}(?:Traceback \(most recent call last\)|\w{0,40}(?:Error|Exception|Warning):)")


def _script(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """Runs of imports and lone print calls (two prints at least), and the output lines below them: right after
    the run, or after a line or three of prose ("I received the following error:"; a paste's code fences are gone
    by now). The first start at which every print of a known expression parses as its value is taken."""
    i = 0
    while i < len(lines):
        if not _SCRIPT_LINE.match(lines[i]):
            i += 1
            continue
        end = i
        while end < len(lines) and _SCRIPT_LINE.match(lines[end]):
            end += 1
        prints = [_args(m.group(1)) for ln in lines[i:end] if (m := _PRINT.fullmatch(ln.strip()))]
        if len(prints) >= 2:
            for start in range(end, min(end + 4, len(lines))):
                if (found := _script_outputs(lines, start, prints)) is not None:
                    obs += found
                    used.update(ob.line for ob in found)
                    break
        i = end


def _script_outputs(lines: list[str], start: int, prints: list[list[str] | None]) -> list[Observation] | None:
    """One output line per print from `start`, in order, until an error; None unless every print of an expression
    the vocabulary knows gave a value of its kind there, two at least (the lines are then aligned). A print of a
    literal label takes its line without a reading (the free-text reader reads it)."""
    found: list[Observation] = []
    j = start
    for exprs in prints:
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or _STOP.match(lines[j]) or _SCRIPT_LINE.match(lines[j]):
            break
        if exprs is not None:
            got = _printed(exprs, lines[j].strip())
            if any(expression_fact(e) for e in exprs) and len(got) < sum(bool(expression_fact(e)) for e in exprs):
                return None
            found += [Observation(key, value, j, lines[j]) for key, value in got]
        j += 1
    return found if len(found) >= 2 else None


def read(lines: list[str]) -> tuple[list[Observation], set[int]]:
    obs: list[Observation] = []
    used: set[int] = set()
    _script(lines, obs, used)
    for i, line in enumerate(lines):
        if "-c" in line and "python" in line:
            _python_c(lines, i, obs, used)
        elif _REPL.match(line):
            _repl(lines, i, obs, used)
        if ".whl" in line:
            _wheels(lines, i, obs, used)
    _pip_show(lines, obs, used)
    return obs, used

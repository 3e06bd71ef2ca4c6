"""Find (name, version) mentions in free text: "I'm using GCC 14", "torch==2.5.1", "the version torch is 2.0.1",
"PyTorch : 2.0.1+cu117", ``- **flash-attn**: `2.7.4` ``, "torch.__version__ → 2.9.1+cpu", pip and conda rows.

One pass over each line: an alias from the vocabulary (vocabulary.py), then, within a short window, a value of the
fact's shape with only filler between them (punctuation, dotted leaders, "version", "is", backticks). A mention is
a fact about this machine only when nothing says otherwise:
- a requirement or intent before it in the same clause ("requires", "upgrade to", "instead of", "not", "built
  for", "compiled with", "e.g."), or after it ("or newer", "+", "is required");
- a comparison operator between name and value (`torch>=2.6`, "PyTorch ≤ 2.7");
- a path or URL around it (`python3.10/site-packages`, `.../whl/cu121`), or Python's own build compiler in its
  banner ("[GCC 11.4.0]").
Every pattern here is bounded, so the work per line is linear in its length whatever the line holds.
"""

from __future__ import annotations

import re

from olmo_doctor.facts import FactValue
from olmo_doctor.reports.observe import Observation
from olmo_doctor.reports.vocabulary import MAJOR_MINOR, NAMES, SHAPES, cudnn_version

_ALIAS_OF: dict[str, tuple[str, str]] = {alias: (n.key, n.kind) for n in NAMES for alias in n.aliases}
ALIASES = frozenset(_ALIAS_OF)  # every name the vocabulary knows, lower case
# longest first, so "torch.version.cuda" wins over "torch"; digits may follow ("python3.7.10"), letters may not
_ALIASES = re.compile(
    r"(?<![\w./\\@\[$-])(" + "|".join(re.escape(a) for a in sorted(_ALIAS_OF, key=len, reverse=True)) + r")"
    r"(\.__version__)?(?![A-Za-z_]|[-/\\][A-Za-z]|\.[A-Za-z_])", re.I)
_VALUE = {kind: re.compile(shape + r"(?![\w/\\]|\.\d|-\w)", re.I) for kind, shape in SHAPES.items()}
_WINDOW = 56
# what may stand between a name and its value
# (words that say which build of it: "PyTorch nightly (2.6.0.dev...)", "Flash-Attention wheel: 2.7.4.post1")
_FILLER_WORDS = {"version", "ver", "v", "is", "was", "are", "on", "at", "of", "the", "release", "installed", "gpu",
                 "current", "currently", "used", "using", "info", "shows", "showed", "says", "said", "reports",
                 "reported", "prints", "printed", "gives", "nightly", "stable", "latest", "preview", "wheel", "build",
                 "package", "版本", "버전", "バージョン"}
_FILLER_PUNCT = re.compile(r"[\s:=：`'\"*>→(),|\[\]{}.~&?-]*")
_OPERATOR = re.compile(r"[<≤≥~!^]|>=")
_WORD = re.compile(r"[^\W\d_]+|\+\+", re.U)
# a requirement, an intent, another thing's build, or a denial, earlier in the same clause
_CUE_BEFORE = re.compile(
    r"\b(?:requires?|required|requirements?|need(?:s|ed)?|minimum|at least|supports?|supported|support|"
    r"instead of|not|no longer|never|without|isn't|doesn't|don't|no|if|request(?:s|ed|ing)?|"
    r"(?:upgrad|downgrad|updat)(?:e|ed|ing) to|switch(?:ed|ing)? to|install|installing|reinstall|"
    r"tr(?:y|ied|ying)|recommend(?:s|ed)?|expect(?:s|ed)?|want(?:s|ed)?|would|should|compatible with|"
    r"(?:compiled|built|build) (?:with|for|against|w\.)|e\.g\.|for example|like|other|from versions|"
    # what a script or a project does, not what a machine holds: "the script builds flash-attn 2.8.3"
    r"builds|downloads|fetches|pins|installs|"
    # a question or a supposition: "Did you use PyTorch 2.4.0?", "assuming the GPU supports CUDA 12.1"
    r"(?:did|do|does|have|are|were|could|can) you|assuming|suppose|supposing|"
    # the other person's machine, in a reply: "I see that you are using GCC 13. I'm using GCC 14."
    r"you(?:'re| are| were)? us(?:e|ed|ing)|you(?:'ve| have) (?:got|installed)|"
    # a class of versions, not one: "works across all pytorch 2.4.0 CUDA versions", "any torch 2.x"
    r"across|all|any|every|"
    # what a package or a wheel is made for: "xformers for PyTorch 2.6.0", "wheels for torch 2.5"
    r"(?:wheels?|builds?|binar(?:y|ies)|xformers|flash[-_ ]?attn|flash[-_ ]?attention) for|"
    # what a release or a user took away: "torch 2.6 drops Python 3.8", "I removed torch 2.4"
    r"drops?|dropped|deprecate[sd]?|remove[sd]?|uninstall(?:ed|ing)?|"
    # what a change to a project's build matrix does: "Adds CUDA `13.2.0` for the 2.12 wheel line", "Excludes 11.8"
    r"adds|added|excludes|excluded|"
    r"satisf(?:y|ies))(?![\w-])", re.I)
_CUE_AFTER = re.compile(r"\s{0,3}(?:\+(?![\w.])|or (?:newer|later|above|higher|greater|up)\b|"
                        r"and (?:above|later|newer|up)\b|(?:is |are )?(?:required|needed|not supported|unsupported)\b|"
                        r"minimum\b|\s?(?:and|or) (?:newer|later)|"
                        # another value offered beside it: "Python 3.10/3.11", "CUDA 12.1 or 12.4" is a choice
                        r"(?:/|\bor\b|\|)\s{0,2}v?\d{1,4}\.\d|"
                        # news of a release, not of a machine: "pytorch 2.11 changes the stable version on PyPI",
                        # "torch 2.6 drops Python 3.8"
                        r"(?:changes|adds|drops|deprecates|removes|introduces|moves|switches|ships with|"
                        r"will (?:be|have|ship|drop|add|change))\b|"
                        # a release's plan, not a machine: "PyTorch 2.15 Version Support", "CUDA 13.2 support matrix"
                        r"(?:version )?support(?: matrix| policy)?(?=\s{0,3}(?:$|[:|]))|"
                        # what a package's files say, not what is installed: "xformers 0.0.33's wheel hard-pins"
                        r"['’]s (?:wheel|build|release|package|metadata|requirements?)\b|"
                        r"(?:release|support) (?:matrix|plan|policy)\b)",
                        re.I)
# a sentence's full stop ends a clause; an abbreviation's ("w.", "e.g.") does not
_CLAUSE = re.compile(r"[;,(){}\[\]]|(?<=[A-Za-z0-9)\]][A-Za-z0-9)\]])\.\s|"
                     r"\s(?:but|while|whereas|and|or|although|however|vs\.?)\s|\s-\s", re.I)
_COLON = re.compile(r":\s")
_SENTENCE_WORDS = 4
# a URL from its scheme on ("https://...", "git+https://..."): a markdown link's text before it is not part of it
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s)\]>]{0,2000}")
# a real line names a few things, near its start; past this many names, or this far into a line, it is not a
# statement about a machine (a minified blob, a log's megabyte line) and reading on would only cost time
MAX_PER_LINE = 64
MAX_LINE = 4096


def _clause_start(line: str, pos: int) -> int:
    """Where the clause holding `pos` starts (bounded look-back: cues are close to what they qualify). A colon
    after a sentence ends it ("if this helps anyone: I use torch 2.4"); a colon after a label does not
    ("Requires: torch 2.6")."""
    start = max(0, pos - 120)
    last = start
    for m in _CLAUSE.finditer(line, start, pos):
        last = m.end()
    for m in _COLON.finditer(line, last, pos):
        if len(_WORD.findall(line, last, m.start())) >= _SENTENCE_WORDS:
            last = m.end()
    return last


# the words of a fact's other aliases may stand between one alias and the value: "GCC & G++: 14.3.0"
_OWN_WORDS: dict[str, set[str]] = {}
for _alias, (_key, _) in _ALIAS_OF.items():
    _OWN_WORDS.setdefault(_key, set()).update(w.lower() for w in _WORD.findall(_alias))


def stated_here(line: str, pos: int) -> bool:
    """Does the clause around `pos` state something of this machine, rather than require, deny or intend it?"""
    return not _CUE_BEFORE.search(line, _clause_start(line, pos), pos)


def _filler(between: str, key: str) -> bool:
    if not between.strip(" :=\t"):
        return True  # the common case: "torch 2.4.0", "torch==2.4.0", "Python: 3.10"
    if _OPERATOR.search(between):
        return False
    words = _WORD.findall(between)
    own = _OWN_WORDS.get(key, set())
    return all(w.lower() in _FILLER_WORDS or w.lower() in own for w in words) and bool(
        _FILLER_PUNCT.fullmatch(_WORD.sub("", between)))


def _in_span(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


def _value(kind: str, raw: str) -> FactValue:
    if kind == "cudnn":
        return cudnn_version(raw)
    if kind == "bool":
        return raw.lower() in ("true", "yes")
    return raw


def observations(key: str, value: FactValue, index: int, line: str) -> list[Observation]:
    """The facts one mention states, in the fact's own form: a CUDA named by its full release (nvcc 12.9.1) is the
    major.minor every reader compares (the toolkit keeps its full release too), and Python has no local build tag
    ("3.12.7+gc" is 3.12.7)."""
    if isinstance(value, str) and key in MAJOR_MINOR and (mm := re.match(r"(\d{1,2}\.\d{1,2})\.\d", value)):
        extra = [Observation("nvcc.full_version", value, index, line)] if key == "nvcc.version" else []
        return [Observation(key, mm.group(1), index, line), *extra]
    if key == "python.version" and isinstance(value, str):
        value = value.split("+", 1)[0]
    return [Observation(key, value, index, line)]


def line_mentions(line: str, index: int, taken: list[tuple[int, int]] | None = None) -> list[Observation]:
    """The (fact, value) mentions one line states about this machine; `taken`: spans a tool signature read."""
    out: list[Observation] = []
    line = line[:MAX_LINE]
    urls = [m.span() for m in _URL.finditer(line)] if "://" in line else []
    urls += taken or []
    read_to = 0  # where the last mention's value ended: a name inside it qualified that one ("flash-attn wheel: 2.7")
    for n, m in enumerate(_ALIASES.finditer(line)):
        if n == MAX_PER_LINE:
            break
        if m.start() < read_to or (urls and _in_span(m.start(), urls)):
            continue
        key, kind = _ALIAS_OF[m.group(1).lower()]
        window = line[m.end():m.end() + _WINDOW]
        v = _VALUE[kind].search(window)
        if v is None or not _filler(window[:v.start()], key):
            continue
        value_end = m.end() + v.end()
        if _CUE_AFTER.match(line, value_end) or not stated_here(line, m.start()):
            continue
        if key == "cudnn.version" and v.group(1).isdigit():  # torch.backends.cudnn.version()'s integer (8700):
            key = "torch.cudnn"  # torch's own cuDNN; a system cuDNN is named by its dotted release
        out += observations(key, _value(kind, v.group(1)), index, line)
        read_to = value_end
    return out


def mentions(lines: list[str], skip: set[int], taken: dict[int, list[tuple[int, int]]]) -> list[Observation]:
    """Mentions of every line, except lines (`skip`) and parts of lines (`taken`) a tool signature read: a tool's
    output says what its numbers are itself."""
    out: list[Observation] = []
    for i, line in enumerate(lines):
        if i not in skip and line.strip():
            out += line_mentions(line, i, taken.get(i))
    return out

"""Findings and fixes: what a rule reports, in the one shape every output (text, --json, report) uses."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
Applicability = Literal["safe", "unsafe", "manual"]
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass
class Fix:
    """One way to fix a finding. `commands` are printed for the user; `action` is the typed operation
    `fix --apply` runs (None for manual fixes, which are only printed)."""

    title: str
    applicability: Applicability
    commands: list[str] = field(default_factory=list)
    action: dict[str, Any] | None = None

    @property
    def automatic(self) -> bool:
        return self.action is not None and self.applicability in ("safe", "unsafe")


@dataclass
class MatchedLine:
    """A log line a signature matched (diagnose)."""

    line: int
    text: str


@dataclass
class Finding:
    code: str
    cause: str
    severity: Severity
    title: str
    message: str
    fixes: list[Fix] = field(default_factory=list)
    name: str = ""
    why: str = ""
    sources: list[str] = field(default_factory=list)
    matched_lines: list[MatchedLine] = field(default_factory=list)
    confidence: float | None = None
    root: str | None = None  # code of the finding this one follows from (rendered nested beneath it)

    def to_json(self, diagnose: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "cause": self.cause,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "fixes": [
                {
                    "title": f.title,
                    "applicability": f.applicability,
                    "commands": list(f.commands),
                    "automatic": f.automatic,
                }
                for f in self.fixes
            ],
        }
        if self.root:
            out["root"] = self.root
        if diagnose:
            out["matched_lines"] = [asdict(m) for m in self.matched_lines]
            out["confidence"] = self.confidence
        return out


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), f.code))


def roots(findings: list[Finding]) -> list[Finding]:
    """The findings that are not a consequence of another one, in order."""
    return [f for f in findings if not f.root]


def consequences(findings: list[Finding], root: Finding) -> list[Finding]:
    return [f for f in findings if f.root == root.code]


def exit_code(findings: list[Finding]) -> int:
    """0 when no error finding, 1 when any."""
    return 1 if any(f.severity == "error" for f in findings) else 0

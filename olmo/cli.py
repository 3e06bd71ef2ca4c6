"""`olmo`: the bundled OLMo trainer's command line (placeholder until the trainer lands)."""

from __future__ import annotations

import sys


def main() -> None:
    print("olmo: the trainer is not available in this build yet", file=sys.stderr)
    sys.exit(2)

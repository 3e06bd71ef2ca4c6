"""Errors that mean "the user gave us something we cannot use": printed as one line, exit code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input or usage. The message says what is wrong and what to do; the CLI exits with code 2."""

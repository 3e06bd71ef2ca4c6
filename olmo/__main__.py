"""`python -m olmo ...` is the `olmo` command (useful where the console script is not on PATH)."""

from olmo.cli.main import main

main()

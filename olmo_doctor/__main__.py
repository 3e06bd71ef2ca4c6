"""`python -m olmo_doctor` runs the CLI."""

from olmo_doctor.cli import main

main()

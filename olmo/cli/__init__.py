"""The `olmo` command line (main.py) and its helpers: override spellings (overrides.py), --json output
(jsonout.py, summaries.py) and progress bars (progress.py)."""

"""The `olmo` command line: main.py builds the app and holds the one error path; one module per command
(prepare_data, validate_shards, train, export_hf, import_hf), each with `register(app)`; gate.py asks olmo-doctor
about the machine before training; common.py (consoles, --json flag), jsonout.py and summaries.py (--json output),
overrides.py (OLMo-core / torchtitan override spellings) and progress.py (progress bars) serve them."""

"""What `olmo` and `olmo-doctor` share, and nothing else: stdlib-only modules both packages import.

`olmo` never imports `olmo_doctor` outside its doctor gate (it must work without it), and `olmo_doctor` never
imports `olmo` (a foreign `olmo` distribution may shadow the trainer, OD260), so the few things both need live here:
`atomic` (the one crash-safe file write), `cli_errors` (the one error path of both command lines) and `bounded`
(the one reader of every file both open: regular files only, a size cap per kind, JSON/YAML within a budget).
"""

"""`olmo-doctor fix`: apply the fixes rules carry, graded safe/unsafe/manual, journaled and undoable.

rules/actions.py (the closed set of typed operations, shared with the rule loader) -> plan.py (pure: findings ->
FixPlan) -> execute.py (runs a plan, rolls back on failure, undoes) with journal.py (what ran, backups,
checksums), envfile.py (the project's .olmo-doctor/env.sh), pyenv.py (the target venv and pip), wheelpack.py
(installed packages backed up as wheels), recheck.py (the check again, as a shell that sourced env.sh sees it)
and render.py (the text output).
"""

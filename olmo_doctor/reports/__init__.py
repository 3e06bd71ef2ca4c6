"""Parsers for the text formats other machines send us (see olmo_doctor/report.py)."""

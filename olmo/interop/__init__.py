"""Other tools' formats read and written as our own: Hugging Face transformers folders (hf.py) and OLMo-core
checkpoints (olmo_core.py)."""

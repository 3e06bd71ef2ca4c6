"""Tokens on disk: the shard format (shards.py), making shards from text (prepare.py with prepare_pipeline.py),
reading them in training order (loader.py), checking them before step 1 (shard_check.py), the bundled tiny corpus
(corpus.py), and the tokenizer files and special tokens that travel with a run (tokenizer_files.py,
special_tokens.py)."""

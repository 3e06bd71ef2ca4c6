"""`olmo`: the bundled OLMo 2/3 trainer (the `olmo` command).

Read in this order: config.py (what a run is) -> model.py (the network) -> attention.py (kernels by name) ->
shards.py / prepare.py / data.py (tokens on disk, making them, reading them) -> optim.py -> checkpoint.py ->
train.py (the loop) -> parallel.py (device, torchrun, FSDP2/DDP/AC wrapping) -> hf.py (Hugging Face export and
import) -> olmo_core_compat.py (OLMo-core checkpoints) -> smoke.py (the end-to-end check) -> cli.py (with
overrides.py for override spellings, jsonout.py + summaries.py for --json, progress.py for progress bars). The
error contract: errors.py (the one error type), config_numbers.py (numbers that make no sense), shard_check.py
(data checked before step 1), lock.py (one writer per folder).
"""

"""`olmo`: the bundled OLMo 2/3 trainer (the `olmo` command).

Read in this order: config.py (what a run is; recipe.py turns YAML or Python into one) -> model.py (the network,
built from nn/: attention kernels by name, the projection layer, the chunked loss) -> data/ (the shard format,
making shards, reading them in order) -> optim/ (AdamW, the schedule, bf16 copies) -> checkpoint.py ->
preflight.py (every check before a model exists; the data opened once) -> train.py (one setup pass, then the
loop) -> parallel.py (device, torchrun, FSDP2/DDP/AC wrapping; ac_plan.py for `ac: auto`) -> interop/ (Hugging
Face folders, OLMo-core checkpoints) -> smoke.py (the end-to-end check) -> cli/ (main.py, with overrides, --json
and progress bars). Beside the loop: cuda_graph.py (a step replayed as one graph), metrics.py (MFU, where metrics
go). The error contract: errors.py (the one error type), config_numbers.py (numbers that make no sense),
data/shard_check.py (data checked before step 1), lock.py (one writer per folder), fsutil.py (crash-safe writes),
cache.py (JSON caches that never fail a run). olmo imports olmo_doctor only for the doctor gate (cli/main.py) and
build-kernels' kernel record (nn/attention_choice.py).
"""

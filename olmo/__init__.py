"""`olmo`: the bundled OLMo 2/3 trainer (the `olmo` command).

Read in this order: config.py (what a run is; recipe.py turns YAML or Python into one) -> model.py (the network,
built from nn/: attention kernels by name, the projection layer, the chunked loss) -> data/ (the shard format,
making shards, reading them in order) -> optim/ (AdamW, the schedule, bf16 copies) -> checkpoint.py ->
preflight.py (every check before a model exists; the data opened once) -> train.py (one setup pass, then the
loop) -> parallel.py (device, torchrun, FSDP2/DDP/AC wrapping; ac_plan.py for `ac: auto`) -> interop/ (Hugging
Face folders, OLMo-core checkpoints) -> smoke.py (the end-to-end check) -> cli/ (main.py, one module
per command). Beside the loop: cuda_graph.py (a step replayed as one graph), metrics.py (MFU, where metrics
go). The error contract: errors.py (the one error type), config_numbers.py (numbers that make no sense),
data/shard_check.py (data checked before step 1), lock.py (one writer per folder), fsutil.py (crash-safe writes),
cache.py (JSON caches that never fail a run). olmo imports olmo_doctor in cli/gate.py only (the
verdict before training, the machine's fault behind an error, build-kernels' kernel record) and in __main__.py's
guard naming a memory limit; olmo_doctor imports olmo only to run smoke.py (`olmo-doctor verify`) and to start
the `olmo` command. Files are read through
olmo_common.bounded, the bounded reader both packages share.
"""

# Before any other import: `python -m olmo_doctor` / `python -m olmo` (and torchrun's workers, started that way)
# put the working folder first on sys.path, and an empty or relative PYTHONPATH entry (`PYTHONPATH=:$X`) does the
# same for the console scripts, so a json.py, yaml/ or torch/ of a cloned repository would be imported in place of
# the real one. Drop every entry that names the working folder (empty, relative, or the folder itself) unless this
# package lives there (a checkout run from its top). Only sys and os, loaded by Python before any user code, are
# used. olmo_doctor/__init__.py holds the same guard, as it must run before any import there too.
import os as _os
import sys as _sys


def _drop_working_folder() -> None:
    try:
        here = _os.path.realpath(_os.getcwd())
    except OSError:  # the working folder was deleted: relative entries name nothing, absolute ones are kept
        here = None
    own = _os.path.dirname(_os.path.dirname(_os.path.realpath(__file__)))
    # Python has already made PYTHONPATH's relative entries absolute: find them again from the variable
    relative = [e for e in _os.environ.get("PYTHONPATH", "").split(_os.pathsep) if not _os.path.isabs(e)]
    bad = {here} | {_os.path.realpath(_os.path.join(here, e)) for e in relative} if here else set()
    _sys.path[:] = [p for p in _sys.path if _os.path.realpath(p or ".") == own
                    or (_os.path.isabs(p) and _os.path.realpath(p) not in bad)]


_drop_working_folder()


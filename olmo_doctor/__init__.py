"""olmo-doctor: probe a machine, judge it against a rules database of documented failures, fix what can be
fixed, build flash-attn/xformers for exactly this GPU, and hand over to the bundled OLMo trainer."""

# Before any other import: `python -m olmo_doctor` / `python -m olmo` (and torchrun's workers, started that way)
# put the working folder first on sys.path, and an empty or relative PYTHONPATH entry (`PYTHONPATH=:$X`) does the
# same for the console scripts, so a json.py, yaml/ or torch/ of a cloned repository would be imported in place of
# the real one. Drop every entry that names the working folder (empty, relative, or the folder itself) unless this
# package lives there (a checkout run from its top). Only sys and os, loaded by Python before any user code, are
# used. olmo/__init__.py holds the same guard, as it must run before any import there too.
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

__version__ = "0.1.0"

"""Config overrides in the spellings OLMo users already type, all turned into our `--set key=value`.

    olmo train R --set model.n_layers=4      # ours
    olmo train R --model.n_layers=4          # OLMo-core's scripts (`--a.b=c`)
    olmo train R --model.n_layers 4          # torchtitan's (`--a.b c`); a flag with no value means true
                                             # (a recipe file after it is the recipe, not its value)

A dotted option name is never one of our own options, so every `--a.b...` token is an override; so is a
top-level config key in its own spelling (`--run_dir=x`, `--global_batch_size 64`) when no option of ours has
that name. Unknown keys then fail where `--set` ones do, with the same "did you mean".
"""

from __future__ import annotations

import dataclasses
import re

_NAME = re.compile(r"^--([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:=(.*))?$", re.DOTALL)


def _top_level_keys() -> set[str]:
    from olmo.config import TrainConfig

    return {f.name for f in dataclasses.fields(TrainConfig)}


def _is_recipe(token: str) -> bool:
    """The recipe argument, which a bare flag before it (`--compile.enable r.yaml`) must not swallow."""
    return token.endswith((".yaml", ".yml", ".py")) or ".py:" in token


def rewrite(args: list[str], own_options: set[str]) -> list[str]:
    """`args` of `olmo train ...` with every override spelling turned into `--set key=value`. `own_options` are
    the command's option names (e.g. "--steps"), which keep their meaning."""
    out: list[str] = []
    top = _top_level_keys()
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":  # everything after is positional
            return out + args[i:]
        override = _override(tok, own_options, top)
        if override is None:
            out.append(tok)
            i += 1
            if tok in ("--set", "-s") and i < len(args):  # its value is never an option, whatever it looks like
                out.append(args[i])
                i += 1
            continue
        value, i = _override_value(override, args, i)
        out += ["--set", f"{override.group(1)}={value}"]
    return out


def _override(tok: str, own_options: set[str], top: set[str]) -> re.Match[str] | None:
    """`tok` read as an override (`--a.b=c`, `--a.b`, `--top_key`: group 1 the key, group 2 a value after `=`),
    None for anything else."""
    m = _NAME.match(tok)
    if not m or tok.split("=", 1)[0] in own_options:
        return None
    return m if "." in m.group(1) or m.group(1) in top else None


def _override_value(override: re.Match[str], args: list[str], i: int) -> tuple[str, int]:
    """The value of the override at args[i] (after its `=`, else the next token unless that is an option or the
    recipe, else "true": a bare flag, as torchtitan's booleans) and the index after what it used."""
    value = override.group(2)
    if value is not None:
        return value, i + 1
    if i + 1 < len(args) and not args[i + 1].startswith("--") and not _is_recipe(args[i + 1]):
        return args[i + 1], i + 2
    return "true", i + 1

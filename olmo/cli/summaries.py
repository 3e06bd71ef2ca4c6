"""The one JSON object each `olmo` command prints with `--json` (olmo/cli/jsonout.py writes it).

Every object has `ok` (the command's verdict; false goes with a non-zero exit code) and plain JSON values:
paths as strings, counts as integers, NaN as null.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from olmo.config import ModelConfig, TrainConfig
    from olmo.data.prepare import FileStats, LoadedTokenizer, PrepareResult
    from olmo.data.shards import ShardReport
    from olmo.smoke import SmokeResult
    from olmo.train import TrainResult


def dry_run(files: list[Path], stats: dict[str, FileStats], ok: bool) -> dict[str, Any]:
    per_file = []
    for f in files:
        st = stats.get(str(f))
        per_file.append({"path": str(f), "documents": st.docs if st else 0, "tokens": st.tokens if st else 0,
                         "empty": st.empty if st else 0, "bad_lines": st.bad if st else 0,
                         "oversized": st.oversized if st else 0, "undecodable_bytes": st.undecodable if st else 0,
                         "encoding": (st.encoding if st else "") or "utf-8"})
    return {"ok": ok, "dry_run": True, "files": per_file, "documents": sum(s.docs for s in stats.values()),
            "tokens": sum(s.tokens for s in stats.values())}


def prepared(output: Path, res: PrepareResult, tok: LoadedTokenizer) -> dict[str, Any]:
    from olmo.data.shards import dtype_for_vocab

    skipped = {p: {"bad_lines": st.bad, "empty": st.empty, "oversized": st.oversized,
                   "undecodable_bytes": st.undecodable}
               for p, st in res.stats.items() if st.bad or st.empty or st.oversized or st.undecodable}
    return {"ok": True, "output": str(output), "shards": len(res.shards),
            "tokens": sum(s.num_tokens for s in res.shards), "documents": sum(s.num_docs for s in res.shards),
            "dtype": dtype_for_vocab(tok.vocab_size), "vocab_size": tok.vocab_size, "eos_id": tok.eos_id,
            "already_done": res.already_done, "resumed_shards": res.resumed_from or 0, "seconds": res.seconds,
            "tokens_per_s": res.tokens_this_run / max(res.seconds, 1e-9), "skipped": skipped}


def validated(directory: Path, reports: list[ShardReport]) -> dict[str, Any]:
    files = [{"file": r.file, "tokens": r.num_tokens, "documents": r.num_docs if r.num_docs >= 0 else None,
              "max_id": r.max_id, "problems": [str(p) for p in r.problems]} for r in reports]
    return {"ok": not any(r.problems for r in reports), "directory": str(directory), "shards": len(reports),
            "tokens": sum(r.num_tokens for r in reports), "files": files}


def smoke(result: SmokeResult, keep: Path | None) -> dict[str, Any]:
    return {"ok": result.loss_fell, "smoke": True, "device": result.device, "steps": result.steps,
            "losses": result.losses, "eval_loss": result.eval_loss, "tokens_per_s": result.tokens_per_s,
            "seconds": result.seconds, "checkpoint": result.checkpoint, "kept": str(keep) if keep else None}


def planned(cfg: TrainConfig, described: dict[str, Any]) -> dict[str, Any]:
    from olmo.recipe import config_to_dict

    return {"ok": True, "dry_run": True, **described, "config": config_to_dict(cfg)}


def trained(cfg: TrainConfig, res: TrainResult) -> dict[str, Any]:
    return {"ok": True, "step": res.step, "loss": res.losses[-1] if res.losses else None,
            "eval_loss": res.eval_loss, "tokens_per_s": res.tokens_per_s, "seconds": res.seconds,
            "device": res.device, "run_dir": cfg.run_dir, "checkpoint": str(res.checkpoint) if res.checkpoint else None}


def exported(path: Path, out_dir: Path, architecture: str, dtype: str) -> dict[str, Any]:
    return {"ok": True, "architecture": architecture, "checkpoint": str(path), "output": str(out_dir),
            "dtype": dtype, "files": sorted(p.name for p in out_dir.iterdir())}


def imported(path: Path, model: ModelConfig) -> dict[str, Any]:
    tok = path / "tokenizer.json"
    return {"ok": True, "checkpoint": str(path), "parameters": model.num_params(), "layers": model.n_layers,
            "recipe": str(path / "recipe.yaml"), "tokenizer": str(tok) if tok.is_file() else None}

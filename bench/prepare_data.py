"""Benchmark: `olmo prepare-data` throughput against raw HF `tokenizers` batch encoding of the same corpus.

The anchor is the tokenizer alone, on texts already in memory, encoded in batches of --raw-batch-mb characters
(each batch's encodings dropped at once, as prepare-data drops them). prepare-data is timed end to end as the
command runs it (olmo.data.prepare.prepare with the CLI's default shard size, 256M tokens): reading the .jsonl
files from disk, parsing, encoding, appending EOS, writing shards with sha256 and CRC32s, fsync, sidecars and
manifest. Both get the same core budget, --workers (default: every usable core): the anchor as that many
tokenizer threads (RAYON_NUM_THREADS), prepare-data as that many worker processes. The two alternate, --repeats
times each (default 3); the ratio is of the two medians. Target: ratio >= 0.85 (exit 1 below --min-ratio).

Corpus: --gb G writes G x 10^9 characters of web-text-like documents (bench/prepare_corpus.py: log-normal
lengths up to 100,000 characters, prose re-sampled from the bundled corpus with a Zipf long tail of words) as
plain .jsonl files of 64 MB (--gzip: .jsonl.gz, gzip -1) into a temp dir that is removed afterwards, and
meanwhile trains a 100,278-entry byte-level BPE (dolma2's vocab size and pre-tokenizer) on 8 MB of the same
documents, so the shards are uint32 (asserted on every run). Without --gb: --docs documents of the bundled
grammar (olmo/data/corpus.py) with the bundled 766-token tokenizer, or --input. Generation, the tokenizer build
and loading the anchor's texts are timed and reported apart: neither side's time includes them.

Fixed cost of prepare-data (starting the workers, each loading the tokenizer, the last tasks' latency, the last
fsync, sidecar and manifest): prepare-data also runs on a slice of the corpus (its first 8 MB, at least 512 KiB
per worker so that every worker starts, or an eighth of a smaller corpus) before each full run; the fixed cost is
where the line through the (tokens, seconds) medians of slice and full runs meets zero tokens, and the rate
excluding it is tokens / (full median - fixed cost). The forkserver start (once per `olmo prepare-data` command,
but once per process here) is paid by an untimed warm-up run on the slice and reported apart.

It also prints where prepare-data's CPU goes, to predict how it scales to more cores than this machine has: the
main process (reading, hand-off, hashing, writing: the serial part) and the workers (parsing, tokenizing,
packing: the part that scales), per token. All processes share the C cores, so with C cores the rate is at most
min(C / (worker + main), workers / worker, 1 / main), against the anchor's C / raw.

Progress lines with the elapsed time go to stderr. --deadline S starts no repeat that would end after S seconds
(judged by the slowest repeat so far): fewer repeats, said so in the summary, rather than a run cut off.

    python3 bench/prepare_data.py --gb 1 --workers 16 --deadline 230   # the issue's measurement (~3.5 min there)
    python3 bench/prepare_data.py --gb 0.1 --gzip                       # a quick one, gzipped inputs
    python3 bench/prepare_data.py --docs 200000                         # the bundled grammar and tokenizer
    python3 bench/prepare_data.py --input docs.jsonl.gz --tokenizer tokenizer.json --workers 16
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's olmo, installed or not

SHARD_TOKENS = 256 << 20  # `olmo prepare-data`'s default --shard-size 256M
T0 = time.perf_counter()


def _say(msg: str) -> None:
    """A progress line on stderr, so a slow or stopped run still shows where its time went."""
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def _raw_encoder(tok_path: Path) -> Callable[[list[str]], int]:
    from tokenizers import Tokenizer

    raw_tok = Tokenizer.from_file(str(tok_path))
    encode = getattr(raw_tok, "encode_batch_fast", raw_tok.encode_batch)
    return lambda texts: sum(len(e) for e in encode(texts, add_special_tokens=False))


def _batches(texts: list[str], chars: int) -> list[list[str]]:
    out, cur, n = [], [], 0
    for t in texts:
        cur.append(t)
        n += len(t)
        if n >= chars:
            out.append(cur)
            cur, n = [], 0
    return [*out, cur] if cur else out


def _small_slice(inputs: list[Path], out: Path, nbytes: int) -> Path:
    """The first whole lines of the corpus, about `nbytes` of them, as one plain .jsonl."""
    import gzip

    with open(out, "wb") as w:
        for p in inputs:
            with (gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb")) as f:
                for line in f:
                    w.write(line)
                    if w.tell() >= nbytes:
                        return out
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", type=float, help="generate this many GB (1e9 characters) of web-like text; 1 is the "
                                            "issue's measurement")
    p.add_argument("--gzip", action="store_true", help="with --gb: write .jsonl.gz (default plain .jsonl)")
    p.add_argument("--input", type=Path, help="a .jsonl / .jsonl.gz corpus, or a folder of them")
    p.add_argument("--docs", type=int, default=20_000, help="bundled-grammar documents when neither --gb nor --input")
    p.add_argument("--tokenizer", type=Path, help="tokenizer.json or 'bundled' (default: with --gb a trained "
                                                  "100,278-entry BPE, else bundled)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side, interleaved; medians are compared")
    p.add_argument("--min-ratio", type=float, default=0.85, help="exit 1 below this ratio")
    p.add_argument("--workers", type=int, help="core budget for both sides (default: every usable core)")
    p.add_argument("--raw-batch-mb", type=float, default=32, help="characters per raw encode_batch call, in MB")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--deadline", type=float, default=0, help="seconds: start no repeat that would end after this "
                                                             "(fewer repeats rather than a run that overstays)")
    a = p.parse_args()
    if a.repeats < 1 or (a.gb is not None and not 0 < a.gb <= 64) or (a.workers is not None and a.workers < 1) \
            or a.deadline < 0:
        print("bench: --repeats and --workers must be >= 1, --gb in (0, 64], --deadline >= 0", file=sys.stderr)
        return 2

    from olmo.data import prepare_pipeline as pipe
    workers = a.workers or pipe.usable_cpus()
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    os.environ["RAYON_NUM_THREADS"] = str(workers)  # the anchor's threads; read when the tokenizer first encodes
    with tempfile.TemporaryDirectory(prefix="olmo-bench-") as tmp:
        return _run(a, workers, Path(tmp))


def _run(a: argparse.Namespace, workers: int, tmp: Path) -> int:
    from olmo.data import prepare_pipeline as pipe
    from olmo.data.corpus import write_jsonl
    from olmo.data.prepare import find_inputs, load_tokenizer, prepare
    from olmo.data.shards import dtype_for_vocab

    setup: dict[str, float] = {}
    kind = "plain .jsonl"
    if a.input is not None:
        inputs = find_inputs([a.input])
        kind = "given"
    elif a.gb is not None:
        import prepare_corpus as gen  # bench/, beside this file

        t0 = time.perf_counter()
        (tmp / "corpus").mkdir()
        build = a.tokenizer is None
        a.tokenizer = a.tokenizer or tmp / "tokenizer.json"

        def train() -> None:  # while the workers write the corpus: one core here, the rest there
            if build:
                gen.build_tokenizer(gen.sample(a.seed, 8_000_000), a.tokenizer)
                setup["tokenizer_build_s"] = time.perf_counter() - t0

        inputs, _, _ = gen.generate(tmp / "corpus", int(a.gb * 1e9), a.seed, workers, a.gzip, train)
        setup["generate_s"] = time.perf_counter() - t0
        _say(f"generated {len(inputs)} files in {setup['generate_s']:.1f}s")
        kind = ".jsonl.gz (gzip -1)" if a.gzip else kind
    else:
        inputs = [tmp / "corpus.jsonl"]
        write_jsonl(inputs[0], a.docs, seed=a.seed)
    tok = load_tokenizer(a.tokenizer or Path("bundled"))
    dtype = dtype_for_vocab(tok.vocab_size)
    encode = _raw_encoder(tok.path)

    t0 = time.perf_counter()
    texts = [t for task in pipe.read_tasks(inputs, (0, 0), 1 << 20) for t in pipe.parse(task)[0]]
    setup["load_texts_s"] = time.perf_counter() - t0
    batches = _batches(texts, int(a.raw_batch_mb * 1e6))
    chars = sum(len(t) for t in texts)
    size = sum(f.stat().st_size for f in inputs)
    small = _small_slice(inputs, tmp / "small.jsonl", min(max(8 << 20, workers << 19), size // 8))

    def run_prepare(src: list[Path]) -> tuple[float, float, Any]:
        out = tmp / "out"
        t0, c0 = time.perf_counter(), time.process_time()
        res = prepare(src, out, tok, shard_tokens=SHARD_TOKENS, workers=workers)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        shutil.rmtree(out)
        return dt, cpu, res

    encode(texts[:100])  # start the thread pool outside the timings
    t0 = time.perf_counter()
    run_prepare([small])  # untimed warm-up: starts the forkserver, as every `olmo prepare-data` command does once
    setup["forkserver_warmup_s"] = time.perf_counter() - t0
    raw_s: list[float] = []
    raw_cpu: list[float] = []
    full: list[tuple[float, float, Any]] = []
    small_s: list[float] = []
    tokens = 0
    _say(f"set-up done ({', '.join(f'{k} {v:.1f}' for k, v in setup.items())}); {len(texts):,} documents")
    for r in range(a.repeats):
        # --deadline: stop before a repeat that would end past it (the last one took as long as the slowest yet)
        if r and a.deadline and time.perf_counter() - T0 + max(x + f[0] + y for x, f, y in
                                                              zip(raw_s, full, small_s, strict=True)) > a.deadline:
            _say(f"--deadline {a.deadline:.0f}s: stopping after {r} repeat(s)")
            break
        t0, c0 = time.perf_counter(), time.process_time()
        n_tok = sum(encode(b) for b in batches)
        raw_s.append(time.perf_counter() - t0)
        raw_cpu.append(time.process_time() - c0)  # all tokenizer threads (idle spinning too)
        tokens = n_tok + len(texts)  # + one EOS per document, as prepare-data writes
        small_run = run_prepare([small])
        small_s.append(small_run[0])
        full.append(run_prepare(inputs))
        written = sum(s.num_tokens for s in full[-1][2].shards)
        assert written == tokens, (written, tokens)  # the same work: every token, every EOS
        assert all(s.dtype == dtype for s in full[-1][2].shards), dtype
        _say(f"repeat {r + 1}: raw {raw_s[-1]:.2f}s, prepare-data {full[-1][0]:.2f}s (slice {small_s[-1]:.2f}s), "
             f"{tokens:,} tokens")
    small_tokens = sum(s.num_tokens for s in small_run[2].shards)
    return _report(a, workers, setup, kind, size, chars, len(texts), tokens, tok, dtype, raw_s, raw_cpu, full,
                   small_s, small_tokens, pipe.BYTES_PER_WORKER)


def _report(a: argparse.Namespace, workers: int, setup: dict[str, float], kind: str, size: int, chars: int,
            docs: int, tokens: int, tok: Any, dtype: str, raw_s: list[float], raw_cpu: list[float],
            full: list[tuple[float, float, Any]], small_s: list[float], small_tokens: int, per_worker: int) -> int:
    med = statistics.median
    raw_t, ours_t, small_t = med(raw_s), med(f[0] for f in full), med(small_s)
    raw_tps, ours_tps = tokens / raw_t, tokens / ours_t
    ratio = ours_tps / raw_tps
    fixed = max(0.0, (small_t * tokens - ours_t * small_tokens) / (tokens - small_tokens))  # intercept at 0 tokens
    excl_tps = tokens / (ours_t - fixed)
    res = full[-1][2]
    ns = 1e9 / tokens
    m, w, r = med(f[1] for f in full) * ns, med(f[2].worker_cpu_s for f in full) * ns, med(raw_cpu) * ns
    result = {"text_gb": round(chars / 1e9, 3), "corpus_bytes": size, "corpus": kind, "documents": docs,
              "tokens": tokens, "vocab_size": tok.vocab_size, "dtype": dtype, "workers": workers,
              "cpus": os.cpu_count(), "prepare_processes": res.workers, "repeats": len(raw_s),
              "raw_tokens_per_s": round(raw_tps), "prepare_tokens_per_s": round(ours_tps), "ratio": round(ratio, 3),
              "raw_s": [round(x, 3) for x in raw_s], "prepare_s": [round(f[0], 3) for f in full],
              "small_s": [round(x, 3) for x in small_s], "small_tokens": small_tokens,
              "prepare_fixed_s": round(fixed, 3), "prepare_tokens_per_s_excl_fixed": round(excl_tps),
              "raw_cpu_ns_per_token": round(r), "main_cpu_ns_per_token": round(m),
              "worker_cpu_ns_per_token": round(w), **{k: round(v, 2) for k, v in setup.items()}}
    print(f"corpus: {docs:,} documents, {chars / 1e9:.3f} GB of text in {size / 1e9:.3f} GB of {kind}, "
          f"{tokens:,} tokens; tokenizer {tok.path.name} (vocab {tok.vocab_size:,}, shards {dtype}); budget "
          f"{workers} core(s) each side; set-up (not timed in either side): "
          + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.1f}s" for k, v in setup.items()))
    print(f"raw tokenizers encode_batch (texts in memory): {raw_tps:>12,.0f} tokens/s  (median of "
          f"{', '.join(f'{x:.2f}' for x in raw_s)} s)")
    print(f"olmo prepare-data (read, encode, write, fsync): {ours_tps:>12,.0f} tokens/s  (median of "
          f"{', '.join(f'{f[0]:.2f}' for f in full)} s; {res.workers} worker processes)")
    print(f"prepare-data fixed cost {fixed:.2f}s (intercept of time vs tokens through a {small_tokens:,}-token slice, "
          f"median {small_t:.2f}s, and the full runs); excluding it {excl_tps:,.0f} tokens/s "
          f"({excl_tps / raw_tps:.2f} of raw)")
    if res.workers:
        print(f"CPU per token: raw tokenizer {r:,.0f} ns; prepare-data main process {m:,.0f} ns (serial part, "
              f"{m / (m + w):.0%}) + workers {w:,.0f} ns (parallel part)")
        cap = max(2, size // per_worker)  # prepare-data starts no more workers than this on this input
        for c in sorted({workers, 16, 32, 64}):
            n = min(c, cap)
            bound = {c * 1e9 / (w + m): "cores", n * 1e9 / w: "workers", 1e9 / m: "main process"}
            ceiling = min(bound)
            print(f"  predicted with {c:>2} cores ({n} workers): {ceiling:>12,.0f} tokens/s, "
                  f"{ceiling * r / c / 1e9:.2f} of raw scaling linearly ({bound[ceiling]}-bound; fixed cost not "
                  "included)")
    else:
        print("prepare-data ran in-process (--workers 1 or a corpus under 1 MiB): no serial/parallel split")
    ok = ratio >= a.min_ratio
    print(f"SUMMARY prepare-data {chars / 1e9:.2f} GB of text ({kind}), {tokens:,} tokens, vocab {tok.vocab_size:,} "
          f"-> {dtype}, {workers} cores: raw tokenizers {raw_tps:,.0f} tokens/s, prepare-data {ours_tps:,.0f} "
          f"tokens/s ({excl_tps:,.0f} excluding its {fixed:.2f}s fixed cost); ratio of medians of {len(raw_s)}"
          f"{'' if len(raw_s) == a.repeats else ' (cut by --deadline)'}: "
          f"{ratio:.3f} (target >= {a.min_ratio:.2f}) {'PASS' if ok else 'FAIL'}")
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

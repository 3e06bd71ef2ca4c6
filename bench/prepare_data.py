"""Benchmark: `olmo prepare-data` throughput against raw HF `tokenizers` batch encoding of the same corpus.

The anchor is the tokenizer alone, on texts already in memory, in the faster of two batchings (one call for the
whole corpus, or the same ~4M-character batches prepare-data uses), so it is the best the tokenizer itself does
here. prepare-data is timed end to end: reading and parsing the .jsonl from disk, encoding, appending EOS,
writing shards with checksums, fsync. Both run in this process with the same tokenizer thread pool; each is
repeated and the best time kept. Target: ratio >= 0.80.

    python bench/prepare_data.py                          # a generated 20,000-document corpus, bundled tokenizer
    python bench/prepare_data.py --input docs.jsonl.gz --tokenizer tokenizer.json --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, help="a .jsonl / .jsonl.gz corpus (default: generate one)")
    p.add_argument("--docs", type=int, default=20_000, help="documents to generate when no --input")
    p.add_argument("--tokenizer", type=Path, default=Path("bundled"))
    p.add_argument("--repeats", type=int, default=5, help="best of N, interleaved (this box is shared and noisy)")
    p.add_argument("--min-ratio", type=float, default=0.80, help="exit 1 below this ratio")
    a = p.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    from olmo.corpus import write_jsonl
    from olmo.prepare import BATCH_CHARS, _batches, find_inputs, load_tokenizer, prepare

    with tempfile.TemporaryDirectory(prefix="olmo-bench-") as tmp:
        corpus = a.input
        if corpus is None:
            corpus = Path(tmp) / "corpus.jsonl"
            write_jsonl(corpus, a.docs, seed=42)
        inputs = find_inputs([corpus])
        tok = load_tokenizer(a.tokenizer)
        from tokenizers import Tokenizer

        raw_tok = Tokenizer.from_file(str(tok.path))
        encode = getattr(raw_tok, "encode_batch_fast", raw_tok.encode_batch)
        texts = [t for batch, _ in _batches(inputs, (0, 0), {}, None) for t in batch]
        chunks, cur, n = [], [], 0
        for t in texts:
            cur.append(t)
            n += len(t)
            if n >= BATCH_CHARS:
                chunks.append(cur)
                cur, n = [], 0
        if cur:
            chunks.append(cur)
        encode(texts[:100], add_special_tokens=False)  # start the thread pool outside the timings

        raw_best, ours_best, tokens = float("inf"), float("inf"), 0
        for r in range(a.repeats):
            for mode in ("whole", "batched"):
                t0 = time.perf_counter()
                if mode == "whole":
                    n_tok = sum(len(e) for e in encode(texts, add_special_tokens=False))
                else:  # each batch's encodings are dropped at once, as prepare-data drops them
                    n_tok = sum(sum(len(e) for e in encode(c, add_special_tokens=False)) for c in chunks)
                raw_best = min(raw_best, time.perf_counter() - t0)
                tokens = n_tok + len(texts)  # + one EOS per document, as prepare-data writes
            out = Path(tmp) / f"out{r}"
            t0 = time.perf_counter()
            res = prepare(inputs, out, tok, shard_tokens=1 << 28)
            ours_best = min(ours_best, time.perf_counter() - t0)
            written = sum(s.num_tokens for s in res.shards)
            assert written == tokens, (written, tokens)  # the same work: every token, every EOS
        size = sum(f.stat().st_size for f in inputs)

    raw_tps, ours_tps = tokens / raw_best, tokens / ours_best
    ratio = ours_tps / raw_tps
    result = {"corpus_bytes": size, "documents": len(texts), "tokens": tokens, "threads": os.cpu_count(),
              "raw_tokens_per_s": round(raw_tps), "prepare_tokens_per_s": round(ours_tps), "ratio": round(ratio, 3)}
    print(f"corpus: {len(texts):,} documents, {size / 1e6:.1f} MB, {tokens:,} tokens; tokenizer {tok.path.name} "
          f"(vocab {tok.vocab_size:,})")
    print(f"raw tokenizers encode_batch (texts in memory): {raw_tps:>12,.0f} tokens/s")
    print(f"olmo prepare-data (read, encode, write, fsync): {ours_tps:>12,.0f} tokens/s")
    print(f"ratio: {ratio:.2f} (target >= {a.min_ratio:.2f})  {'PASS' if ratio >= a.min_ratio else 'FAIL'}")
    print(json.dumps(result))
    return 0 if ratio >= a.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())

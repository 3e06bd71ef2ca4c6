"""A large, seeded, web-text-like .jsonl corpus and a dolma2-sized BPE tokenizer, both built offline, for
bench/prepare_data.py.

Text: words are drawn from a Zipf distribution over a lexicon whose head is every word of the bundled corpus
(olmo/assets/corpus.jsonl.gz) and whose long tail is pseudo-words recombined from that corpus's syllables, so
common words are single tokens and rare ones split into several, as in prose; numbers are mixed in, sentences
are capitalised and punctuated, paragraphs break, and about one sentence in eight is a real sentence of the
bundled corpus (quotes, dialogue, lists). The result tokenizes like prose and gzip shrinks it about as much as
web text (~3x), unlike a repeated sample. Document lengths are log-normal (median 2,000 characters, mean ~4,000,
a long tail cut at 100,000), like web text: many short documents, a few very long ones.

Generation runs in one process per file (each file has its own seed, so the bytes do not depend on the worker
count), each writing its own file: ~1 GB takes a few seconds on 16 cores. The tokenizer is trained meanwhile in
the calling process, on the first 8 MB of documents of file 0 (generated again there, the same documents).

The tokenizer: a byte-level BPE with dolma2's pre-tokenizer (the cl100k split pattern) trained with the
`tokenizers` library on a sample of the generated text to 100,278 entries, dolma2's vocab size, so prepare-data
writes uint32 shards and the tokenizer does dolma2-sized vocab lookups.
"""

from __future__ import annotations

import gzip
import json
import math
import multiprocessing as mp
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

BUNDLED = Path(__file__).resolve().parents[1] / "olmo" / "assets" / "corpus.jsonl.gz"
DOLMA2_VOCAB = 100_278
EOS_TOKEN = "<|endoftext|>"
CL100K_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Word frequencies: the 1,000 most common words make ~78% of the running words and the 10,000 most common ~89%,
# as in English prose
ZIPF = 1.15
PSEUDO_WORDS = 400_000  # the lexicon's tail: enough distinct words that a 100K BPE has rare-word merges to learn
FILE_BYTES = 64 << 20  # text per generated file: many files, as real corpora come
DOC_MEDIAN, DOC_SIGMA, DOC_MIN, DOC_MAX = 2_000, 1.2, 40, 100_000  # characters, log-normal


def _bundled() -> tuple[list[str], list[str]]:
    """(sentences, words by falling frequency) of the bundled corpus."""
    with gzip.open(BUNDLED, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    sentences = [s for t in texts for s in re.split(r"(?<=[.?!:])\s+", t) if s]
    counts: dict[str, int] = {}
    for t in texts:
        for w in re.findall(r"[A-Za-z]+", t):
            counts[w.lower()] = counts.get(w.lower(), 0) + 1
    return sentences, sorted(counts, key=lambda w: (-counts[w], w))


def lexicon(seed: int) -> tuple[list[str], np.ndarray, list[str]]:
    """(words, cumulative Zipf probabilities, real sentences): the same for the same seed."""
    sentences, words = _bundled()
    syllables = sorted({s for w in words for s in re.findall(r"[^aeiouy]*[aeiouy]+(?:[^aeiouy]+$)?", w)})
    rng = np.random.default_rng([seed, 0])
    seen, tail = set(words), list[str]()
    while len(tail) < PSEUDO_WORDS:
        n = rng.integers(1, 5, size=PSEUDO_WORDS)
        picks = rng.integers(0, len(syllables), size=(PSEUDO_WORDS, 4))
        for k, row in zip(n, picks, strict=True):
            w = "".join(syllables[i] for i in row[:k])
            if w not in seen:
                seen.add(w)
                tail.append(w)
    numbers = [str(i) for i in rng.integers(0, 100_000, size=2_000)]
    lex = words + [w for pair in zip(tail[:2_000], numbers, strict=True) for w in pair] + tail[2_000:PSEUDO_WORDS]
    p = 1.0 / np.arange(1, len(lex) + 1) ** ZIPF
    return lex, np.cumsum(p / p.sum()), sentences


def _document(rng: np.random.Generator, lex: np.ndarray, cdf: np.ndarray, sentences: list[str], size: int) -> str:
    """One document of about `size` characters."""
    words = lex[np.searchsorted(cdf, rng.random(size // 6 + 8))].tolist()
    lengths = rng.geometric(1 / 14, size=len(words) // 2 + 2)
    real = rng.random(len(lengths)) < 0.125
    out: list[str] = []
    n = i = 0
    for j, k in enumerate(lengths):
        if real[j]:
            s = sentences[int(rng.integers(len(sentences)))]
        else:
            s = " ".join(words[i:i + k])
            i += k
            s = s[:1].upper() + s[1:] + ("." if k % 9 else "?" if k % 2 else "!")
        n += len(s) + 1
        out.append(s)
        out.append("\n\n" if j % 6 == 5 else " ")
        if n >= size or i >= len(words):
            break
    return "".join(out[:-1])


_LEXICONS: dict[int, tuple[np.ndarray, np.ndarray, list[str]]] = {}


def documents(seed: int, file_index: int) -> Iterator[str]:
    """The documents of generated file `file_index`, endlessly: the same for the same (seed, file_index)."""
    if seed not in _LEXICONS:  # once per process, not per file
        words, cdf, sentences = lexicon(seed)
        _LEXICONS[seed] = (np.array(words, dtype=object), cdf, sentences)
    lex, cdf, sentences = _LEXICONS[seed]
    rng = np.random.default_rng([seed, 1, file_index])
    while True:
        size = int(min(DOC_MAX, max(DOC_MIN, rng.lognormal(math.log(DOC_MEDIAN), DOC_SIGMA))))
        yield _document(rng, lex, cdf, sentences, size)


def _write_file(args: tuple[Path, int, int, int, bool]) -> tuple[int, int]:
    """Write corpus file `index`, about `text_bytes` characters of text; (documents, text characters)."""
    path, index, text_bytes, seed, gz = args
    docs = chars = 0
    with open(path, "wb") as raw, (gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) if gz
                                   else raw) as f:
        buf: list[str] = []
        for text in documents(seed, index):
            buf.append(json.dumps({"text": text, "id": f"{index}-{docs}"}))
            docs += 1
            chars += len(text)
            if len(buf) >= 256 or chars >= text_bytes:
                f.write(("\n".join(buf) + "\n").encode())
                buf = []
            if chars >= text_bytes:
                break
    return docs, chars


def sample(seed: int, nbytes: int) -> list[str]:
    """The first documents of file 0, about `nbytes` characters: what the tokenizer is trained on."""
    out: list[str] = []
    got = 0
    for text in documents(seed, 0):
        if got >= nbytes:
            break
        out.append(text)
        got += len(text)
    return out


def generate(directory: Path, text_bytes: int, seed: int, workers: int, gz: bool,
             meanwhile: Callable[[], None] = lambda: None) -> tuple[list[Path], int, int]:
    """Write ~`text_bytes` characters of documents (at least that many) into .jsonl[.gz] files in `directory`,
    calling `meanwhile()` in this process while the workers write; (files, documents, text characters)."""
    n = max(1, math.ceil(text_bytes / FILE_BYTES))
    paths = [directory / f"corpus-{i:05d}.jsonl{'.gz' if gz else ''}" for i in range(n)]
    jobs = [(p, i, math.ceil(text_bytes / n), seed, gz) for i, p in enumerate(paths)]
    # spawn, not fork: this process may already run threads, and the forkserver is left for prepare-data's own
    # workers (it preloads the tokenizer only when it first starts)
    with mp.get_context("spawn").Pool(min(workers, n)) as pool:
        pending = pool.map_async(_write_file, jobs, chunksize=1)
        meanwhile()
        counts = pending.get()
    return paths, sum(d for d, _ in counts), sum(c for _, c in counts)


def build_tokenizer(texts: list[str], path: Path, vocab_size: int = DOLMA2_VOCAB) -> int:
    """Train a byte-level BPE with dolma2's pre-tokenizer on `texts`, save it to `path`; its vocab size."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CL100K_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(path))
    return int(tok.get_vocab_size(with_added_tokens=True))

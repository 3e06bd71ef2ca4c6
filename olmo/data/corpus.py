"""The project's own tiny corpus: short synthetic English documents from a small seeded grammar.

It exists so the trainer runs offline end to end (`olmo train --smoke`, the tests, the benchmarks) without any
downloaded data. The text is regular enough that a tiny model's loss falls within a few dozen steps, and varied
enough (stories, arithmetic, letters, lists) that a BPE tokenizer trained on it learns real merges.

    python -m olmo.data.corpus --write-assets    # regenerate olmo/assets/{corpus.jsonl.gz,tokenizer.json}
    python -m olmo.data.corpus --docs 50000 --out big.jsonl   # a larger corpus for benchmarks

Generation is pure Python with a seeded `random.Random`, so the same arguments give the same bytes everywhere.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).resolve().parent.parent / "assets"  # olmo/assets: data, beside the packages
CORPUS_PATH = ASSETS / "corpus.jsonl.gz"
TOKENIZER_PATH = ASSETS / "tokenizer.json"
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
ASSET_DOCS = 1500
ASSET_SEED = 1234
TOKENIZER_VOCAB = 1024

NAMES = ["Ada", "Bruno", "Chen", "Dara", "Emil", "Fatima", "Gus", "Hana", "Ivo", "Jun", "Kofi", "Lena",
         "Mira", "Nils", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tova"]
ANIMALS = ["cat", "dog", "fox", "owl", "horse", "rabbit", "goat", "crow", "otter", "bear", "mouse", "heron"]
ADJS = ["small", "old", "quiet", "clever", "brave", "sleepy", "curious", "gentle", "hungry", "proud", "tired",
        "happy", "grey", "golden", "patient", "restless"]
PLACES = ["forest", "river", "market", "garden", "harbor", "library", "valley", "kitchen", "village", "hill",
          "station", "meadow", "workshop", "bridge"]
VERBS = [("walked", "to"), ("ran", "to"), ("looked", "at"), ("waited", "near"), ("slept", "in"),
         ("sang", "in"), ("played", "by"), ("worked", "in"), ("rested", "under"), ("hid", "behind")]
THINGS = ["apple", "lamp", "book", "basket", "key", "letter", "coat", "boat", "map", "bell", "cup", "stone",
          "clock", "rope", "kettle", "candle"]
COLORS = ["red", "blue", "green", "yellow", "white", "black", "brown", "purple"]
TIMES = ["In the morning", "At noon", "In the evening", "At night", "Before dawn", "After lunch", "Later"]
FEELINGS = ["glad", "surprised", "worried", "calm", "sad", "excited", "confused", "grateful"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen"]


def _story(rng: random.Random) -> str:
    who, animal, place = rng.choice(NAMES), rng.choice(ANIMALS), rng.choice(PLACES)
    out = [f"Once there was a {rng.choice(ADJS)} {animal} who lived near the {place}."]
    for _ in range(rng.randint(3, 8)):
        verb, prep = rng.choice(VERBS)
        kind = rng.randrange(5)
        if kind == 0:
            out.append(f"{rng.choice(TIMES)}, the {animal} {verb} {prep} the {rng.choice(PLACES)}.")
        elif kind == 1:
            out.append(f"{who} gave the {animal} a {rng.choice(COLORS)} {rng.choice(THINGS)}.")
        elif kind == 2:
            out.append(f"The {animal} felt {rng.choice(FEELINGS)} and {verb} {prep} the {rng.choice(PLACES)}.")
        elif kind == 3:
            out.append(f'"Where is my {rng.choice(THINGS)}?" asked {who}.')
        else:
            n = rng.randrange(2, 10)
            out.append(f"There were {NUMBERS[n]} {rng.choice(ADJS)} {rng.choice(THINGS)}s in the {place}.")
    out.append(f"In the end, the {animal} and {who} were {rng.choice(FEELINGS)}.")
    return " ".join(out)


def _arithmetic(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(4, 10)):
        a, b = rng.randrange(10), rng.randrange(9)
        if rng.random() < 0.5:
            lines.append(f"{NUMBERS[a].capitalize()} plus {NUMBERS[b]} is {NUMBERS[a + b]}.")
        else:
            hi, lo = max(a, b), min(a, b)
            lines.append(f"{NUMBERS[hi].capitalize()} minus {NUMBERS[lo]} is {NUMBERS[hi - lo]}.")
    return "\n".join(lines)


def _letter(rng: random.Random) -> str:
    to, frm = rng.sample(NAMES, 2)
    body = [f"Dear {to},", f"I am writing from the {rng.choice(PLACES)}. The weather is {rng.choice(ADJS)} today."]
    for _ in range(rng.randint(1, 4)):
        body.append(f"I found a {rng.choice(COLORS)} {rng.choice(THINGS)} and I thought of you.")
    body += [f"Please say hello to the {rng.choice(ANIMALS)}.", "Yours,", frm]
    return "\n".join(body)


def _inventory(rng: random.Random) -> str:
    items = rng.sample(THINGS, rng.randint(3, 7))
    lines = [f"Things in the {rng.choice(PLACES)}:"]
    lines += [f"- {NUMBERS[rng.randrange(1, 10)]} {rng.choice(COLORS)} {item}s" for item in items]
    return "\n".join(lines)


GENRES = (_story, _story, _story, _arithmetic, _letter, _inventory)


def documents(n_docs: int, seed: int = ASSET_SEED) -> Iterator[str]:
    """`n_docs` synthetic documents, the same for the same (n_docs, seed)."""
    r = random.Random(seed)
    for _ in range(n_docs):
        yield r.choice(GENRES)(r)


def write_jsonl(path: Path, n_docs: int, seed: int = ASSET_SEED) -> None:
    """One `{"text": ...}` per line; gzip when the name ends in .gz (mtime 0, so the bytes are reproducible)."""
    lines = "".join(json.dumps({"text": doc}) + "\n" for doc in documents(n_docs, seed)).encode()
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(lines)
    else:
        path.write_bytes(lines)


def train_tokenizer(texts: list[str], vocab_size: int = TOKENIZER_VOCAB) -> Any:
    """A byte-level BPE like GPT-2's and dolma2's, with `<|endoftext|>` as id 0 (EOS) and `<|pad|>` as id 1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def write_assets() -> None:
    ASSETS.mkdir(exist_ok=True)
    write_jsonl(CORPUS_PATH, ASSET_DOCS)
    train_tokenizer(list(documents(ASSET_DOCS))).save(str(TOKENIZER_PATH))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write-assets", action="store_true", help="regenerate the corpus and tokenizer in assets/")
    p.add_argument("--docs", type=int, default=ASSET_DOCS)
    p.add_argument("--seed", type=int, default=ASSET_SEED)
    p.add_argument("--out", type=Path, help="write a .jsonl or .jsonl.gz corpus here")
    a = p.parse_args()
    if a.write_assets:
        write_assets()
        print(f"wrote {CORPUS_PATH} and {TOKENIZER_PATH}")
    if a.out:
        write_jsonl(a.out, a.docs, a.seed)
        print(f"wrote {a.docs} documents to {a.out}")


if __name__ == "__main__":
    main()

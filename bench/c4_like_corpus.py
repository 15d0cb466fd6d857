"""A generated corpus shaped like C4's own files: ``c4-train.NNNNN-of-MMMMM.json.gz``, one
``{"text", "timestamp", "url"}`` object per line, documents of C4's length spread.

The text is English-like prose: a second-order word Markov chain, trained on the interpreter's own
English (the documentation topics of ``pydoc_data`` and the standard library's docstrings), writes a
pool of 60,000 distinct sentences; each document draws its sentences from the pool (the chain itself
writes under 1 MB/s, the draw over 20 MB/s). A BPE so sees varied words, punctuation and numbers
rather than one repeated string, and about one document in six carries typographic quotes and
dashes (non-ASCII, as web text does). Seeded: the same arguments give the same bytes (gzip's header
time is zero).

    python -m bench.c4_like_corpus --mb 400 --out /tmp/c4like            # ~400 MB of JSON lines, gzipped
    python -m bench.c4_like_corpus --mb 40 --out /tmp/c4like --format jsonl   # plain, for dataset "local"
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import re
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from boost.training.data.stdlib_corpus import read_stdlib_file, stdlib_files

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]|\d+(?:\.\d+)?|[.,;:!?()]")
_SENTENCE_END = {".", "!", "?"}
_TYPOGRAPHIC = {"'": "\u2019", " - ": " \u2014 ", '"': "\u201c"}
_HOSTS = ("www.example.com", "blog.example.org", "news.example.net", "shop.example.co.uk", "forum.example.io")


_DOCSTRING = re.compile(r'"""(.*?)"""', re.S)
_SOURCE_CHARS = 2_000_000
_POOL_SENTENCES = 60_000


def _source_text() -> str:
    """English prose the interpreter carries: its documentation topics and its modules' docstrings."""
    from pydoc_data.topics import topics

    parts, chars = list(topics.values()), 0
    for relative in stdlib_files("train"):
        for doc in _DOCSTRING.findall(read_stdlib_file(relative)):
            if len(doc) > 80 and doc.count(" ") > len(doc) / 12:  # prose, not a code sample
                parts.append(doc)
                chars += len(doc)
        if chars > _SOURCE_CHARS:
            break
    return "\n".join(parts)


def _chain(text: str) -> tuple[dict[tuple[str, str], list[str]], list[tuple[str, str]]]:
    """Successors of each word pair, and the pairs that start a sentence."""
    words = _WORD.findall(text)
    successors: dict[tuple[str, str], list[str]] = defaultdict(list)
    starts = []
    for a, b, c in zip(words, words[1:], words[2:]):
        successors[(a, b)].append(c)
        if a in _SENTENCE_END and b[:1].isupper():
            starts.append((b, c))
    return dict(successors), starts


def _join(words: list[str]) -> str:
    text = " ".join(words)
    return re.sub(r" ([.,;:!?)])", r"\1", text).replace("( ", "(")


def sentence_pool(seed: int) -> list[str]:
    """Distinct sentences written by the chain, in a seeded order."""
    successors, starts = _chain(_source_text())
    rng = random.Random(seed)
    pool: dict[str, None] = {}
    while len(pool) < _POOL_SENTENCES:
        a, b = rng.choice(starts)
        words = [a, b]
        while len(words) < 60:
            options = successors.get((a, b))
            if not options:
                break
            c = rng.choice(options)
            words.append(c)
            if c in _SENTENCE_END and len(words) > 5:
                break
            a, b = b, c
        if words[-1] not in _SENTENCE_END:
            words.append(".")
        pool[_join(words)] = None
    return list(pool)


class _Writer:
    """Documents drawn from the pool: lengths log-normal around C4's (median ~1,200 characters)."""

    def __init__(self, pool: list[str], seed: int):
        self.pool = pool
        self.rng = random.Random(seed)

    def document(self) -> str:
        rng = self.rng
        target = int(min(40_000, max(60, rng.lognormvariate(7.1, 1.0))))
        paragraphs, length = [], 0
        while length < target:
            paragraph = " ".join(rng.choices(self.pool, k=rng.randint(1, 6)))
            paragraphs.append(paragraph)
            length += len(paragraph) + 1
        text = "\n".join(paragraphs)
        if rng.random() < 1 / 6:
            for plain, fancy in _TYPOGRAPHIC.items():
                text = text.replace(plain, fancy)
        return text

    def record(self) -> dict:
        rng = self.rng
        day = f"2019-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        url = f"https://{rng.choice(_HOSTS)}/{rng.getrandbits(40):x}/{rng.randint(1, 9999)}"
        return {"text": self.document(), "timestamp": f"{day}T{clock}Z", "url": url}


def shard_path(out: Path, index: int, shards: int, fmt: str) -> Path:
    return out / f"c4-train.{index:05d}-of-{shards:05d}.{'json.gz' if fmt == 'json.gz' else 'jsonl'}"


def write_shard(
    out: Path, index: int, shards: int, shard_bytes: int, pool: list[str], seed: int, fmt: str
) -> tuple[int, int]:
    """Write shard ``index`` of about ``shard_bytes`` bytes of JSON lines; its (documents, bytes)."""
    writer = _Writer(pool, seed * 1_000_003 + index)
    path = shard_path(out, index, shards, fmt)
    opener = (lambda p: gzip.GzipFile(p, "wb", compresslevel=6, mtime=0)) if fmt == "json.gz" else None
    documents = written = 0
    with opener(path) if opener else path.open("wb") as f:
        while written < shard_bytes:
            line = (json.dumps(writer.record()) + "\n").encode()
            f.write(line)
            written += len(line)
            documents += 1
    return documents, written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, required=True, help="size of the JSON lines, uncompressed, in MB")
    parser.add_argument("--out", type=Path, required=True, help="folder to write the shards into")
    parser.add_argument("--shards", type=int, default=0, help="number of files (default: one per 50 MB)")
    parser.add_argument("--format", choices=("json.gz", "jsonl"), default="json.gz")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="processes (default: all cores)")
    args = parser.parse_args(argv)
    total = int(args.mb * 1e6)
    shards = args.shards or max(1, math.ceil(args.mb / 50))
    args.out.mkdir(parents=True, exist_ok=True)
    pool = sentence_pool(args.seed)
    with ProcessPoolExecutor(args.workers or None) as executor:
        jobs = [
            executor.submit(write_shard, args.out, i, shards, total // shards, pool, args.seed, args.format)
            for i in range(shards)
        ]
        results = [job.result() for job in jobs]
    documents, written = map(sum, zip(*results))
    files = f"{shards} file{'s' * (shards != 1)}"
    print(f"{files}, {documents} documents, {written / 1e6:.1f} MB of JSON lines in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

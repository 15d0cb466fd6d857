"""Prepared token folders for tests: made directly, with the format's own writer, or by the user's command
(``prepare_as_a_user``: ``python -m boost.training.data.prepare``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from boost.training.data.token_folder import (
    InputFile,
    Manifest,
    Split,
    shard_name,
    token_dtype,
    write_manifest,
    write_shard,
)
from boost.training.data.tokenizer_fingerprint import tokenizer_fingerprint


def framed(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Each text as the trainer frames a document, ``[BOS] ids [EOS]`` (a torchtitan tokenizer)."""
    return [tokenizer.encode(text, add_bos=True, add_eos=True) for text in texts]


def write_token_folder(
    folder: Path,
    tokenizer_folder: Path,
    vocab_size: int,
    train: Sequence[Sequence[int]],
    validation: Sequence[Sequence[int]] = (),
    documents_per_shard: int = 0,
    finished: bool = True,
) -> Manifest:
    """A token folder of framed documents (``train``, ``validation``), ``documents_per_shard`` to a shard
    (0: one shard per split); ``finished = False`` leaves out the manifest, as an interrupted prepare does."""
    folder.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(vocab_size)
    splits = {}
    for split, documents in (("train", train), ("validation", validation)):
        per_shard = documents_per_shard or max(1, len(documents))
        groups = [documents[i : i + per_shard] for i in range(0, len(documents), per_shard)]
        shards = tuple(
            write_shard(folder, shard_name(split, i), group, dtype) for i, group in enumerate(groups)
        )
        splits[split] = Split(shards, max((max(d) for d in documents if d), default=-1))
    manifest = Manifest(
        tokenizer=tokenizer_fingerprint(tokenizer_folder),
        tokenizer_path=str(tokenizer_folder),
        vocab_size=vocab_size,
        bos_id=train[0][0] if train and train[0] else None,
        eos_id=train[0][-1] if train and train[0] else None,
        dtype=dtype,
        splits=splits,
        inputs=(
            InputFile(path=str(folder / "made-in-a-test"), bytes=0, documents=len(train) + len(validation)),
        ),
    )
    if finished:
        write_manifest(folder, manifest)
    return manifest


def prepare_as_a_user(corpus: Path, folder: Path, boost_cache: Path, *options: str) -> None:
    """``python -m boost.training.data.prepare`` of ``corpus`` into ``folder`` with debug.toml's tokenizer
    (the one ``tests/trainer.py``'s runs train with, in ``boost_cache``); ``options``: prepare's own."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, BOOST_CACHE=str(boost_cache))
    prepare = [
        sys.executable, "-m", "boost.training.data.prepare", "--config", "train_configs/debug.toml",
        "--input", str(corpus), "--output", str(folder), *options,
    ]  # fmt: skip
    done = subprocess.run(prepare, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

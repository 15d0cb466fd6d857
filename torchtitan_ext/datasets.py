"""Offline default data and tokenizer, plus local-file datasets, for torchtitan's text dataloader.

- ``stdlib`` / ``stdlib_validation``: the Python standard library sources of the running interpreter
  (present on every machine), split by a stable hash of each file's relative path (~2% validation).
- ``local``: ``training.dataset_path`` (or ``validation.dataset_path``): a ``.txt``/``.jsonl``
  (field ``text``)/``.parquet`` (column ``text``) file or a folder of them.
- anything else: torchtitan's own registry (``c4`` etc., which needs a network).

The tokenizer is ``model.hf_assets_path`` when that folder holds a ``tokenizer.json``; otherwise a
byte-level BPE trained on the stdlib corpus once and cached (atomically: concurrent ranks race safely).
Packing, sharding by data-parallel rank and checkpointable state are torchtitan's
(``HuggingFaceTextDataset``): these datasets are map-style, so a resume skips to the saved sample.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import tempfile
import zlib
from pathlib import Path

from torchtitan.components.tokenizer import HuggingFaceTokenizer
from torchtitan.hf_datasets import DatasetConfig
from torchtitan.hf_datasets.text_datasets import DATASETS, build_text_dataloader
from torchtitan.tools.logging import logger

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
_SKIP_DIRS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__", "turtledemo"}
_TOKENIZER_TRAIN_BYTES = 4_000_000


def stdlib_files() -> list[Path]:
    """The interpreter's standard-library ``.py`` files, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if not _SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _is_validation(path: Path) -> bool:
    root = Path(sysconfig.get_paths()["stdlib"])
    return zlib.crc32(path.relative_to(root).as_posix().encode()) % 50 == 0


def stdlib_split(split: str) -> list[Path]:
    files = stdlib_files()
    return [p for p in files if _is_validation(p) == (split == "validation")]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _load_stdlib(split: str):
    from datasets import Dataset

    files = stdlib_split(split)
    return Dataset.from_dict({"text": [_read(p) for p in files]})


def local_text_files(path: str | None, field: str = "training.dataset_path") -> list[Path]:
    if not path:
        raise ValueError(f'dataset "local" needs {field}: set it to a .txt/.jsonl/.parquet file or a folder of them')
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{field} = {path!r} does not exist; point it at a .txt/.jsonl/.parquet file or folder")
    files = sorted(q for q in p.rglob("*") if q.suffix in (".txt", ".jsonl", ".parquet")) if p.is_dir() else [p]
    if not files:
        raise ValueError(f"{field} = {path!r} holds no .txt, .jsonl or .parquet file")
    return files


def _load_local(path: str):
    from datasets import Dataset

    texts: list[str] = []
    for f in local_text_files(path):
        if f.suffix == ".txt":
            texts.append(_read(f))
        elif f.suffix == ".jsonl":
            texts.extend(json.loads(line)["text"] for line in f.read_text(encoding="utf-8").splitlines() if line.strip())
        else:
            import pyarrow.parquet as pq

            texts.extend(pq.read_table(f, columns=["text"]).column("text").to_pylist())
    return Dataset.from_dict({"text": texts})


def register_datasets() -> None:
    """Add BOOST's datasets to torchtitan's registry (idempotent)."""
    text = lambda sample: sample["text"]  # noqa: E731
    DATASETS.setdefault("stdlib", DatasetConfig(path="stdlib", loader=lambda _: _load_stdlib("train"), sample_processor=text))
    DATASETS.setdefault(
        "stdlib_validation", DatasetConfig(path="stdlib", loader=lambda _: _load_stdlib("validation"), sample_processor=text)
    )
    DATASETS.setdefault("local", DatasetConfig(path="", loader=_load_local, sample_processor=text))


def _cache_root(job_config) -> Path:
    configured = job_config.boost.cache_dir or os.environ.get("BOOST_CACHE") or "~/.cache/boost"
    return Path(configured).expanduser()


def stdlib_tokenizer_dir(job_config) -> Path:
    vocab = job_config.boost.tokenizer_vocab_size
    files = [p.relative_to(sysconfig.get_paths()["stdlib"]).as_posix() for p in stdlib_split("train")]
    digest = hashlib.sha1("\n".join([sys.version, *files]).encode()).hexdigest()[:10]
    return _cache_root(job_config) / f"tokenizer-stdlib-v{vocab}-{digest}"


def train_stdlib_tokenizer(target: Path, vocab_size: int) -> Path:
    """Train a byte-level BPE on the first few MB of the stdlib corpus and save it to ``target``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if (target / "tokenizer.json").exists():
        return target
    texts, size = [], 0
    for p in stdlib_split("train"):
        texts.append(_read(p))
        size += len(texts[-1])
        if size >= _TOKENIZER_TRAIN_BYTES:
            break
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[BOS, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer=trainer)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-tokenizer-"))
    tok.save(str(tmp / "tokenizer.json"))
    (tmp / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": False})
    )
    try:
        os.replace(tmp, target)  # atomic: another rank either finds nothing or a complete folder
    except OSError:
        # another rank won the race; its folder is complete
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    logger.info(f"Trained a {vocab_size}-token BPE tokenizer on the stdlib corpus: {target}")
    return target


def tokenizer_path(job_config) -> Path:
    assets = job_config.model.hf_assets_path
    if assets and (Path(assets) / "tokenizer.json").exists():
        return Path(assets)
    if assets and Path(assets).exists() and not Path(assets).is_dir():
        raise ValueError(f"model.hf_assets_path = {assets!r} must be a folder holding tokenizer.json")
    return train_stdlib_tokenizer(stdlib_tokenizer_dir(job_config), job_config.boost.tokenizer_vocab_size)


def build_boost_tokenizer(job_config) -> HuggingFaceTokenizer:
    return HuggingFaceTokenizer(str(tokenizer_path(job_config)))


def boost_vocab_size(job_config) -> int:
    return build_boost_tokenizer(job_config).get_vocab_size()


def build_boost_dataloader(dp_world_size: int, dp_rank: int, tokenizer, job_config, infinite: bool = True):
    register_datasets()
    if job_config.training.dataset == "local":
        local_text_files(job_config.training.dataset_path)  # a clear error before any work
    return build_text_dataloader(dp_world_size, dp_rank, tokenizer, job_config, infinite)


register_datasets()

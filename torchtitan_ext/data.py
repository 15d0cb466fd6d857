"""Offline default data and tokenizer, plus local-file datasets, for torchtitan's text dataloader.

Datasets (registered in torchtitan's ``DATASETS`` at import, so torchtitan's own
``build_text_dataloader`` / ``build_text_validation_dataloader`` find them; BOOST's validator is
torchtitan's ``Validator`` reading a ``HeldOutTextDataset``, which starts afresh at every validation):

- ``stdlib`` / ``stdlib_validation``: the ``.py`` sources of the running interpreter's standard
  library, present on every machine and identical wherever the Python version is. A file goes to
  validation when the SHA-1 of its relative path is 0 mod 50 (~2% of files), so the split never
  depends on the file system's listing order.
- ``local``: ``training.dataset_path`` (``validation.dataset_path`` for validation), a ``.txt``
  (one document per file), ``.jsonl`` (field ``text``) or ``.parquet`` (column ``text``) file, or a
  folder of them, read strictly by ``torchtitan_ext.local_corpus``. Held in memory, so for corpora
  beyond RAM use a streamed Hugging Face dataset.
- any other name: torchtitan's own registry (``c4`` etc., which needs a network).

Packing, sharding by data-parallel rank and checkpointable state are torchtitan's
``HuggingFaceTextDataset``: these datasets are map-style ``datasets.Dataset``s, so its state is
(sample index, token buffer) and a resumed run skips straight to the saved sample.

The tokenizer is ``model.hf_assets_path`` when that folder holds a ``tokenizer.json``; otherwise a
byte-level BPE trained (about a second) on the first ~4 MB of the ``stdlib`` training split and
cached under ``<cache>/tokenizer-stdlib-v<vocab>-<hash>/``, where the hash covers the Python
version, the corpus file list and the training recipe.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from datasets import Dataset
from tokenizers import decoders, models, pre_tokenizers, Tokenizer, trainers
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.validate import BaseValidator, build_validator
from torchtitan.components.tokenizer import BaseTokenizer, HuggingFaceTokenizer
from torchtitan.config import JobConfig
from torchtitan.hf_datasets import DatasetConfig
from torchtitan.hf_datasets.text_datasets import build_text_dataloader, DATASETS, HuggingFaceTextDataset
from torchtitan.tools.logging import logger

from torchtitan_ext.config_error import ConfigError, refuse
from torchtitan_ext.local_corpus import contiguous_shards, local_text_files, read_local_corpus

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"

_EXCLUDED_STDLIB_DIRS = frozenset({"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"})
_VALIDATION_MODULUS = 50  # 1 file in 50 → ~2% validation
_TOKENIZER_TRAIN_CHARS = 4_000_000  # enough for a 2k-8k vocabulary, trains in about a second
# Part of the cache key: bump it whenever the BPE recipe below changes, so stale caches are ignored.
_BPE_RECIPE = "bytelevel-bpe/no-prefix-space/v1"
# torchtitan's default points into its own source tree; outside it, it is not a user's choice.
_TORCHTITAN_DEFAULT_ASSETS = "./tests/assets/tokenizer"


# ----------------------------------------------------------------------------- stdlib corpus


def stdlib_root() -> Path:
    """The running interpreter's standard-library folder (the base one, also inside a venv)."""
    return Path(sysconfig.get_paths()["stdlib"])


def _path_hash(relative_path: str) -> int:
    # SHA-1 rather than hash(): Python salts str hashes per process.
    return int.from_bytes(hashlib.sha1(relative_path.encode()).digest()[:8], "big")


def is_validation_file(relative_path: str) -> bool:
    """Whether a stdlib file (posix path relative to :func:`stdlib_root`) is in the validation split."""
    return _path_hash(relative_path) % _VALIDATION_MODULUS == 0


@functools.cache
def _stdlib_relative_paths() -> tuple[str, ...]:
    # Cached: walking the stdlib takes a third of a second, and the tokenizer's cache key needs it too.
    root = stdlib_root()
    paths = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if _EXCLUDED_STDLIB_DIRS.isdisjoint(relative.parts[:-1]):
            paths.append(relative.as_posix())
    return tuple(sorted(paths, key=lambda p: (_path_hash(p), p)))


def stdlib_files(split: str) -> list[str]:
    """Relative posix paths of the stdlib ``.py`` files in ``split`` ("train" or "validation").

    The order is fixed but pseudo-random (sorted by path hash), not alphabetical: torchtitan gives
    each data-parallel rank a contiguous shard, and the tokenizer trains on a prefix, and both
    should see every package rather than the alphabetically first ones.
    """
    if split not in ("train", "validation"):
        raise ValueError(f"stdlib split must be 'train' or 'validation', got {split!r}")
    want_validation = split == "validation"
    return [p for p in _stdlib_relative_paths() if is_validation_file(p) == want_validation]


def _read_source(path: Path) -> str:
    # A handful of stdlib files carry latin-1 bytes; replacing them keeps the corpus decodable.
    return path.read_text(encoding="utf-8", errors="replace")


def load_stdlib_dataset(split: str) -> Dataset:
    """The stdlib split as a map-style dataset with one ``text`` row per source file."""
    root = stdlib_root()
    return Dataset.from_dict({"text": [_read_source(root / p) for p in stdlib_files(split)]})


# ----------------------------------------------------------------------------- local files


def load_local_dataset(dataset_path: str | None) -> Dataset:
    """A ``local`` dataset: one ``text`` row per ``.txt`` file, ``.jsonl`` line or ``.parquet`` row."""
    # The loader cannot tell training from validation; validate.check_config checks first with the
    # exact field, so this message only shows when torchtitan's Validator builds it directly.
    texts = read_local_corpus(dataset_path, "training.dataset_path (validation.dataset_path for validation)")
    logger.info(f"Local dataset: {len(texts)} documents under {dataset_path}")
    return Dataset.from_dict({"text": texts})


def check_dataset(name: str, dataset_path: str | None, section: str, dp_degree: int,
                  batch_tokens: int | None = None) -> None:
    """Refuse an unknown dataset, or a ``local`` corpus that is malformed or too small for the ranks.

    torchtitan gives each data-parallel rank a contiguous share of the documents; a rank with none
    would loop over nothing forever (torchtitan's infinite loader re-loops without yielding). A
    finite loader (validation: pass ``batch_tokens`` = local_batch_size × (seq_len + 1)) whose
    share cannot fill one batch yields nothing, and torchtitan's Validator then fails on an empty
    loss list at the first validation, possibly hours in.
    """
    register_datasets()
    if name.lower() not in DATASETS:
        refuse(f"{section}.dataset", name, f"unknown dataset; choose one of {sorted(DATASETS)}")
    config_field = f"{section}.dataset_path"
    if name.lower() in ("stdlib", "stdlib_validation") and dataset_path:
        refuse(config_field, dataset_path, f'the stdlib datasets read the interpreter\'s sources and would ignore it: '
                                           f'set {section}.dataset = "local" to read it, or remove the path')
    if name.lower() != "local":
        return
    texts = read_local_corpus(dataset_path, config_field)
    if len(texts) < dp_degree:
        refuse(config_field, dataset_path, f"holds {len(texts)} document(s), fewer than the data-parallel degree "
                                          f"{dp_degree}: each data-parallel rank needs one; add documents or "
                                          "lower the degree")
    if batch_tokens is not None:
        # Byte-level BPE: a token covers at least one UTF-8 byte, so bytes + BOS + EOS bound the tokens.
        most = min(sum(len(t.encode()) + 2 for t in shard) for shard in contiguous_shards(texts, dp_degree))
        if most < batch_tokens:
            refuse(config_field, dataset_path, f"a data-parallel rank's share holds at most {most} tokens, fewer than "
                                              f"one {section} batch (local_batch_size × (seq_len + 1) = {batch_tokens}): "
                                              f"add text, or lower {section}.local_batch_size or {section}.seq_len")


# ----------------------------------------------------------------------------- registration


def _sample_text(sample: dict) -> str:
    return sample["text"]


def register_datasets() -> None:
    """Put ``stdlib``, ``stdlib_validation`` and ``local`` into torchtitan's ``DATASETS`` (idempotent)."""
    # DatasetConfig.path is what torchtitan passes to the loader when dataset_path is unset.
    DATASETS["stdlib"] = DatasetConfig(
        path="stdlib", loader=lambda _path: load_stdlib_dataset("train"), sample_processor=_sample_text
    )
    DATASETS["stdlib_validation"] = DatasetConfig(
        path="stdlib", loader=lambda _path: load_stdlib_dataset("validation"), sample_processor=_sample_text
    )
    DATASETS["local"] = DatasetConfig(path="", loader=load_local_dataset, sample_processor=_sample_text)


def build_boost_dataloader(
    dp_world_size: int,
    dp_rank: int,
    tokenizer: BaseTokenizer,
    job_config: JobConfig,
    infinite: bool = True,
) -> ParallelAwareDataloader:
    """torchtitan's ``build_text_dataloader`` with BOOST's datasets registered (a ``build_dataloader_fn``)."""
    register_datasets()
    if job_config.training.dataset.lower() == "local":
        local_text_files(job_config.training.dataset_path, "training.dataset_path")
    source = job_config.training.dataset_path or job_config.training.dataset
    with _refusing_empty_shards(source, dp_rank):
        loader = build_text_dataloader(dp_world_size, dp_rank, tokenizer, job_config, infinite)
        _refuse_empty_shard(loader.dataset)
    return loader


class _EmptyShard(Exception):
    pass


def _refuse_empty_shard(dataset: HuggingFaceTextDataset) -> None:
    if isinstance(dataset._data, Dataset) and len(dataset._data) == 0:
        raise _EmptyShard


@contextmanager
def _refusing_empty_shards(source: str, dp_rank: int) -> Iterator[None]:
    """Refuse a data-parallel rank that gets no document of a map-style corpus.

    torchtitan's infinite loader would re-loop an empty shard forever without yielding a sample,
    and ``datasets`` raises a bare IndexError for some sizes while sharding (check_dataset refuses
    such corpora before start; this guards every other way in).
    """
    try:
        yield
    except (_EmptyShard, IndexError):
        raise ConfigError(f"{source}: data-parallel rank {dp_rank} got no document; add documents or lower the "
                          "data-parallel degree") from None


class HeldOutTextDataset(HuggingFaceTextDataset):
    """torchtitan's packed text dataset, started afresh on every pass.

    torchtitan's dataset keeps its position between iterations, so each validation would score the
    next ``validation.steps`` batches and the validation curve would mix model progress with
    changing data. Every pass here reads the same held-out windows from the start.
    """

    def __iter__(self):
        self._sample_idx, self._token_buffer = 0, []
        return super().__iter__()


def build_boost_validation_dataloader(
    dp_world_size: int,
    dp_rank: int,
    tokenizer: BaseTokenizer,
    job_config: JobConfig,
    infinite: bool = False,
) -> ParallelAwareDataloader:
    """torchtitan's ``build_text_validation_dataloader`` over a ``HeldOutTextDataset``."""
    register_datasets()
    cfg = job_config.validation
    if cfg.dataset.lower() == "local":
        local_text_files(cfg.dataset_path, "validation.dataset_path")
    with _refusing_empty_shards(cfg.dataset_path or cfg.dataset, dp_rank):
        dataset = HeldOutTextDataset(
            dataset_name=cfg.dataset, dataset_path=cfg.dataset_path, tokenizer=tokenizer, seq_len=cfg.seq_len,
            dp_rank=dp_rank, dp_world_size=dp_world_size, infinite=infinite,
        )  # fmt: skip
        _refuse_empty_shard(dataset)
    return ParallelAwareDataloader(
        dataset, dp_rank=dp_rank, dp_world_size=dp_world_size,
        **{**asdict(cfg.dataloader), "batch_size": cfg.local_batch_size},
    )  # fmt: skip


def build_boost_validator(*, job_config: JobConfig, dp_world_size: int, dp_rank: int, tokenizer: BaseTokenizer,
                          **kwargs) -> BaseValidator:
    """torchtitan's ``Validator`` scoring the same held-out batches at every validation (the
    loader torchtitan's builder made is replaced; the validation split is read twice at start-up)."""
    validator = build_validator(job_config=job_config, dp_world_size=dp_world_size, dp_rank=dp_rank,
                                tokenizer=tokenizer, **kwargs)
    validator.validation_dataloader = build_boost_validation_dataloader(dp_world_size, dp_rank, tokenizer, job_config)
    return validator


# ----------------------------------------------------------------------------- tokenizer


def boost_cache_dir(job_config: JobConfig) -> Path:
    """``boost.cache_dir``, else ``$BOOST_CACHE``, else ``~/.cache/boost``."""
    configured = job_config.boost.cache_dir or os.environ.get("BOOST_CACHE") or "~/.cache/boost"
    return Path(configured).expanduser()


def stdlib_tokenizer_dir(job_config: JobConfig) -> Path:
    """Cache folder of the offline BPE for this vocabulary, Python version and corpus."""
    vocab_size = job_config.boost.tokenizer_vocab_size
    # python_version(), not sys.version: the latter names the build date and compiler, which
    # differ between machines that hold the same standard library.
    key = "\n".join([_BPE_RECIPE, str(_TOKENIZER_TRAIN_CHARS), platform.python_version(), *stdlib_files("train")])
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return boost_cache_dir(job_config) / f"tokenizer-stdlib-v{vocab_size}-{digest}"


def _train_stdlib_bpe(vocab_size: int) -> Tokenizer:
    """A byte-level BPE (GPT-2 style, lossless on any text) trained on the start of the stdlib train split."""
    root, texts, n_chars = stdlib_root(), [], 0
    for relative in stdlib_files("train"):
        if n_chars >= _TOKENIZER_TRAIN_CHARS:
            break
        texts.append(_read_source(root / relative))
        n_chars += len(texts[-1])
    tokenizer = Tokenizer(models.BPE())
    # No prefix space: decode(encode(s)) must give s back exactly, leading indentation included.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        # All 256 byte symbols up front, so no byte (hence no text) is ever out of vocabulary.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    logger.info(f"Trained a {tokenizer.get_vocab_size()}-token byte-level BPE on {n_chars / 1e6:.1f}M stdlib chars")
    return tokenizer


@contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    # Ranks of one node queue here, so one trains and the rest load its result.
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _publish_dir(staging: Path, target: Path) -> None:
    """Rename a complete ``staging`` folder to ``target``; if another process got there first, keep theirs."""
    try:
        os.replace(staging, target)  # atomic: readers see no folder or a complete one
    except OSError:
        # Only reachable where flock does not serialise writers (e.g. some network file systems):
        # the training is deterministic, so the winner's files equal ours.
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "tokenizer.json").exists():
            raise


def ensure_stdlib_tokenizer(job_config: JobConfig) -> Path:
    """The offline tokenizer's folder, training and caching it on first use (safe under concurrent ranks)."""
    target = stdlib_tokenizer_dir(job_config)
    if (target / "tokenizer.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f"{target.name}.lock"):
        if (target / "tokenizer.json").exists():  # another rank trained it while we waited
            return target
        tokenizer = _train_stdlib_bpe(job_config.boost.tokenizer_vocab_size)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
        staging.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        tokenizer.save(str(staging / "tokenizer.json"))
        # torchtitan's HuggingFaceTokenizer finds BOS/EOS ids through these two keys.
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "add_bos_token": True,
            "add_eos_token": False,
        }
        (staging / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
        _publish_dir(staging, target)
    logger.info(f"Cached the offline tokenizer in {target}")
    return target


def boost_tokenizer_dir(job_config: JobConfig) -> Path:
    """``model.hf_assets_path`` when it holds a ``tokenizer.json``, else the cached offline BPE's folder."""
    assets = job_config.model.hf_assets_path
    if assets and (Path(assets).expanduser() / "tokenizer.json").is_file():
        return Path(assets).expanduser()
    if assets and assets != _TORCHTITAN_DEFAULT_ASSETS:
        logger.warning(f"model.hf_assets_path = {assets!r} holds no tokenizer.json; using the offline stdlib BPE")
    return ensure_stdlib_tokenizer(job_config)


def check_tokenizer_assets(hf_assets_path: str, tp_degree: int) -> None:
    """Refuse a ``model.hf_assets_path`` without a ``tokenizer.json`` that parses (and whose size TP divides).

    Before any process starts: a garbage tokenizer file otherwise fails on every rank with a JSON
    error that names no file.
    """
    if not hf_assets_path or hf_assets_path == _TORCHTITAN_DEFAULT_ASSETS:
        return
    folder = Path(hf_assets_path).expanduser()
    fallback = 'or set model.hf_assets_path = "" to train the offline BPE'
    tokenizer_json = folder / "tokenizer.json"
    if not tokenizer_json.is_file():
        refuse("model.hf_assets_path", hf_assets_path, f"holds no tokenizer.json; point it at a tokenizer folder {fallback}")
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_json))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for any parse error
        raise ConfigError(f"model.hf_assets_path: {tokenizer_json} does not parse as a tokenizers file "
                          f"({str(e).splitlines()[0] if str(e) else type(e).__name__}); replace it with one saved by "
                          f"tokenizers' Tokenizer.save, {fallback}") from None
    config_json = folder / "tokenizer_config.json"
    if config_json.is_file():
        try:
            json.loads(config_json.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"model.hf_assets_path: {config_json} is not valid JSON ({e}); fix or remove it") from None
    vocab_size = tokenizer.get_vocab_size()
    if vocab_size % tp_degree:
        refuse("model.hf_assets_path", hf_assets_path, f"its tokenizer has {vocab_size} tokens, which the TP degree "
                                                      f"{tp_degree} does not divide (the embedding and head shard on it)")


def build_boost_tokenizer(job_config: JobConfig) -> HuggingFaceTokenizer:
    """The tokenizer of a BOOST run (a train spec's ``build_tokenizer_fn``)."""
    return HuggingFaceTokenizer(str(boost_tokenizer_dir(job_config)))


def boost_vocab_size(job_config: JobConfig) -> int:
    """Vocabulary size of :func:`build_boost_tokenizer`'s tokenizer (sizes the model's embedding)."""
    return build_boost_tokenizer(job_config).get_vocab_size()


register_datasets()

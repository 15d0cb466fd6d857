"""BOOST's datasets in torchtitan's text dataloader and validator.

Datasets (registered in torchtitan's ``DATASETS`` at import, so torchtitan's own
``build_text_dataloader`` / ``build_text_validation_dataloader`` find them; BOOST's validator is
torchtitan's ``Validator`` reading a ``HeldOutTextDataset``, which starts afresh at every validation):

- ``tokens``: prepared token folders, memory-mapped and read in a global order
  (``torchtitan_ext.data.token_loader``; not in torchtitan's registry, which holds text datasets).

- ``stdlib`` / ``stdlib_validation``: the interpreter's standard library, split by path hash
  (``boost.data.stdlib_corpus``).
- ``local``: ``training.dataset_path`` (``validation.dataset_path`` for validation), a ``.txt``
  (one document per file), ``.jsonl`` (field ``text``) or ``.parquet`` (column ``text``) file, or a
  folder of them, read strictly by ``boost.data.local_files``. Held in memory by every rank, so
  the preflight warns past ``LOCAL_CORPUS_WARN_BYTES`` of files and says to prepare the corpus.
- any other name: torchtitan's own registry (``c4`` etc., which needs a network).

Packing, sharding by data-parallel rank and checkpointable state are torchtitan's
``HuggingFaceTextDataset``: these datasets are map-style ``datasets.Dataset``s, so its state is
(sample index, token buffer) and a resumed run skips straight to the saved sample.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from datasets import Dataset
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.tokenizer import BaseTokenizer
from torchtitan.components.validate import BaseValidator, build_validator
from torchtitan.config import JobConfig
from torchtitan.hf_datasets import DatasetConfig
from torchtitan.hf_datasets.text_datasets import DATASETS, HuggingFaceTextDataset, build_text_dataloader
from torchtitan.tools.logging import logger

from boost.config_error import ConfigError, refuse
from boost.data.local_files import local_text_files, read_local_corpus
from boost.data.stdlib_corpus import stdlib_texts
from boost.data.token_folder import PREPARE_COMMAND
from torchtitan_ext.data.token_loader import build_token_dataloader, build_token_validation_dataloader
from torchtitan_ext.data.token_sources import TOKENS, is_tokens
from torchtitan_ext.torchtitan_private import validators_built_with

# A local corpus is held in memory by every rank, several bytes per byte of text (1.07 GB of RSS at
# 40 MB of .jsonl, 3.36 GB at 400 MB): past this many bytes of files the preflight says to prepare it.
LOCAL_CORPUS_WARN_BYTES = 1 << 30


def load_stdlib_dataset(split: str) -> Dataset:
    """The stdlib split as a map-style dataset with one ``text`` row per source file."""
    return Dataset.from_dict({"text": stdlib_texts(split)})


def load_local_dataset(dataset_path: str | None) -> Dataset:
    """A ``local`` dataset: one ``text`` row per ``.txt`` file, ``.jsonl`` line or ``.parquet`` row."""
    # The loader cannot tell training from validation; preflight.check_input_files checks first with
    # the exact field, so this message only shows when torchtitan's Validator builds it directly.
    texts = read_local_corpus(dataset_path, "training.dataset_path (validation.dataset_path for validation)")
    logger.info(f"Local dataset: {len(texts)} documents under {dataset_path}")
    return Dataset.from_dict({"text": texts})


def _contiguous_shards(items: list, n: int) -> list[list]:
    """``items`` in ``n`` contiguous shards, as ``datasets.distributed.split_dataset_by_node`` splits a map-style
    dataset over data-parallel ranks (the first ``len(items) % n`` shards one longer)."""
    size, extra = divmod(len(items), n)
    bounds = [r * size + min(r, extra) for r in range(n + 1)]
    return [items[bounds[r] : bounds[r + 1]] for r in range(n)]


def check_dataset(
    name: str, dataset_path: str | None, section: str, dp_degree: int, batch_tokens: int | None = None
) -> None:
    """Refuse an unknown dataset, or a ``local`` corpus that is malformed or too small for the ranks (the
    text datasets; ``tokens`` is ``torchtitan_ext.data.token_checks.check_token_data``'s).

    A ``local`` corpus beyond ``LOCAL_CORPUS_WARN_BYTES`` of files is warned about from the files'
    sizes first; it is then read whole, as the loader will read it, to refuse a malformed file.

    torchtitan gives each data-parallel rank a contiguous share of the documents; a rank with none
    would loop over nothing forever (torchtitan's infinite loader re-loops without yielding). A
    finite loader (validation: pass ``batch_tokens`` = local_batch_size × (seq_len + 1)) whose
    share cannot fill one batch yields nothing, and torchtitan's Validator then fails on an empty
    loss list at the first validation, possibly hours in.
    """
    register_datasets()
    if name.lower() not in DATASETS:
        refuse(f"{section}.dataset", name, f"unknown dataset; choose one of {sorted([*DATASETS, TOKENS])}")
    config_field = f"{section}.dataset_path"
    if name.lower() in ("stdlib", "stdlib_validation") and dataset_path:
        refuse(
            config_field,
            dataset_path,
            f"the stdlib datasets read the interpreter's sources and would ignore it: "
            f'set {section}.dataset = "local" to read it, or remove the path',
        )
    if name.lower() != "local":
        return
    warn_if_large(local_text_files(dataset_path, config_field), dataset_path, section)
    texts = read_local_corpus(dataset_path, config_field)
    if len(texts) < dp_degree:
        refuse(
            config_field,
            dataset_path,
            f"holds {len(texts)} document(s), fewer than the data-parallel degree "
            f"{dp_degree}: each data-parallel rank needs one; add documents or "
            "lower the degree",
        )
    if batch_tokens is not None:
        # Byte-level BPE: a token covers at least one UTF-8 byte, so bytes + BOS + EOS bound the tokens.
        most = min(sum(len(t.encode()) + 2 for t in shard) for shard in _contiguous_shards(texts, dp_degree))
        if most < batch_tokens:
            refuse(
                config_field,
                dataset_path,
                f"a data-parallel rank's share holds at most {most} tokens, fewer than "
                f"one {section} batch (local_batch_size × (seq_len + 1) = {batch_tokens}): "
                f"add text, or lower {section}.local_batch_size or {section}.seq_len",
            )


def warn_if_large(files: list[Path], dataset_path: str | None, section: str) -> None:
    """Warn, from the files' sizes alone, when a ``local`` corpus is too large to hold in every rank."""
    size = sum(f.stat().st_size for f in files)
    if size > LOCAL_CORPUS_WARN_BYTES:
        warnings.warn(
            f"{section}.dataset_path = {dataset_path!r}: a local corpus of {size / 1e9:.1f} GB of files, which "
            "every rank holds in memory (several times its size); prepare it once into token shards and "
            f"train from them: {PREPARE_COMMAND}, then --{section}.dataset tokens --{section}.dataset_path DIR",
            stacklevel=2,
        )


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
    """torchtitan's ``build_text_dataloader`` with BOOST's datasets registered (a ``build_dataloader_fn``),
    or the ``tokens`` dataset's loader."""
    if is_tokens(job_config.training.dataset):
        return build_token_dataloader(dp_world_size, dp_rank, tokenizer, job_config, infinite)
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
        raise ConfigError(
            f"{source}: data-parallel rank {dp_rank} got no document; add documents or lower the "
            "data-parallel degree"
        ) from None


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
    """torchtitan's ``build_text_validation_dataloader`` over a ``HeldOutTextDataset``, or the ``tokens``
    dataset's validation loader."""
    cfg = job_config.validation
    if is_tokens(cfg.dataset):
        return build_token_validation_dataloader(dp_world_size, dp_rank, tokenizer, job_config)
    register_datasets()
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


def build_boost_validator(
    *, job_config: JobConfig, dp_world_size: int, dp_rank: int, tokenizer: BaseTokenizer, **kwargs
) -> BaseValidator:
    """torchtitan's ``Validator`` scoring the same held-out batches at every validation: it builds its
    loader with ``build_boost_validation_dataloader`` (finite, whatever ``validation.steps``)."""

    def build_loader(*, job_config, dp_world_size, dp_rank, tokenizer, infinite):
        return build_boost_validation_dataloader(dp_world_size, dp_rank, tokenizer, job_config)

    with validators_built_with(build_loader):
        return build_validator(
            job_config=job_config, dp_world_size=dp_world_size, dp_rank=dp_rank, tokenizer=tokenizer, **kwargs
        )


register_datasets()

"""BOOST's datasets in torchtitan's text dataloader and validator.

Datasets (registered in torchtitan's ``DATASETS`` at import, so torchtitan's own
``build_text_dataloader`` / ``build_text_validation_dataloader`` find them; BOOST's validator is
torchtitan's ``Validator`` reading a ``HeldOutTextDataset``, which starts afresh at every validation):

- ``tokens``: prepared token folders, memory-mapped and read in a global order
  (``torchtitan_ext.data.token_loader``; not in torchtitan's registry, which holds text datasets).

- ``stdlib`` / ``stdlib_validation``: the interpreter's standard library, split by path hash
  (``boost.training.data.stdlib_corpus``).
- ``local``: ``training.dataset_path`` (``validation.dataset_path`` for validation), a ``.txt``
  (one document per file), ``.jsonl`` (field ``text``) or ``.parquet`` (column ``text``) file, or a
  folder of them, read strictly by ``boost.training.data.local_files``. Held in memory by every rank, so
  the preflight warns past
  ``dataset_check.LOCAL_CORPUS_WARN_BYTES`` of files and says to prepare the corpus.
- any other name: torchtitan's own registry (``c4`` etc., which needs a network).

Packing, sharding by data-parallel rank and checkpointable state are torchtitan's
``HuggingFaceTextDataset``: these datasets are map-style ``datasets.Dataset``s, so its state is
(sample index, token buffer) and a resumed run skips straight to the saved sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from itertools import islice
from typing import Any

import torch
from datasets import Dataset
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.tokenizer import BaseTokenizer
from torchtitan.components.validate import BaseValidator
from torchtitan.config import JobConfig
from torchtitan.hf_datasets import DatasetConfig
from torchtitan.hf_datasets.text_datasets import DATASETS, HuggingFaceTextDataset, build_text_dataloader
from torchtitan.tools.logging import logger

from boost.training.config_error import ConfigError
from boost.training.data.local_files import local_text_files, read_local_corpus
from boost.training.data.stdlib_corpus import stdlib_texts
from torchtitan_ext.data.token_loader import build_token_dataloader, build_token_validation_dataloader
from torchtitan_ext.data.token_sources import is_tokens
from torchtitan_ext.torchtitan_private import validators_built_with
from torchtitan_ext.validator import BoostValidator


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


def _sample_text(sample: dict) -> str:
    return sample["text"]


def register_datasets() -> None:
    """Put ``BOOST_DATASETS`` into torchtitan's ``DATASETS`` (idempotent)."""
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
    """torchtitan's packed text dataset, started afresh on every pass, read in whole batches.

    torchtitan's dataset keeps its position between iterations, so each validation would score the
    next ``validation.steps`` batches and the validation curve would mix model progress with
    changing data. Every pass here reads the same held-out windows from the start.

    Its loader drops a pass's last partial batch (``drop_last``), as the ``tokens`` loader does, under
    every layout: a pipeline schedule splits each batch into the fixed micro-batches of
    ``validation.local_batch_size``, which a shorter one cannot fill. A pass that ends with windows left
    over says how many it left out (``batch_size``: the loader's, ``validation.local_batch_size``).
    """

    def __init__(self, *args: Any, batch_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        self._sample_idx, self._token_buffer = 0, []
        windows = 0
        for window in super().__iter__():
            windows += 1
            yield window
        left_out = windows % self.batch_size
        if left_out:
            logger.info(
                f"Validation left out the last {left_out} of this rank's {windows} held-out windows, fewer "
                f"than a batch (validation.local_batch_size = {self.batch_size}): batches are read whole"
            )


def build_boost_validation_dataloader(
    dp_world_size: int,
    dp_rank: int,
    tokenizer: BaseTokenizer,
    job_config: JobConfig,
    infinite: bool = False,
) -> ParallelAwareDataloader:
    """torchtitan's ``build_text_validation_dataloader`` over a ``HeldOutTextDataset``, or the ``tokens``
    dataset's validation loader. ``infinite`` (torchtitan's: ``validation.steps`` set): a rank's share is
    re-read from its start until the validator has its steps, so every rank runs them all (a share of a
    text corpus is whole documents: the ranks' shares differ in length)."""
    cfg = job_config.validation
    if is_tokens(cfg.dataset):
        return build_token_validation_dataloader(dp_world_size, dp_rank, tokenizer, job_config)
    register_datasets()
    if cfg.dataset.lower() == "local":
        local_text_files(cfg.dataset_path, "validation.dataset_path")
    source = cfg.dataset_path or cfg.dataset
    with _refusing_empty_shards(source, dp_rank):
        dataset = HeldOutTextDataset(
            dataset_name=cfg.dataset, dataset_path=cfg.dataset_path, tokenizer=tokenizer, seq_len=cfg.seq_len,
            dp_rank=dp_rank, dp_world_size=dp_world_size, infinite=infinite, batch_size=cfg.local_batch_size,
        )  # fmt: skip
        _refuse_empty_shard(dataset)
    if not infinite and sum(1 for _ in islice(iter(dataset), cfg.local_batch_size)) < cfg.local_batch_size:
        # the whole set (validation.steps = -1), read once: without one whole batch the pass scores nothing
        raise ConfigError(
            f"{source}: data-parallel rank {dp_rank}'s share holds fewer than validation.local_batch_size = "
            f"{cfg.local_batch_size} windows of validation.seq_len + 1 tokens; lower either, or add documents"
        )
    return ParallelAwareDataloader(
        dataset, dp_rank=dp_rank, dp_world_size=dp_world_size,
        **{**asdict(cfg.dataloader), "batch_size": cfg.local_batch_size, "drop_last": True},
    )  # fmt: skip


def build_boost_validator(
    *, job_config: JobConfig, dp_world_size: int, dp_rank: int, tokenizer: BaseTokenizer, **kwargs
) -> BaseValidator:
    """torchtitan's ``build_validator`` with ``BoostValidator``, scoring the same held-out batches at every
    validation: it builds its loader with ``build_boost_validation_dataloader``."""

    def build_loader(*, job_config, dp_world_size, dp_rank, tokenizer, infinite):
        return build_boost_validation_dataloader(dp_world_size, dp_rank, tokenizer, job_config, infinite)

    assert kwargs.get("metrics_processor") is not None  # as torchtitan's build_validator asserts
    with validators_built_with(build_loader):
        return BoostValidator(
            job_config=job_config, dp_world_size=dp_world_size, dp_rank=dp_rank, tokenizer=tokenizer, **kwargs
        )


register_datasets()

"""The datasets a job names, checked before any process starts: a known name, and a ``local`` corpus that
every data-parallel rank can read from (``tokens`` folders: ``token_checks``, from their manifests).

No torch and no torchtitan here: the launcher runs it before either loads. The known names are
torchtitan's own registry (from the schema snapshot, ``torchtitan_ext.preflight.schema``) and
BOOST's (``BOOST_DATASETS``, which ``text_datasets.register_datasets`` puts into torchtitan's registry;
tests/unit/test_start_up.py holds the two lists to the registry as the trainer sees it).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from boost.training.config_error import refuse
from boost.training.data.local_files import local_text_files, read_local_corpus
from boost.training.data.token_folder import PREPARE_COMMAND
from torchtitan_ext.data.token_sources import TOKENS
from torchtitan_ext.preflight.schema import torchtitan_datasets

# registered by torchtitan_ext.data.text_datasets.register_datasets
BOOST_DATASETS = ("stdlib", "stdlib_validation", "local")
STDLIB_DATASETS = ("stdlib", "stdlib_validation")
# A local corpus is held in memory by every rank, several bytes per byte of text (1.07 GB of RSS at
# 40 MB of .jsonl, 3.36 GB at 400 MB): past this many bytes of files the preflight says to prepare it.
LOCAL_CORPUS_WARN_BYTES = 1 << 30


def known_datasets() -> list[str]:
    """Every dataset name a job may give: torchtitan's registry, BOOST's, and ``tokens`` (prepared folders,
    read by BOOST's own loader, not a text dataset of the registry)."""
    return sorted({*torchtitan_datasets(), *BOOST_DATASETS, TOKENS})


def contiguous_shards(items: list, n: int) -> list[list]:
    """``items`` in ``n`` contiguous shards, as ``datasets.distributed.split_dataset_by_node`` splits a map-style
    dataset over data-parallel ranks (the first ``len(items) % n`` shards one longer)."""
    size, extra = divmod(len(items), n)
    bounds = [r * size + min(r, extra) for r in range(n + 1)]
    return [items[bounds[r] : bounds[r + 1]] for r in range(n)]


def check_dataset(
    name: str, dataset_path: str | None, section: str, dp_degree: int, batch_tokens: int | None = None
) -> None:
    """Refuse an unknown dataset, or a ``local`` corpus that is malformed or too small for the ranks.

    A ``local`` corpus beyond ``LOCAL_CORPUS_WARN_BYTES`` of files is warned about from the files'
    sizes first; it is then read whole, as the loader will read it, to refuse a malformed file.

    torchtitan gives each data-parallel rank a contiguous share of the documents; a rank with none
    would loop over nothing forever (torchtitan's infinite loader re-loops without yielding). A
    finite loader (validation: pass ``batch_tokens`` = local_batch_size × (seq_len + 1)) whose
    share cannot fill one batch yields nothing, and torchtitan's Validator then fails on an empty
    loss list at the first validation, possibly hours in.
    """
    if name.lower() not in known_datasets():
        refuse(f"{section}.dataset", name, f"unknown dataset; choose one of {known_datasets()}")
    config_field = f"{section}.dataset_path"
    if name.lower() in STDLIB_DATASETS and dataset_path:
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
        most = min(sum(len(t.encode()) + 2 for t in shard) for shard in contiguous_shards(texts, dp_degree))
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

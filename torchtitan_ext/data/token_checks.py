"""The preflight's checks of a ``tokens`` dataset, from manifests alone, and of the data position a resume loads.

``check_token_data`` refuses, before any process starts, each way a prepared folder cannot serve the
run: not a finished prepare (``read_manifest``), a malformed blend (``parse_blend``), a tokenizer
other than the run's (the manifest's fingerprint against ``boost.training.data.tokenizer_fingerprint`` of
the run's tokenizer folder), ids beyond the model's vocabulary (the manifest's ``max_token_id``),
and a split too small for one batch on every data-parallel rank. No shard is opened: the manifest
records what the checks need.

``token_order_problem`` compares the global order a checkpoint's position belongs to (seq_len,
seed, each folder's tokens and weight) with the job's: a position in another order would repeat
and skip samples silently, so a resume into one is refused, naming what changed and the ways out.
A changed batch size or data-parallel degree is not a change of order: the position is a count of
samples, and the next step reads the next global batch from it.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from boost.training.config_error import refuse
from boost.training.data.token_blend import BlendSchedule
from boost.training.data.token_order import order_differences, order_identity, unrepeated_length
from boost.training.data.tokenizer_fingerprint import tokenizer_fingerprint
from torchtitan_ext.data.token_sources import (
    DATASET_STATE,
    TOKEN_ORDER,
    TokenSource,
    dataset_seed,
    training_sources,
    validation_sources,
)
from torchtitan_ext.data.tokenizer import boost_tokenizer_dir, folder_vocab_size

REPREPARE = "python -m boost.training.data.prepare --config TOML --input CORPUS --output DIR"


def _check_tokenizer(source: TokenSource, fingerprint: str, tokenizer_folder: Path, vocab: int) -> None:
    manifest = source.manifest
    if manifest.tokenizer != fingerprint:
        refuse(
            source.field,
            source.folder,
            f"prepared with another tokenizer ({manifest.tokenizer[:19]}… from {manifest.tokenizer_path}) than "
            f"this run's ({fingerprint[:19]}… in {tokenizer_folder}): prepare the corpus again with the run's "
            f"TOML ({REPREPARE}), or train with the tokenizer it was prepared with "
            f"(--model.hf_assets_path {manifest.tokenizer_path})",
        )
    if source.max_token_id >= vocab:
        refuse(
            source.field,
            source.folder,
            f"its {source.split} split holds token id {source.max_token_id}, beyond the model's vocabulary of "
            f"{vocab} ids (this run's tokenizer): prepare the corpus again with the run's TOML ({REPREPARE})",
        )


def check_token_data(job, section: str, dp: int) -> None:
    """Refuse a ``tokens`` dataset that cannot serve ``section`` (``training`` or ``validation``) of
    ``job`` at data-parallel degree ``dp``; reads manifests and the tokenizer folder, no shard."""
    cfg = getattr(job, section)
    sources = training_sources(job) if section == "training" else validation_sources(job)
    tokenizer_folder = boost_tokenizer_dir(job)
    fingerprint, vocab = tokenizer_fingerprint(tokenizer_folder), folder_vocab_size(tokenizer_folder)
    batch = cfg.local_batch_size * dp
    window = cfg.seq_len + 1
    for source in sources:
        _check_tokenizer(source, fingerprint, tokenizer_folder, vocab)
        windows = source.tokens // window
        if windows < batch:
            refuse(
                source.field,
                source.folder,
                f"its {source.split} split holds {windows} windows of {section}.seq_len + 1 = {window} tokens "
                f"({source.tokens} tokens), fewer than one batch for every data-parallel rank "
                f"({section}.local_batch_size × data-parallel degree = {cfg.local_batch_size} × {dp} = {batch}): "
                f"prepare more text into it, or lower {section}.local_batch_size or {section}.seq_len",
            )
    if section == "validation" and len(sources) > 1:
        schedule = BlendSchedule([s.weight for s in sources])
        readable = unrepeated_length(schedule, [s.tokens // window for s in sources])
        if readable < batch:
            refuse(
                "validation.dataset_path",
                job.validation.dataset_path,
                f"its blend reads {readable} windows before repeating one, fewer than one batch for every "
                f"data-parallel rank ({batch}): give its small folders more weight or more text",
            )


def job_token_order(job) -> dict:
    """The global order ``job`` trains on (``boost.training.data.token_order.order_identity``), from manifests."""
    sources = training_sources(job)
    return order_identity(
        job.training.seq_len, dataset_seed(job), [s.tokens for s in sources], [s.weight for s in sources]
    )


class _PlainDataUnpickler(pickle.Unpickler):
    """Builtin values only (dicts, lists, numbers, strings): what a ``tokens`` loader's state holds."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a data position holds no {module}.{name}")


def saved_token_position(checkpoint: Path) -> dict | None:
    """The ``tokens`` dataset state in ``checkpoint`` (its global position and order), or ``None``."""
    from boost.runtime.checkpoint_folder import read_bytes_item

    raw = read_bytes_item(checkpoint, f"dataloader.{TOKEN_ORDER}")
    if raw is None:
        return None
    return _PlainDataUnpickler(io.BytesIO(raw)).load()[DATASET_STATE]


def token_order_problem(checkpoint: Path, job) -> str | None:
    """Why ``job`` cannot continue the data order of ``checkpoint`` (``None`` when it can)."""
    saved = saved_token_position(checkpoint)
    if saved is None:
        return None
    differences = order_differences(saved, job_token_order(job))
    if not differences:
        return None
    return (
        f"{checkpoint} is at sample {saved['consumed_samples']} of another data order than this job's: "
        f"{'; '.join(differences)}. Resume with the checkpoint's settings, or start this job's order from "
        "its beginning with --checkpoint.exclude_from_loading dataloader (model, optimizer and step "
        "still resume), or train in a new --job.dump_folder"
    )

"""Check DCP checkpoints before torchtitan loads one: the right folder, intact, holding this job's model.

One rule says which folders are checkpoints: a folder named exactly ``step-N`` under
``job.dump_folder/checkpoint.folder`` (:func:`checkpoint_step`). torchtitan's own finder and purge
*search* names for ``step-N``, so a backup such as ``keep-step-500`` counted as step 500 (resume
then failed on the missing ``step-500``) and was deleted by ``keep_latest_k``; BOOST's checkpoint
manager (``checkpoint_manager.py``) uses this rule for both, and the trainer always pins
``checkpoint.load_step`` to the step chosen here.

torchtitan resumes from the highest such folder that has a ``.metadata`` file. A folder cut
short by a kill, truncated by a full disk or tampered with would then fail deep inside the load (or
worse, load). Before the trainer starts, every rank (read-only, so no coordination is needed) checks
the candidates newest first:

- ``.metadata`` unpickles under an allowlist of DCP's own metadata classes — so torch's own
  unpickling of it afterwards cannot run arbitrary code (tensor payloads are raw bytes);
- every storage item the metadata points at lies inside an existing file;
- every non-tensor item (train and dataloader state, which DCP would ``torch.load`` with
  ``weights_only=False``) loads under torch's weights-only unpickler.

The newest intact checkpoint is loaded (``checkpoint.load_step`` is set), each skipped one is
named with its reason, and nothing is deleted or overwritten. The chosen checkpoint's recorded model
(``checkpoint_identity.py``) must be the job's: resuming into another model is refused, naming each
differing field. ``check_resume`` runs all of it in ``run_train.sh``'s preflight, before any
process starts; ``prepare_resume`` again in each rank of the trainer.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import sys
from pathlib import Path

import torch

from torchtitan_ext.checkpoint_identity import (
    describe_differences,
    identity_differences,
    planned_model_identity,
    read_identity,
)
from torchtitan_ext.run_lock import check_run_folder_free

# The names torchtitan writes (``step-{step}``): no sign, no leading zeros, nothing around them.
_CHECKPOINT_NAME = re.compile(r"step-(0|[1-9]\d*)")


class CheckpointRefused(SystemExit):
    """The job must not load the checkpoint it would resume from; the message says why and the ways
    out. A ``SystemExit``: uncaught, it prints the message alone (no traceback) and ends the process."""


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder named ``name``, or ``None`` if it is not one (the one rule)."""
    match = _CHECKPOINT_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def checkpoint_folders(folder: Path) -> dict[int, Path]:
    """Every checkpoint folder (complete or not) in ``folder``, by step."""
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.iterdir():
        step = checkpoint_step(path.name)
        if step is not None and path.is_dir():
            found[step] = path
    return found


# Exactly the globals a DCP ``.metadata`` pickle names (torch 2.11-2.14), and nothing callable
# beyond constructors of plain records: a prefix rule such as "torch.*" would admit gadgets like
# ``torch.utils.cpp_extension.load_inline`` or ``builtins.getattr``.
_DCP_METADATA = "torch.distributed.checkpoint.metadata"
_ALLOWED_GLOBALS = {
    (_DCP_METADATA, name)
    for name in ("Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
                 "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING")
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),  # looks a layout up by name in torch's own table
    ("torch", "Size"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout)):
            return getattr(torch, name)  # a dtype or layout constant, not a callable
        raise pickle.UnpicklingError(f"refusing {module}.{name}")


def read_metadata(path: Path):
    """The DCP ``Metadata`` of the checkpoint at ``path``, unpickled under the allowlist; raises if unreadable."""
    return _MetadataUnpickler(io.BytesIO((path / ".metadata").read_bytes())).load()


def inspect_checkpoint(path: Path) -> str | None:
    """``None`` if the DCP folder at ``path`` is intact, else why it is not."""
    meta_file = path / ".metadata"
    if not meta_file.is_file():
        return "no .metadata (the save did not finish)"
    try:
        metadata = read_metadata(path)
    except Exception as e:  # truncated or foreign pickle
        return f"unreadable .metadata ({type(e).__name__}: {e})"
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(storage, dict):
        return ".metadata has no storage map"
    sizes: dict[str, int] = {}
    for info in storage.values():
        rel = getattr(info, "relative_path", None)
        if rel is None:
            continue
        if rel not in sizes:
            f = path / rel
            sizes[rel] = f.stat().st_size if f.is_file() else -1
        if sizes[rel] < 0:
            return f"missing data file {rel}"
        if info.offset + info.length > sizes[rel]:
            return f"data file {rel} is truncated ({sizes[rel]} bytes, needs {info.offset + info.length})"
    return _unsafe_bytes_item(path, metadata, storage)


def _unsafe_bytes_item(path: Path, metadata, storage: dict) -> str | None:
    """DCP's planner ``torch.load``s every non-tensor item (train state, dataloader state) with
    ``weights_only=False``; check each with the weights-only unpickler first."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    byte_items = {fqn for fqn, md in metadata.state_dict_metadata.items() if isinstance(md, BytesStorageMetadata)}
    for index, info in storage.items():
        if index.fqn not in byte_items or getattr(info, "transform_descriptors", None):
            continue
        with open(path / info.relative_path, "rb") as f:
            f.seek(info.offset)
            raw = f.read(info.length)
        try:
            torch.load(io.BytesIO(raw), weights_only=True)
        except Exception as e:
            return f"item {index.fqn!r} holds objects outside torch's weights-only allowlist ({type(e).__name__})"
    return None


def choose_checkpoint(folder: Path) -> tuple[int | None, list[tuple[int, str]]]:
    """The newest intact step in ``folder`` and the newer ones skipped, with reasons."""
    skipped = []
    for step, path in sorted(checkpoint_folders(folder).items(), reverse=True):
        reason = inspect_checkpoint(path)
        if reason is None:
            return step, skipped
        skipped.append((step, reason))
    return None, skipped


def resume_checkpoint(job) -> tuple[Path | None, int | None, list[tuple[int, str]]]:
    """What the trainer will load: ``(folder, step, skipped newer steps)``.

    ``step`` is set for a checkpoint of this run folder; ``folder`` alone for
    ``checkpoint.initial_load_path`` (which torchtitan reads only while the run's checkpoint folder
    does not exist); ``(None, None, [])`` for a fresh start. Raises ``CheckpointRefused`` for a
    ``load_step`` that is missing or broken, or a folder whose checkpoints are all broken.
    """
    ckpt = job.checkpoint
    if not ckpt.enable or ckpt.create_seed_checkpoint:
        return None, None, []
    folder = Path(job.job.dump_folder) / ckpt.folder
    if ckpt.load_step != -1:
        path = folder / f"step-{ckpt.load_step}"
        if not path.is_dir():
            steps = sorted(checkpoint_folders(folder))
            fix = (f"the steps saved there are {steps}: pass one of those, or -1 for the newest" if steps
                   else "it holds no checkpoint: leave checkpoint.load_step at -1 to start from scratch")
            raise CheckpointRefused(
                f"BOOST checkpoint error: checkpoint.load_step = {ckpt.load_step}: there is no checkpoint "
                f"{path.name} in {folder}; {fix}"
            )
        reason = inspect_checkpoint(path)
        if reason is not None:
            raise CheckpointRefused(f"BOOST checkpoint error: checkpoint.load_step = {ckpt.load_step}: {path}: {reason}")
        return path, ckpt.load_step, []
    if not folder.exists():
        initial = ckpt.initial_load_path
        return (Path(initial), None, []) if initial and not ckpt.initial_load_in_hf else (None, None, [])
    step, skipped = choose_checkpoint(folder)
    if skipped and step is None:
        raise CheckpointRefused(
            f"BOOST checkpoint error: no intact checkpoint in {folder} ({len(skipped)} corrupt: step "
            f"{skipped[0][0]}: {skipped[0][1]}); move them away to start from scratch"
        )
    return (folder / f"step-{step}" if step is not None else None), step, skipped


def check_model_identity(checkpoint: Path, job) -> bool:
    """Refuse (``CheckpointRefused``) if ``checkpoint`` holds another model than ``job`` builds.

    Returns ``False`` when the checkpoint records no identity (written before BOOST recorded one):
    it is accepted, and the caller warns.
    """
    try:
        saved = read_identity(checkpoint)
    except ValueError as e:
        raise CheckpointRefused(f"BOOST checkpoint error: {e}") from None
    if saved is None:
        return False
    wanted = planned_model_identity(job)
    if wanted is None:  # not a BOOST model: nothing to compare with
        return True
    differences = identity_differences(saved, wanted)
    if differences:
        raise CheckpointRefused("BOOST checkpoint error: " + describe_differences(checkpoint, differences))
    return True


def check_resume(job) -> None:
    """``run_train.sh``'s preflight: refuse, before any process starts, a run folder held by a live
    trainer, a missing or broken ``load_step``, and a checkpoint of another model."""
    check_run_folder_free(job.job.dump_folder)
    path, _, _ = resume_checkpoint(job)
    if path is not None:
        check_model_identity(path, job)


def saved_data_parallel_degree(checkpoint: Path) -> int | None:
    """The data-parallel degree the intact checkpoint's dataloader state was written at (one entry per
    DP rank); ``None`` if it holds no dataloader state."""
    keys = read_metadata(checkpoint).state_dict_metadata
    degree = sum(1 for key in keys if key.startswith("dataloader.dp_rank_"))
    return degree or None


def job_data_parallel_degree(job, world_size: int) -> int:
    """dp_replicate × dp_shard of ``job`` at ``world_size`` (dp_shard = -1 takes what the others leave)."""
    par = job.parallelism
    shard = par.data_parallel_shard_degree
    if shard == -1:
        others = (par.tensor_parallel_degree * par.pipeline_parallel_degree * par.context_parallel_degree
                  * par.data_parallel_replicate_degree)
        shard = world_size // others
    return shard * par.data_parallel_replicate_degree


def prepare_resume(job, world_size: int) -> None:
    """In every rank before torchtitan's trainer starts: choose the checkpoint and pin
    ``checkpoint.load_step`` to it, refuse another model's, and let a new data-parallel degree resume.

    Messages print on rank 0 only; refusals raise ``CheckpointRefused`` on every rank.
    """
    rank0 = os.environ.get("RANK", "0") == "0"

    def say(message: str) -> None:
        if rank0:
            print(f"BOOST: {message}", file=sys.stderr, flush=True)

    path, step, skipped = resume_checkpoint(job)
    folder = Path(job.job.dump_folder) / job.checkpoint.folder
    for bad, reason in skipped:
        say(f"skipping checkpoint {folder / f'step-{bad}'}: {reason}")
    if skipped:
        say(f"resuming from the newest intact checkpoint, step {step}")
    if step is not None:
        job.checkpoint.load_step = step  # torchtitan loads exactly what was checked here
    if path is None:
        return
    if not check_model_identity(path, job):
        say(f"warning: {path} records no model identity (written before BOOST recorded one); resuming "
            "without checking that it holds the model this job asks for")
    if step is None or step == 0 or "dataloader" in job.checkpoint.exclude_from_loading:
        return  # initial loads and the seed checkpoint (step 0) load the model only
    saved, now = saved_data_parallel_degree(path), job_data_parallel_degree(job, world_size)
    if saved is not None and saved != now:
        # torchtitan keeps one data position per DP rank and cannot reshard them (it asserts); model,
        # optimizer, LR schedule and step reshard through DCP.
        job.checkpoint.exclude_from_loading = [*job.checkpoint.exclude_from_loading, "dataloader"]
        say(f"warning: the data-parallel degree changed from {saved} (checkpoint) to {now}: the data position "
            "cannot be resharded, so every data-parallel rank starts its shard of the data from its beginning "
            "(model, optimizer, LR schedule and step resume)")

"""DCP checkpoint folders: which folders are checkpoints, whether one is intact, which to read.

One rule says which folders are checkpoints: a folder named exactly ``step-N`` (:func:`checkpoint_step`).
torchtitan's own finder and purge *search* names for ``step-N``, which would take a backup such as
``keep-step-500`` for step 500: resume would look for a ``step-500`` that does not exist, and
``keep_latest_k`` would delete the backup. BOOST's checkpoint manager
(``torchtitan_ext/guards/checkpoint_manager.py``) uses this rule for both, the trainer's resume guard
(``torchtitan_ext/guards/checkpoint_guard.py``) and the after-training tools (``boost.after_training.trained_run``)
choose with it.

A folder cut short by a kill, truncated by a full disk or tampered with would fail deep inside a
load (or worse, load). :func:`inspect_checkpoint` checks one, read-only:

- ``.metadata`` unpickles under an allowlist of DCP's own metadata classes — so torch's own
  unpickling of it afterwards cannot run arbitrary code (tensor payloads are raw bytes);
- every storage item the metadata points at lies inside an existing file;
- every non-tensor item (train and dataloader state, which DCP would ``torch.load`` with
  ``weights_only=False``) loads under torch's weights-only unpickler.

:func:`choose_checkpoint` takes the newest intact one and names each newer one skipped, with its
reason; nothing is deleted or overwritten. A training run resumes only from a checkpoint holding its
optimizer and training state (:func:`resume_problem`): torchtitan's last save may hold the model alone.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path

import torch

# The names torchtitan writes (``step-{step}``): no sign, no leading zeros, nothing around them.
_CHECKPOINT_NAME = re.compile(r"step-(0|[1-9]\d*)")


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
# the checkpoint's path (StorageMeta.checkpoint_id), pickled under the module that defines its class:
# pathlib's through Python 3.12, pathlib._local's from 3.13 (which an older Python cannot import: there the
# folder is as unreadable as torch's own load would find it)
_PATH_GLOBALS = {
    (module, name)
    for module in ("pathlib", "pathlib._local")
    for name in ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
}
_ALLOWED_GLOBALS = {
    (_DCP_METADATA, name)
    for name in (
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),  # looks a layout up by name in torch's own table
    ("torch", "Size"),
    ("collections", "OrderedDict"),
    *_PATH_GLOBALS,
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


# How a checkpoint that a newer torch wrote, and this one cannot read, is told from a damaged one (its
# reason begins so): it is no damage, and resuming an older step instead would train over it.
WRITTEN_BY_NEWER_TORCH = "written by a newer torch"


def written_by_newer_torch(reason: str) -> bool:
    """Whether ``reason`` (``inspect_checkpoint``'s) is a newer torch's save this one cannot read, not damage."""
    return reason.startswith(WRITTEN_BY_NEWER_TORCH)


def inspect_checkpoint(path: Path) -> str | None:
    """``None`` if the DCP folder at ``path`` is intact, else why it is not: damage, or a ``.metadata`` that a
    newer torch wrote (``WRITTEN_BY_NEWER_TORCH``: torch 2.15's does not unpickle on 2.13)."""
    meta_file = path / ".metadata"
    if not meta_file.is_file():
        return "no .metadata (the save did not finish)"
    try:
        metadata = read_metadata(path)
    except Exception as e:  # truncated or foreign pickle, or a newer torch's
        newer = _newer_writing_torch(path)
        if newer is not None:
            return (
                f"{WRITTEN_BY_NEWER_TORCH} ({newer}) than this one ({torch.__version__}), whose .metadata it "
                f"cannot read ({type(e).__name__}: {e}); nothing is damaged: run with torch {newer} or newer"
            )
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

    byte_items = {
        fqn for fqn, md in metadata.state_dict_metadata.items() if isinstance(md, BytesStorageMetadata)
    }
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


def read_bytes_item(path: Path, fqn: str) -> object | None:
    """The non-tensor item ``fqn`` (``dataloader.token_order``) of the intact checkpoint at ``path``, loaded
    under torch's weights-only unpickler; ``None`` if the checkpoint holds no such item."""
    metadata = read_metadata(path)
    if fqn not in metadata.state_dict_metadata:
        return None
    for index, info in metadata.storage_data.items():
        if index.fqn == fqn:
            if getattr(info, "transform_descriptors", None):
                raise ValueError(
                    f"item {fqn!r} of {path} is stored transformed ({info.transform_descriptors})"
                )
            with open(path / info.relative_path, "rb") as f:
                f.seek(info.offset)
                return torch.load(io.BytesIO(f.read(info.length)), weights_only=True)
    return None


# The items a full torchtitan checkpoint holds beside the model, which a resume loads with it.
_TRAINING_STATE = ("train_state.", "optimizer.")
# Why a checkpoint holding the model alone is no resume point. torchtitan's last save keeps the model
# alone under checkpoint.last_save_model_only (its default) "so this won't affect preemption and training
# resume", yet its own resume would pick that step and fail in DCP on the missing items.
MODEL_ONLY = (
    "it holds the model alone (the last save of a run with checkpoint.last_save_model_only, torchtitan's "
    "default), not the optimizer and training state a resume loads"
)


def holds_training_state(path: Path) -> bool:
    """Whether the intact checkpoint at ``path`` holds the step and optimizer a resume loads, not the model alone."""
    return any(key.startswith(_TRAINING_STATE) for key in read_metadata(path).state_dict_metadata)


def resume_problem(path: Path, step: int | None) -> str | None:
    """``None`` if a training run can resume from the checkpoint at ``path`` (of ``step``), else why not: it is
    not intact, or it holds the model alone. Step 0 is torchtitan's seed checkpoint, the model alone by
    design, which torchtitan loads as such."""
    reason = inspect_checkpoint(path)
    if reason is None and step != 0 and not holds_training_state(path):
        return MODEL_ONLY
    return reason


def choose_checkpoint(folder: Path, resume: bool = False) -> tuple[int | None, list[tuple[int, str]]]:
    """The newest intact step in ``folder`` and the newer ones skipped, with reasons; ``resume``: the newest a
    training run can resume from (``resume_problem``), skipping those that hold the model alone too."""
    skipped = []
    for step, path in sorted(checkpoint_folders(folder).items(), reverse=True):
        reason = resume_problem(path, step) if resume else inspect_checkpoint(path)
        if reason is None:
            return step, skipped
        skipped.append((step, reason))
    return None, skipped


# What model a checkpoint holds, beside its weights (written by torchtitan_ext.guards.checkpoint_identity,
# read by the resume guard and the after-training tools)
MODEL_IDENTITY_FILE = "boost_model.json"


def _newer_writing_torch(checkpoint: Path) -> str | None:
    """The torch release recorded as the writer of ``checkpoint`` (its ``boost_model.json``'s ``torch_version``)
    where it is newer than this one; ``None`` where it is not, or is not recorded (an older BOOST's save).
    Releases are compared, not builds: 2.13.0+cu130 is no newer than 2.13.0+cpu."""
    from torch.torch_version import TorchVersion

    try:
        written = json.loads((checkpoint / MODEL_IDENTITY_FILE).read_text())["torch_version"]
        return written if TorchVersion(torch.__version__.split("+")[0]) < written.split("+")[0] else None
    except Exception:  # no record, a damaged one, or no version in it: nothing to tell
        return None


def read_model_identity(checkpoint: Path) -> dict | None:
    """The model identity recorded in ``checkpoint`` (its ``boost_model.json``); ``None`` for a checkpoint
    that records none (no such file: written before BOOST recorded one); ``ValueError`` for a damaged one,
    whose ``model`` is not a JSON object (a null is damage too, never taken for "records none")."""
    path = checkpoint / MODEL_IDENTITY_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except ValueError as e:  # not JSON, or not UTF-8
        problem = f"{type(e).__name__}: {e}"
    else:
        if not isinstance(record, dict):
            problem = "not a JSON object"
        elif "model" not in record:
            problem = "no 'model' entry"
        elif not isinstance(record["model"], dict):
            problem = f"its 'model' is {json.dumps(record['model'])}, not an object"
        else:
            return record["model"]
    raise ValueError(
        f"{path} is not a BOOST model identity ({problem}); restore it or delete it to resume unchecked"
    )

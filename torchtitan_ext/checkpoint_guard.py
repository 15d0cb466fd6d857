"""Check DCP checkpoints before torchtitan loads one; fall back past a truncated or corrupt one.

torchtitan resumes from the highest ``step-N`` folder that has a ``.metadata`` file. A folder cut
short by a kill, truncated by a full disk or tampered with would then fail deep inside the load (or
worse, load). Before the trainer starts, every rank (read-only, so no coordination is needed) checks
the candidates newest first:

- ``.metadata`` unpickles under an allowlist of DCP's own metadata classes — so torch's own
  unpickling of it afterwards cannot run arbitrary code (tensor payloads are raw bytes);
- every storage item the metadata points at lies inside an existing file;
- every non-tensor item (train and dataloader state, which DCP would ``torch.load`` with
  ``weights_only=False``) loads under torch's weights-only unpickler.

The newest intact checkpoint is loaded (``checkpoint.load_step`` is set), each skipped one is
named with its reason, and nothing is deleted or overwritten.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import sys
from pathlib import Path

import torch

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


def inspect_checkpoint(path: Path) -> str | None:
    """``None`` if the DCP folder at ``path`` is intact, else why it is not."""
    meta_file = path / ".metadata"
    if not meta_file.is_file():
        return "no .metadata (the save did not finish)"
    try:
        metadata = _MetadataUnpickler(io.BytesIO(meta_file.read_bytes())).load()
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
    if not folder.is_dir():
        return None, []
    steps = sorted((int(m.group(1)) for p in folder.iterdir() if (m := re.fullmatch(r"step-(\d+)", p.name))), reverse=True)
    skipped = []
    for step in steps:
        reason = inspect_checkpoint(folder / f"step-{step}")
        if reason is None:
            return step, skipped
        skipped.append((step, reason))
    return None, skipped


def choose_load_step(job) -> None:
    """Point ``job.checkpoint.load_step`` at the newest intact checkpoint; exit if none is intact."""
    ckpt = job.checkpoint
    if not ckpt.enable or ckpt.create_seed_checkpoint:
        return
    folder = Path(job.job.dump_folder) / ckpt.folder
    rank0 = os.environ.get("RANK", "0") == "0"
    if ckpt.load_step != -1:
        reason = inspect_checkpoint(folder / f"step-{ckpt.load_step}")
        if reason is not None:
            raise SystemExit(f"BOOST checkpoint error: checkpoint.load_step = {ckpt.load_step}: {reason}")
        return
    step, skipped = choose_checkpoint(folder)
    for bad, reason in skipped:
        if rank0:
            print(f"BOOST: skipping checkpoint {folder / f'step-{bad}'}: {reason}", file=sys.stderr, flush=True)
    if skipped and step is None:
        raise SystemExit(
            f"BOOST checkpoint error: no intact checkpoint in {folder} ({len(skipped)} corrupt); move them away to "
            "start from scratch"
        )
    if skipped:
        if rank0:
            print(f"BOOST: resuming from the newest intact checkpoint, step {step}", file=sys.stderr, flush=True)
        ckpt.load_step = step

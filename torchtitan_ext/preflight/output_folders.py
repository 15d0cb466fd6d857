"""The folders a run writes, checked before any process starts: each must be a folder this process can
create files in (or one it can create). Without the check, an unwritable ``job.dump_folder`` fails every
rank on a traceback at start, and an unwritable ``checkpoint.folder`` only at the first save, after the
steps before it were trained.

A probe folder is made (and removed at once) in the nearest existing folder of each path: ``os.access``
answers yes to root on a file system that refuses every write (``/proc``, a read-only mount's overlay).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from boost.training.config_error import refuse


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _write_problem(path: Path) -> str | None:
    """Why files cannot be written under ``path`` (made where missing), or ``None``."""
    existing = _nearest_existing(path)
    if not existing.is_dir():
        return f"{existing} is a file, not a folder" if existing != path else "is a file, not a folder"
    try:
        probe = tempfile.mkdtemp(dir=existing, prefix=".boost-write-probe-")
    except OSError as e:
        where = "" if existing == path else f" (in {existing}, the nearest folder that exists)"
        return f"cannot be written{where}: {e.strerror or e}"
    os.rmdir(probe)
    return None


def written_folders(job) -> list[tuple[str, str, Path]]:
    """``(field, value, path)`` of each folder ``job`` writes, as torchtitan joins them to the dump folder."""
    dump = Path(job.job.dump_folder).expanduser()
    folders = [("job.dump_folder", job.job.dump_folder, dump)]
    if job.checkpoint.enable:
        folders.append(("checkpoint.folder", job.checkpoint.folder, dump / job.checkpoint.folder))
    if job.metrics.enable_tensorboard:
        folders.append(
            ("metrics.save_tb_folder", job.metrics.save_tb_folder, dump / job.metrics.save_tb_folder)
        )
    prof = job.profiling
    if prof.enable_profiling:
        folders.append(
            ("profiling.save_traces_folder", prof.save_traces_folder, dump / prof.save_traces_folder)
        )
    if prof.enable_memory_snapshot:
        folders.append(
            (
                "profiling.save_memory_snapshot_folder",
                prof.save_memory_snapshot_folder,
                dump / prof.save_memory_snapshot_folder,
            )
        )
    from boost.training.data.offline_tokenizer import assets_tokenizer_dir, stdlib_tokenizer_dir

    if assets_tokenizer_dir(job.model.hf_assets_path) is None:
        cached = stdlib_tokenizer_dir(job.boost.tokenizer_vocab_size, job.boost.cache_dir)
        if not (cached / "tokenizer.json").exists():  # trained and cached at start: its folder is written
            folders.append(("boost.cache_dir", job.boost.cache_dir, cached.parent))
    return folders


def check_output_folders(job) -> None:
    """Refuse the first folder ``job`` writes that cannot be written."""
    for field, value, path in written_folders(job):
        problem = _write_problem(path)
        if problem is not None:
            shown = f"{path}" if str(path) != str(value) else "it"
            refuse(field, value, f"{problem}: the run writes {shown}; choose a folder this user can write")

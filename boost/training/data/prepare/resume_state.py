"""What an unfinished prepare has done, so a re-run continues it: ``DIR/.prepare/``.

- ``options.json``: what decides the output's bytes (tokenizer fingerprint, text field, validation
  fraction, dtype, the input files in order). A re-run with other options into the same folder is
  refused, never mixed in; ``--workers`` and ``--skip-bad`` are not among them (the first never
  changes a byte, the second only lets a run finish that would otherwise stop).
- ``done-NNNNN.json``: one per finished input file, written atomically after its shards are renamed
  into place: its documents, skipped records and shard records, and the file's size and mtime. A
  record whose input file has changed since, or whose shard files are not the sizes it records, is
  not trusted: that file is prepared again.
- ``lock``: held (``flock``) by the running prepare, so two cannot write one folder.

Once the manifest is written the folder is a dataset and ``.prepare/`` is removed; a re-run then
compares its options with the manifest's and, when equal, has nothing to do.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from boost.training.config_error import ConfigError
from boost.training.data.token_folder import DTYPES, MANIFEST, Manifest, Shard

STATE_FOLDER = ".prepare"


@dataclass(frozen=True)
class PrepareOptions:
    """What decides a prepared folder's bytes; a re-run into the same folder must ask for the same."""

    tokenizer: str
    text_field: str
    validation_fraction: float
    dtype: str
    inputs: tuple[str, ...]

    @staticmethod
    def of_manifest(manifest: Manifest) -> PrepareOptions:
        inputs = tuple(f.path for f in manifest.inputs)
        return PrepareOptions(
            manifest.tokenizer, manifest.text_field, manifest.validation_fraction, manifest.dtype, inputs
        )

    def differences(self, other: PrepareOptions) -> list[str]:
        """``name: theirs -> ours`` for each differing option (inputs summarised)."""
        found = []
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if mine == theirs:
                continue
            if field.name == "inputs":
                added, removed = len(set(mine) - set(theirs)), len(set(theirs) - set(mine))
                change = f"{added} added, {removed} removed" if added or removed else "another order"
                found.append(f"inputs ({change})")
            else:
                found.append(f"{field.name} {theirs!r} there, {mine!r} now")
        return found


@dataclass(frozen=True)
class FileRecord:
    """One finished input file: what it gave each split."""

    index: int
    path: str
    bytes: int
    mtime_ns: int
    documents: int
    skipped: int
    shards: dict[str, Shard]
    max_token_id: dict[str, int]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @staticmethod
    def from_json(text: str) -> FileRecord:
        raw = json.loads(text)
        raw["shards"] = {split: Shard(**shard) for split, shard in raw["shards"].items()}
        return FileRecord(**raw)


def _write_atomically(path: Path, text: str) -> None:
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    os.replace(staging, path)


class PrepareState:
    """The ``.prepare/`` folder of an output folder, held locked from ``open`` to ``finish``/``release``."""

    def __init__(self, output: Path):
        self.output = output
        self.folder = output / STATE_FOLDER
        self._lock = None

    def open(self, options: PrepareOptions) -> None:
        """Create or continue the record of ``options``; refuse another prepare's folder or options."""
        if self.output.exists() and not self.output.is_dir():
            raise ConfigError(f"--output {self.output}: is a file; name a folder (new or empty)")
        try:
            self.output.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a file where a parent folder should be, no permission, a read-only disk
            raise ConfigError(
                f"--output {self.output}: cannot be created ({e.strerror}); name a folder that can be"
            ) from None
        if not self.folder.is_dir():
            others = [p.name for p in self.output.iterdir()]
            if others:
                raise ConfigError(
                    f"--output {self.output}: holds files that no prepare wrote ({', '.join(sorted(others)[:3])}"
                    f"{', ...' if len(others) > 3 else ''}); choose a new or empty folder"
                )
            self.folder.mkdir()
        self._lock = (self.folder / "lock").open("a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "?"
            self._lock.close()
            self._lock = None
            raise ConfigError(
                f"--output {self.output}: another prepare (pid {holder}) is writing it; wait for it to end"
            ) from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(str(os.getpid()))
        self._lock.flush()
        recorded_file = self.folder / "options.json"
        if recorded_file.is_file():
            recorded = json.loads(recorded_file.read_text())
            recorded = PrepareOptions(**{**recorded, "inputs": tuple(recorded["inputs"])})
            differences = options.differences(recorded)
            if differences:
                self.release()
                raise ConfigError(
                    f"--output {self.output}: holds an unfinished prepare with other options "
                    f"({'; '.join(differences)}); re-run it with its own options to finish it, or "
                    "prepare into a new folder"
                )
        else:
            _write_atomically(recorded_file, json.dumps(dataclasses.asdict(options), indent=1))
        for stale in self.output.glob(".*.tmp"):  # staging files of a run that was stopped
            stale.unlink()

    def finished(self, index: int, path: Path) -> FileRecord | None:
        """The record of input ``index`` when it is finished and still true, else None."""
        done = self.folder / f"done-{index:05d}.json"
        if not done.is_file():
            return None
        record = FileRecord.from_json(done.read_text())
        stat = path.stat()
        if (record.path, record.bytes, record.mtime_ns) != (str(path), stat.st_size, stat.st_mtime_ns):
            return None
        itemsize = DTYPES[json.loads((self.folder / "options.json").read_text())["dtype"]]
        for shard in record.shards.values():
            for suffix, size in ((".bin", shard.tokens * itemsize), (".idx", (shard.documents + 1) * 8)):
                file = self.output / f"{shard.name}{suffix}"
                if not file.is_file() or file.stat().st_size != size:
                    return None
        return record

    def record(self, record: FileRecord) -> None:
        _write_atomically(self.folder / f"done-{record.index:05d}.json", record.to_json())

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def finish(self) -> None:
        """After the manifest: the folder is a dataset, its record of progress goes."""
        assert (self.output / MANIFEST).is_file()
        shutil.rmtree(self.folder)
        self.release()

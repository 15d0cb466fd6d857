"""The files a prepare reads, from the ``--input`` arguments: files, folders and globs, in a fixed order.

Each argument expands in sorted path order (a folder recursively, a glob by ``glob``'s rules) and the
arguments keep the order they were given in; a file named twice is read once. The order fixes which
shard each file becomes, so it never depends on the file system's listing order.
"""

from __future__ import annotations

import glob
from pathlib import Path

from boost.training.config_error import ConfigError

INPUT_SUFFIXES = (".txt", ".jsonl", ".json.gz", ".jsonl.gz", ".parquet")


def input_kind(path: Path) -> str | None:
    """The suffix of ``INPUT_SUFFIXES`` that ``path`` ends with (``.json.gz`` before ``.gz``), else None.

    Example::

        >>> input_kind(Path("c4-train.00000-of-01024.json.gz")), input_kind(Path("notes.md"))
        ('.json.gz', None)
    """
    return next((s for s in INPUT_SUFFIXES if path.name.endswith(s)), None)


def _expand(argument: str) -> list[Path]:
    if not argument.strip():  # Path("") is the working directory: never read it for an unset variable
        raise ConfigError(
            f"--input {argument!r}: an empty path (an unset shell variable?); name a file, folder or glob"
        )
    path = Path(argument).expanduser()
    listing = ", ".join(INPUT_SUFFIXES)
    if path.is_file():
        if input_kind(path) is None:
            raise ConfigError(f"--input {argument}: not one of {listing}; rename it or convert it")
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and input_kind(p) is not None)
        if not found:
            raise ConfigError(f"--input {argument}: the folder holds no {listing} file")
        return found
    if glob.has_magic(argument):
        matches = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        found = [p for p in matches if input_kind(p) is not None]
        if not found:
            raise ConfigError(f"--input {argument}: the pattern matches no {listing} file")
        return found
    raise ConfigError(f"--input {argument}: no such file or folder")


def input_files(arguments: list[str]) -> list[Path]:
    """The absolute paths of every file the ``--input`` arguments name, in the order they are read.

    Example::

        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> for name in ("b.jsonl", "a.txt", "skip.md"):
        ...     _ = (folder / name).write_text("x")
        >>> [p.name for p in input_files([str(folder), str(folder / "b.jsonl")])]
        ['a.txt', 'b.jsonl']
    """
    files: dict[Path, None] = {}
    for argument in arguments:
        for path in _expand(argument):
            files.setdefault(path.resolve(), None)
    return list(files)

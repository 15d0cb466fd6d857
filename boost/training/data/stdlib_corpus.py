"""The ``.py`` sources of the running interpreter's standard library as a text corpus.

Present on every machine and identical wherever the Python version is, so a run needs no network.
A file goes to validation when the SHA-1 of its relative path is 0 mod 50 (~2% of files), so the
split never depends on the file system's listing order. Packages that are not library code
(``site-packages``, test suites, ``idlelib``, ``lib2to3``) are left out.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sysconfig
from pathlib import Path

_EXCLUDED_STDLIB_DIRS = frozenset({"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__"})
_VALIDATION_MODULUS = 50  # 1 file in 50 → ~2% validation


def stdlib_root() -> Path:
    """The running interpreter's standard-library folder (the base one, also inside a venv)."""
    return Path(sysconfig.get_paths()["stdlib"])


def _path_hash(relative_path: str) -> int:
    # SHA-1 rather than hash(): Python salts str hashes per process.
    return int.from_bytes(hashlib.sha1(relative_path.encode()).digest()[:8], "big")


def is_validation_file(relative_path: str) -> bool:
    """Whether a stdlib file (posix path relative to :func:`stdlib_root`) is in the validation split."""
    return _path_hash(relative_path) % _VALIDATION_MODULUS == 0


@functools.cache
def _stdlib_relative_paths() -> tuple[str, ...]:
    # Cached: the tokenizer's cache key needs the list too. The excluded folders are never entered:
    # the interpreter's own site-packages and test suite hold far more files than the library.
    root = stdlib_root()
    paths = []
    for folder, subfolders, files in os.walk(root, followlinks=True):
        subfolders[:] = [name for name in subfolders if name not in _EXCLUDED_STDLIB_DIRS]
        relative = Path(folder).relative_to(root)
        paths += [(relative / name).as_posix() for name in files if name.endswith(".py")]
    return tuple(sorted(paths, key=lambda p: (_path_hash(p), p)))


def stdlib_files(split: str) -> list[str]:
    """Relative posix paths of the stdlib ``.py`` files in ``split`` ("train" or "validation").

    The order is fixed but pseudo-random (sorted by path hash), not alphabetical: torchtitan gives
    each data-parallel rank a contiguous shard, and the tokenizer trains on a prefix, and both
    should see every package rather than the alphabetically first ones.
    """
    if split not in ("train", "validation"):
        raise ValueError(f"stdlib split must be 'train' or 'validation', got {split!r}")
    want_validation = split == "validation"
    return [p for p in _stdlib_relative_paths() if is_validation_file(p) == want_validation]


def read_stdlib_file(relative_path: str) -> str:
    """The text of one stdlib file (a path from :func:`stdlib_files`)."""
    # A handful of stdlib files carry latin-1 bytes; replacing them keeps the corpus decodable.
    return (stdlib_root() / relative_path).read_text(encoding="utf-8", errors="replace")


def stdlib_texts(split: str) -> list[str]:
    """Every document of the ``split``, one per source file, in :func:`stdlib_files` order."""
    return [read_stdlib_file(p) for p in stdlib_files(split)]


def stdlib_paragraphs(split: str, count: int, min_chars: int = 40, max_chars: int = 400) -> list[str]:
    """The first ``count`` paragraphs (blocks between blank lines) of ``min_chars``-``max_chars`` characters of
    the ``split``'s files, in :func:`stdlib_files` order: short documents, several to a training window, where
    a document mask (``boost.attn_mask_type = "block_causal"``) changes what a token attends to.

    Example::

        >>> docs = stdlib_paragraphs("validation", 3)
        >>> len(docs), all(40 <= len(d) <= 400 for d in docs)
        (3, True)
    """
    paragraphs: list[str] = []
    for path in stdlib_files(split):
        text = read_stdlib_file(path)
        paragraphs += [p for p in re.split(r"\n\s*\n", text) if min_chars <= len(p) <= max_chars]
        if len(paragraphs) >= count:
            break
    return paragraphs[:count]

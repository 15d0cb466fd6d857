"""A prepared token folder: a corpus tokenized once (``python -m boost.training.data.prepare``), read by memory map.

::

    DIR/
      manifest.json          written last and atomically: a folder without it is not a dataset
      train-00000.bin        token ids of whole documents, flat, little-endian uint16 (vocabulary of
      train-00000.idx        at most 2^16 ids) or uint32; the .idx is int64: each document's first
      ...                    token's offset in the .bin, then the shard's token count (documents + 1)
      validation-00000.bin   documents held out with --validation-fraction (same layout), never in train
      validation-00000.idx

Every document is framed as the trainer frames text, ``[BOS] ids [EOS]`` (BOS where the run's
tokenizer adds one), so a split's tokens in shard order are the stream torchtitan's packing dataset
would build from the same texts. The manifest records the tokenizer (the fingerprint a checkpoint
records, ``boost.training.data.tokenizer_fingerprint``), its vocabulary and special ids, the dtype, per split
its shards with token and document counts and the largest id, and each input file with its size: the
preflight decides from it alone whether a run can read the folder, without opening a shard.

``read_manifest`` refuses a folder that is not a finished prepare, naming the field, the folder and
the fix; ``TokenSplit`` is one split as a flat sequence over its shards, memory-mapped, so reading it
costs the pages touched and nothing grows with the corpus.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from boost.training.config_error import ConfigError, refuse

if TYPE_CHECKING:
    import torch

FORMAT = "boost-tokens"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "validation")
# file dtype name (torch's name of it too) -> bytes per token
DTYPES = {"uint16": 2, "uint32": 4}
PREPARE_COMMAND = "python -m boost.training.data.prepare --config TOML --input CORPUS --output DIR"


def token_dtype(vocab_size: int) -> str:
    """The narrowest file dtype that holds every id of a ``vocab_size`` vocabulary.

    Example::

        >>> token_dtype(32000), token_dtype(128256)
        ('uint16', 'uint32')
    """
    return "uint16" if vocab_size <= 2**16 else "uint32"


def shard_name(split: str, index: int) -> str:
    """The file stem of a split's ``index``-th shard (``train-00003``); ``.bin`` and ``.idx`` follow it."""
    return f"{split}-{index:05d}"


@dataclass(frozen=True)
class Shard:
    name: str
    """File stem: ``<name>.bin`` holds the tokens, ``<name>.idx`` the document offsets."""
    tokens: int
    documents: int


@dataclass(frozen=True)
class Split:
    shards: tuple[Shard, ...]
    max_token_id: int
    """The largest id in the split (-1 when it is empty): the preflight holds it below the model's vocabulary."""

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.shards)


@dataclass(frozen=True)
class InputFile:
    path: str
    """As given to prepare, resolved to an absolute path."""
    bytes: int
    documents: int
    """Documents taken from it (both splits)."""
    skipped: int = 0
    """Records refused and skipped under ``--skip-bad``."""


@dataclass(frozen=True)
class Manifest:
    tokenizer: str
    """``sha256:...`` of the tokenizer folder's files (``boost.training.data.tokenizer_fingerprint``)."""
    tokenizer_path: str
    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    dtype: str
    splits: dict[str, Split]
    inputs: tuple[InputFile, ...]
    text_field: str = "text"
    validation_fraction: float = 0.0
    format: str = FORMAT
    version: int = FORMAT_VERSION

    @property
    def skipped(self) -> int:
        return sum(f.skipped for f in self.inputs)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> Manifest:
        """``ValueError`` or ``TypeError`` where ``text`` is not a manifest (``read_manifest`` says which)."""
        raw = json.loads(text)
        if not isinstance(raw, dict) or not isinstance(raw.get("dtype"), str):
            raise ValueError("not a manifest object with a dtype string")
        splits = {
            name: Split(tuple(Shard(**s) for s in split["shards"]), split["max_token_id"])
            for name, split in raw.pop("splits").items()
        }
        inputs = tuple(InputFile(**f) for f in raw.pop("inputs"))
        return Manifest(splits=splits, inputs=inputs, **raw)


class ShardWriter:
    """A shard written as its documents come, a batch at a time: ``commit`` makes it whole at once.

    Tokens go to ``.<name>.bin.tmp`` as they arrive (memory holds only the document offsets, 8 bytes
    a document); ``commit`` writes the ``.idx``, flushes both to disk and renames them to their final
    names, so a shard file of the final name is always complete. ``abandon`` removes the staging files.

    Example::

        >>> import tempfile
        >>> from array import array
        >>> writer = ShardWriter(tempfile.mkdtemp(), "train-00000", "uint16")
        >>> writer.append(array("H", [0, 17, 1, 0, 5, 9, 1]), [3, 4])  # two documents back to back
        >>> writer.commit()
        Shard(name='train-00000', tokens=7, documents=2)
    """

    def __init__(self, folder: str | Path, name: str, dtype: str):
        folder = Path(folder)
        self.name = name
        self._typecode = {"uint16": "H", "uint32": "I"}[dtype]
        self._bin_path, self._idx_path = folder / f"{name}.bin", folder / f"{name}.idx"
        self._bin_staging = folder / f".{name}.bin.tmp"
        self._idx_staging = folder / f".{name}.idx.tmp"
        self._offsets = array("q", [0])
        self._out = self._bin_staging.open("wb")

    @property
    def tokens(self) -> int:
        return self._offsets[-1]

    def append(self, tokens: Sequence[int], lengths: Iterable[int]) -> None:
        """Add documents: ``tokens`` holds their ids back to back, ``lengths`` each one's count.

        An ``array`` of the shard's typecode is written as it is; an id the dtype cannot hold raises
        ``OverflowError``."""
        ids = tokens if isinstance(tokens, array) and tokens.typecode == self._typecode else None
        if ids is None or sys.byteorder != "little":
            ids = array(self._typecode, tokens)
            if sys.byteorder != "little":
                ids.byteswap()
        start = end = self._offsets[-1]
        for length in lengths:
            end += length
            self._offsets.append(end)
        if end - start != len(ids):
            raise ValueError(f"{self.name}: lengths sum to {end - start}, but {len(ids)} tokens were given")
        ids.tofile(self._out)

    def commit(self) -> Shard:
        """Write the ``.idx``, then rename both files to their final names; the shard's record."""
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        offsets = array("q", self._offsets)
        if sys.byteorder != "little":
            offsets.byteswap()
        with self._idx_staging.open("wb") as out:
            offsets.tofile(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(self._bin_staging, self._bin_path)
        os.replace(self._idx_staging, self._idx_path)
        return Shard(self.name, self.tokens, len(self._offsets) - 1)

    def abandon(self) -> None:
        """Close and remove the staging files (nothing of the final name is touched)."""
        self._out.close()
        self._bin_staging.unlink(missing_ok=True)
        self._idx_staging.unlink(missing_ok=True)


def write_shard(folder: str | Path, name: str, documents: Iterable[Sequence[int]], dtype: str) -> Shard:
    """Write ``<name>.bin`` and ``<name>.idx`` from whole framed documents (lists of ids); return its record.

    Written under temporary names and renamed, so a shard file of the final name is always complete.

    Example::

        >>> import tempfile
        >>> write_shard(tempfile.mkdtemp(), "train-00000", [[0, 17, 1], [0, 5, 9, 1]], "uint16")
        Shard(name='train-00000', tokens=7, documents=2)
    """
    writer = ShardWriter(folder, name, dtype)
    try:
        for document in documents:
            writer.append(document, [len(document)])
    except BaseException:
        writer.abandon()
        raise
    return writer.commit()


def write_manifest(folder: str | Path, manifest: Manifest) -> None:
    """Write ``manifest.json`` atomically, after every shard it names is on disk: its presence is what
    makes the folder a dataset."""
    target = Path(folder) / MANIFEST
    staging = target.with_name(f".{MANIFEST}.tmp")
    with staging.open("w") as f:
        f.write(manifest.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(staging, target)


def read_manifest(folder: str | Path, field: str) -> Manifest:
    """The manifest of a finished prepare at ``folder``; anything else is refused naming ``field``
    (``training.dataset_path``), the folder and the fix. Reads no shard, only their sizes."""
    path = Path(folder).expanduser()
    if path.is_file():  # a corpus file named where its prepared folder belongs
        refuse(
            field,
            str(folder),
            "is a file, not a prepared token folder: prepare it into a folder first "
            f'({PREPARE_COMMAND}), or read it as text with dataset = "local"',
        )
    if not path.is_dir():
        refuse(field, str(folder), f"no such folder; prepare a corpus into it first: {PREPARE_COMMAND}")
    manifest_file = path / MANIFEST
    if not manifest_file.is_file():
        refuse(
            field,
            str(folder),
            f"not a finished prepare (no {MANIFEST}): run {PREPARE_COMMAND} with this folder as DIR "
            "(a re-run continues an interrupted one)",
        )
    try:
        manifest = Manifest.from_json(manifest_file.read_text())
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        refuse(
            field,
            str(folder),
            f"its {MANIFEST} cannot be read ({e}); prepare the corpus again into a new DIR",
        )
    if manifest.format != FORMAT or manifest.version != FORMAT_VERSION:
        refuse(
            field,
            str(folder),
            f"{MANIFEST} is format {manifest.format!r} v{manifest.version}, this BOOST reads {FORMAT!r} "
            f"v{FORMAT_VERSION}: prepare the corpus again with this BOOST",
        )
    if manifest.dtype not in DTYPES:
        refuse(field, str(folder), f"{MANIFEST} names dtype {manifest.dtype!r}, not one of {sorted(DTYPES)}")
    itemsize = DTYPES[manifest.dtype]
    for split in manifest.splits.values():
        for shard in split.shards:
            for suffix, size in ((".bin", shard.tokens * itemsize), (".idx", (shard.documents + 1) * 8)):
                file = path / (shard.name + suffix)
                actual = file.stat().st_size if file.is_file() else None
                if actual != size:
                    found = "is missing" if actual is None else f"has {actual} bytes"
                    raise ConfigError(
                        f"{field} = {str(folder)!r}: {file.name} {found}, the manifest says {size}: the folder "
                        f"was changed after prepare; prepare the corpus again into a new DIR"
                    )
    return manifest


class TokenSplit:
    """One split of a token folder as one flat sequence of ids, over its shards in order, memory-mapped.

    Example::

        >>> split = TokenSplit(folder, read_manifest(folder, "training.dataset_path"), "train")  # doctest: +SKIP
        >>> split.read(0, 2049).shape  # doctest: +SKIP
        torch.Size([2049])
    """

    def __init__(self, folder: str | Path, manifest: Manifest, split: str):
        import torch  # here: the preflight reads manifests (this module) before torch loads

        self.folder = Path(folder).expanduser()
        self.manifest = manifest
        shards = [s for s in manifest.splits[split].shards if s.tokens > 0]
        self._names = [s.name for s in shards]
        self._max_token_id = manifest.splits[split].max_token_id
        torch_dtype = getattr(torch, manifest.dtype)
        # torch.from_file maps the file (MAP_PRIVATE) and keeps no descriptor: a thousand shards are fine.
        self._maps = [
            torch.from_file(
                str(self.folder / f"{s.name}.bin"), shared=False, size=s.tokens, dtype=torch_dtype
            )
            for s in shards
        ]
        self._starts = [0]
        for s in shards:
            self._starts.append(self._starts[-1] + s.tokens)

    def __len__(self) -> int:
        return self._starts[-1]

    def read(self, start: int, length: int) -> torch.Tensor:
        """Ids ``[start, start + length)`` of the split as int64 (a window may span shards)."""
        import torch

        if start < 0 or start + length > len(self):
            raise IndexError(f"tokens [{start}, {start + length}) of a split of {len(self)}")
        pieces = []
        shard = _shard_of(self._starts, start)
        while length > 0:
            offset = start - self._starts[shard]
            take = min(length, self._starts[shard + 1] - start)
            piece = self._maps[shard][offset : offset + take].to(torch.int64)
            # a shard whose bytes changed after prepare (its size, which the preflight checks, unchanged):
            # an id past the embedding stops the step with an IndexError, on a GPU a device-side assert
            if int(piece.max()) > self._max_token_id:
                raise ValueError(
                    f"{self.folder / self._names[shard]}.bin holds token id {int(piece.max())} at tokens "
                    f"{offset}..{offset + take} of its {self._starts[shard + 1] - self._starts[shard]}, above the "
                    f"largest id prepare wrote ({self._max_token_id}): the shard was changed after prepare; "
                    "prepare the corpus again into a new DIR"
                )
            pieces.append(piece)
            start, length, shard = start + take, length - take, shard + 1
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _shard_of(starts: list[int], position: int) -> int:
    """The index ``i`` with ``starts[i] <= position < starts[i + 1]`` (binary search)."""
    lo, hi = 0, len(starts) - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= position:
            lo = mid
        else:
            hi = mid - 1
    return lo

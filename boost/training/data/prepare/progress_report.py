"""What a prepare tells its user: a progress bar while it runs, one summary line when it ends.

The bar counts input bytes (compressed bytes for ``.gz``: how far into each file reading has come),
which is what the ETA needs; documents, tokens and tokens/s ride beside it. It is drawn on a
terminal only (tqdm's rule), so a batch job's log holds the summary line alone.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from boost.training.data.token_folder import Manifest


def _count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


class PrepareProgress:
    """The bar over ``total_bytes`` of input; ``update`` after each batch of any worker."""

    def __init__(self, total_bytes: int, files: int, show: bool | None = None):
        self.documents = self.tokens = 0
        self.started = time.monotonic()
        self._total, self._files, self._show = total_bytes, files, show
        self.bar: tqdm | None = None

    def _open(self) -> tqdm:
        # Opened at the first batch, after the workers are forked: tqdm may start a monitor thread.
        return tqdm(
            total=self._total,
            unit="B",
            unit_scale=True,
            desc=f"prepare {self._files} file{'s' * (self._files != 1)}",
            disable=None if self._show is None else not self._show,
            file=sys.stderr,
            mininterval=0.5,
            bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}B/{total_fmt}B [{elapsed}<{remaining}{postfix}]",
        )

    def update(self, documents: int, tokens: int, bytes_read: int) -> None:
        if self.bar is None:
            self.bar = self._open()
        self.documents += documents
        self.tokens += tokens
        rate = self.tokens / max(time.monotonic() - self.started, 1e-9)
        self.bar.set_postfix_str(
            f"{_count(self.documents)} docs, {_count(self.tokens)} tokens, {_count(rate)} tokens/s",
            refresh=False,
        )
        self.bar.update(bytes_read)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def summary_line(manifest: Manifest, output: str, elapsed: float, tokens_now: int, files_before: int) -> str:
    """One line: what the folder holds, how long this run took and at what rate.

    Example::

        >>> from boost.training.data.token_folder import InputFile, Shard, Split
        >>> m = Manifest("sha256:0", "/tok", 32000, 1, 2, "uint16",
        ...     {"train": Split((Shard("train-00000", 900, 9),), 31999), "validation": Split((), -1)},
        ...     (InputFile("/c/a.json.gz", 4000, 9, skipped=1),))
        >>> summary_line(m, "/out", 2.0, 900, 0)
        'prepared 1 file (4.0kB): 900 tokens in 9 documents (uint16), 1 skipped, in 0m02s (450 tokens/s) -> /out'
    """
    files = len(manifest.inputs)
    size = sum(f.bytes for f in manifest.inputs)
    train, validation = manifest.splits["train"], manifest.splits.get("validation")
    held = (
        f"; validation: {_count(validation.tokens)} tokens in {_count(validation.documents)} documents"
        if validation is not None and validation.documents
        else ""
    )
    resumed = f", {files_before} file{'s' * (files_before != 1)} done before" if files_before else ""
    return (
        f"prepared {files} file{'s' * (files != 1)} ({_count(size)}B): {_count(train.tokens)} tokens in "
        f"{_count(train.documents)} documents ({manifest.dtype}){held}, {manifest.skipped} skipped, in "
        f"{_duration(elapsed)} ({_count(tokens_now / max(elapsed, 1e-9))} tokens/s{resumed}) -> {output}"
    )

"""The GPU's busy fraction over a run's steady steps: nvidia-smi samples matched to the steps' log times.

``nvidia-smi --id=0 --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits --loop-ms=100`` runs beside
the trainer (:class:`BusySampler`); each sample is the percentage of the driver's last sample period
in which a kernel ran on the GPU, stamped with the local time (``2026/11/26 08:17:43.290``). The steady
steps' window runs from the log line of the step before the first steady one (a ``step:`` line is
written when its step ends) to the last step's line; the busy fraction is the mean of the samples
inside it (:func:`busy_fraction`). A sample period (1/6 s to 1 s by product) may straddle the window's
edges: with tens of samples per window that blurs the figure by a few percent at most.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import threading

QUERY = ["--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits"]


def parse_sample(line: str) -> tuple[float, float] | None:
    """``(seconds since the epoch, busy %)`` of one nvidia-smi CSV line, or None for anything else."""
    stamp, _, value = line.rpartition(",")
    try:
        when = datetime.datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return when, float(value.strip())
    except ValueError:
        return None


def busy_fraction(samples: list[tuple[float, float]], start: float, end: float) -> tuple[float, int] | None:
    """The mean busy fraction (0–1) of the samples taken in ``(start, end]`` and how many there were;
    None when no sample fell inside (a window shorter than the sample period)."""
    inside = [pct for when, pct in samples if start < when <= end]
    if not inside:
        return None
    return sum(inside) / len(inside) / 100, len(inside)


def gpu_index() -> str:
    """The physical GPU a run on device 0 uses: the first of ``CUDA_VISIBLE_DEVICES``, else 0."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return first or "0"


class BusySampler:
    """nvidia-smi sampling the GPU every ``period_ms`` in the background, for a ``with`` block."""

    def __init__(self, period_ms: int = 100):
        self.cmd = ["nvidia-smi", f"--id={gpu_index()}", *QUERY, f"--loop-ms={period_ms}"]
        self.samples: list[tuple[float, float]] = []
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self.error: str | None = None  # why there are no samples (no nvidia-smi), for the table

    def __enter__(self) -> BusySampler:
        try:
            self._proc = subprocess.Popen(
                self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
        except OSError as e:
            self.error = f"nvidia-smi: {e.strerror}"
            return self
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            sample = parse_sample(line)
            if sample is not None:
                self.samples.append(sample)

    def __exit__(self, *exc) -> None:
        if self._proc is None or self._reader is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=10)

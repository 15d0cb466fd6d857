"""The GPU's busy fraction over a run's steady steps: NVML samples matched to the steps' log times.

:class:`BusySampler` polls NVML's ``nvmlDeviceGetUtilizationRates`` (the number ``nvidia-smi
--query-gpu=utilization.gpu`` prints: the percentage of the driver's last sample period in which a
kernel ran) every 100 ms from a thread of the report's own process, which touches no CUDA context,
stamping each sample with ``time.time()``. NVML through ctypes, not nvidia-smi through a pipe: no
output buffering between the sample and its stamp, no package beyond the driver's library. The
steady steps' window runs from the log line of the step before the first steady one (a ``step:``
line is written when its step ends) to the last step's line; the busy fraction is the mean of the
samples inside it (:func:`busy_fraction`). The driver's sample period (1/6 s to 1 s by product) may
straddle the window's edges: over a window of seconds that blurs the figure by a few percent at most.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


def busy_fraction(samples: list[tuple[float, float]], start: float, end: float) -> tuple[float, int] | None:
    """The mean busy fraction (0–1) of the samples taken in ``(start, end]`` and how many there were;
    None when no sample fell inside (a window shorter than the sample period)."""
    inside = [pct for when, pct in samples if start < when <= end]
    if not inside:
        return None
    return sum(inside) / len(inside) / 100, len(inside)


def gpu_index() -> int:
    """The physical GPU (NVML's index) a run on device 0 uses: the first of ``CUDA_VISIBLE_DEVICES``, else 0."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


class BusySampler:
    """NVML sampling the GPU's busy percentage every ``period_s`` in a background thread, for a ``with``
    block; ``samples`` holds ``(time.time(), percent)``, ``error`` says why it is empty."""

    def __init__(self, period_s: float = 0.1):
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> BusySampler:
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() != 0:
                raise OSError("nvmlInit failed")
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(gpu_index(), ctypes.byref(handle)) != 0:
                raise OSError(f"no GPU {gpu_index()}")
        except (OSError, AttributeError) as e:
            self.error = f"NVML: {e}"
            return self
        self._thread = threading.Thread(target=self._poll, args=(nvml, handle), daemon=True)
        self._thread.start()
        return self

    def _poll(self, nvml, handle) -> None:
        rates = _Utilization()
        while not self._stop.wait(self.period_s):
            if nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) == 0:
                self.samples.append((time.time(), float(rates.gpu)))
        nvml.nvmlShutdown()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

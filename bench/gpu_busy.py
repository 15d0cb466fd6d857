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


def visible_gpu(environ: dict[str, str] | None = None) -> int | str | None:
    """The physical GPU a run on device 0 uses, as NVML finds it: the first entry of
    ``CUDA_VISIBLE_DEVICES`` (an index, or a ``GPU-…`` UUID), GPU 0 where the variable is unset, and
    None where it hides every GPU (empty, or a negative index: CUDA sees no device from there on)."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" not in environ:
        return 0
    first = environ["CUDA_VISIBLE_DEVICES"].split(",")[0].strip()
    if first.isdigit():
        return int(first)
    return first if first.startswith(("GPU-", "MIG-")) else None


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
        gpu = visible_gpu()
        if gpu is None:  # the run sees no GPU: sampling one it cannot use would measure another run
            self.error = f"NVML: CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
            return self
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() != 0:
                raise OSError("nvmlInit failed")
            handle = ctypes.c_void_p()
            found = (
                nvml.nvmlDeviceGetHandleByIndex_v2(gpu, ctypes.byref(handle))
                if isinstance(gpu, int)
                else nvml.nvmlDeviceGetHandleByUUID(gpu.encode(), ctypes.byref(handle))
            )
            if found != 0:
                raise OSError(f"no GPU {gpu}")
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

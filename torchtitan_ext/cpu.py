"""Let torchtitan's own trainer run on a machine with no accelerator (CPU tensors, gloo).

torchtitan 0.2.2 fixes ``device_type = _get_available_device_type() or "cuda"`` when
``torchtitan.tools.utils`` is imported, and its other modules copy that value. ``torchtitan_ext``'s
``__init__`` imports this module, so it runs before any torchtitan module BOOST imports: on a machine
with no accelerator it makes that one import see ``"cpu"`` and a CPU device module whose memory
statistics come from the process's peak RSS. The trainer, parallel dims (gloo is torch's default CPU
backend), checkpointing and metrics are then torchtitan's, unchanged. On a machine with an accelerator
this module does nothing.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import types

import torch
import torch._utils

_ON_CPU = torch._utils._get_available_device_type() is None


class _CPUMemory:
    """``device_module.memory``: CPU has no caching allocator, so there is no history to record."""

    @staticmethod
    def _record_memory_history(*args, **kwargs) -> None:
        return None

    @staticmethod
    def _snapshot(*args, **kwargs) -> dict:
        return {"segments": [], "device_traces": [], "note": "CPU: no caching-allocator snapshot"}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class CPUDeviceModule(types.ModuleType):
    """Stand-in for ``torch.cuda`` with the calls torchtitan's trainer and metrics make."""

    memory = _CPUMemory()

    def __init__(self) -> None:
        super().__init__("boost_cpu_device")

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)

    @staticmethod
    def set_device(device) -> None:
        return None

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def get_device_name(device=None) -> str:
        return f"CPU {platform.processor() or platform.machine()}"

    @staticmethod
    def get_device_properties(device=None):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return types.SimpleNamespace(total_memory=total, name="CPU")

    @staticmethod
    def memory_stats(device=None) -> dict:
        peak = peak_rss_bytes()
        return {
            "active_bytes.all.peak": peak,
            "reserved_bytes.all.peak": peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        return None  # the kernel's peak RSS cannot be reset; the logged peak is since process start

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def synchronize(device=None) -> None:
        return None


class _ProfileWithoutNone(torch.profiler.profile):
    # torchtitan lists [CPU, <gpu activity or None>]; torch rejects the None.
    def __init__(self, *args, activities=None, **kwargs):
        if activities is not None:
            activities = [a for a in activities if a is not None]
        super().__init__(*args, activities=activities, **kwargs)


_COPIES = (  # torchtitan modules that copy device_type / device_module at their import
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.tools.profiling",
)


def install() -> bool:
    """Apply the adaptation if there is no accelerator; return whether the trainer will use the CPU."""
    if not _ON_CPU:
        return False
    device_module = CPUDeviceModule()
    if "torchtitan.tools.utils" not in sys.modules:
        saved = torch._utils._get_available_device_type, torch._utils._get_device_module
        torch._utils._get_available_device_type = lambda: "cpu"
        torch._utils._get_device_module = lambda device_type=None: device_module
        try:
            import torchtitan.tools.utils  # noqa: F401  (captures "cpu" and the stand-in)
        finally:
            torch._utils._get_available_device_type, torch._utils._get_device_module = saved
    # torchtitan may have been imported first (e.g. by a test process): fix the copies it made.
    for name in _COPIES:
        module = sys.modules.get(name)
        if module is not None:
            if getattr(module, "device_type", "cpu") != "cpu":
                module.device_type = "cpu"
            if hasattr(module, "device_module") and not isinstance(module.device_module, CPUDeviceModule):
                module.device_module = device_module
    torch.profiler.profile = _ProfileWithoutNone
    return True


install()

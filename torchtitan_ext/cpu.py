"""Let torchtitan's own trainer run on a machine with no accelerator (CPU tensors, gloo).

torchtitan 0.2.2 fixes ``device_type = _get_available_device_type() or "cuda"`` when
``torchtitan.tools.utils`` is imported, and its other modules copy that value. ``torchtitan_ext``'s
``__init__`` calls :func:`install_at_torchtitan_import`: from then on, the moment that module is
imported (by whoever imports torchtitan first), on a machine with no accelerator its body sees
``"cpu"`` and a CPU device module whose memory statistics come from the process's peak RSS. The
trainer, parallel dims (gloo is torch's default CPU backend), checkpointing and metrics are then
torchtitan's, unchanged. On a machine with an accelerator this module changes nothing.

The adaptation waits for torchtitan's import rather than running at ``import torchtitan_ext``: the
launcher imports this package to read a job, and refuses a bad one before torch loads.

Also on CPU: torchtitan's peak-FLOPs lookup runs ``lspci`` (to tell H100 variants apart) and logs an
error where there is none; a CPU is no GPU, so the lookup goes straight to torchtitan's fallback.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import logging
import os
import platform
import resource
import sys
import types
from contextlib import contextmanager

DEVICE_MODULE = "torchtitan.tools.utils"  # where torchtitan fixes its device type
# torchtitan's peak for a device it does not know (the A100's bf16 peak): MFU on a CPU is meaningless
A100_PEAK_FLOPS = 312e12

_COPIES = (  # torchtitan modules that copy device_type / device_module at their import
    "torchtitan.tools.utils",
    "torchtitan.components.metrics",
    "torchtitan.distributed.utils",
    "torchtitan.distributed.parallel_dims",
    "torchtitan.tools.profiling",
)


def on_cpu() -> bool:
    """Whether this machine has no accelerator torch can use."""
    import torch._utils

    return torch._utils._get_available_device_type() is None


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
        import torch

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


def _profile_without_none():
    import torch

    class ProfileWithoutNone(torch.profiler.profile):
        # torchtitan lists [CPU, <gpu activity or None>]; torch rejects the None.
        def __init__(self, *args, activities=None, **kwargs):
            if activities is not None:
                activities = [a for a in activities if a is not None]
            super().__init__(*args, activities=activities, **kwargs)

    return ProfileWithoutNone


def cpu_peak_flops(device_name: str) -> float:
    """torchtitan's ``get_peak_flops`` for a CPU: its fallback, without running ``lspci`` first."""
    _say_peak_flops(device_name)
    return A100_PEAK_FLOPS


@functools.cache
def _say_peak_flops(device_name: str) -> None:
    # once: the trainer and its metrics processor both ask; torchtitan's logger is the root logger
    logging.getLogger().info(
        f"Peak FLOPs: {device_name} is no GPU; MFU uses the A100's {A100_PEAK_FLOPS:.3e} (meaningless on a CPU)"
    )


@contextmanager
def _sees_cpu(device_module: CPUDeviceModule):
    """torch's device probe answers "cpu" and the stand-in, inside the block only."""
    import torch._utils

    saved = torch._utils._get_available_device_type, torch._utils._get_device_module
    torch._utils._get_available_device_type = lambda: "cpu"
    torch._utils._get_device_module = lambda device_type=None: device_module
    try:
        yield
    finally:
        torch._utils._get_available_device_type, torch._utils._get_device_module = saved


def _adapt_loaded(device_module: CPUDeviceModule) -> None:
    """Fix what torchtitan's loaded modules copied, and the process-wide replacements."""
    import torch

    for name in _COPIES:
        module = sys.modules.get(name)
        if module is not None:
            if getattr(module, "device_type", "cpu") != "cpu":
                module.device_type = "cpu"
            if hasattr(module, "device_module") and not isinstance(module.device_module, CPUDeviceModule):
                module.device_module = device_module
    # the trainer and the metrics processor call it as utils.get_peak_flops: the module's attribute
    sys.modules[DEVICE_MODULE].get_peak_flops = cpu_peak_flops
    if not getattr(torch.profiler.profile, "boost_filters_none", False):
        torch.profiler.profile = _profile_without_none()
        torch.profiler.profile.boost_filters_none = True


def install() -> bool:
    """Apply the adaptation now if there is no accelerator (importing torchtitan's device module);
    return whether the trainer will use the CPU."""
    if not on_cpu():
        return False
    device_module = CPUDeviceModule()
    if DEVICE_MODULE not in sys.modules:
        with _sees_cpu(device_module):
            importlib.import_module(DEVICE_MODULE)  # captures "cpu" and the stand-in
    _adapt_loaded(device_module)  # torchtitan may have been imported first (e.g. by a test process)
    return True


class _AdaptingLoader(importlib.abc.Loader):
    """torchtitan's loader for its device module, run with torch's device probe answering "cpu"."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        if not on_cpu():
            self.loader.exec_module(module)
            return
        device_module = CPUDeviceModule()
        with _sees_cpu(device_module):
            self.loader.exec_module(module)
        _adapt_loaded(
            device_module
        )  # the import system recorded the module in sys.modules before its body ran

    def __getattr__(self, name: str):  # get_source, get_filename, ...: the real loader's
        return getattr(self.loader, name)


class _AdaptAtImport(importlib.abc.MetaPathFinder):
    """Finds torchtitan's device module as the other finders do, and gives it the adapting loader."""

    def find_spec(self, fullname, path, target=None):
        if fullname != DEVICE_MODULE:
            return None
        sys.meta_path.remove(self)  # once; and the lookup below must not find this finder again
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _AdaptingLoader(spec.loader)
        return spec


def install_at_torchtitan_import() -> None:
    """Adapt torchtitan to the CPU when its device module is imported (now, if it already is)."""
    if DEVICE_MODULE in sys.modules:
        install()
    elif not any(isinstance(finder, _AdaptAtImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AdaptAtImport())

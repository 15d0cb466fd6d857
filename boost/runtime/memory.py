"""Activation memory on CPU: resident memory held between the end of a forward and its backward.

CPU tensors have no caching-allocator statistics, so the measure is the process's current resident
set size (``/proc/self/statm``) after the forward minus before it. Run with
``MALLOC_MMAP_THRESHOLD_=65536`` in the environment (the benchmarks and tests do) so that glibc
serves every activation-sized block by mmap and returns it on free: RSS then tracks live tensors.
"""

from __future__ import annotations

import os


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def forward_held_bytes(forward) -> tuple[object, int]:
    """Run ``forward()`` and return its result with the resident bytes it left allocated."""
    before = current_rss_bytes()
    out = forward()
    return out, current_rss_bytes() - before

"""Measure this machine for ``CPU_GLOO`` (``boost.planning.perf_model.hardware``): fp32 GEMM FLOP/s, copy
bandwidth, and gloo all-reduce latency and bus bandwidth between 2 local processes.

Slow (seconds, spawns 2 processes); never run by the tests. By hand::

    python -c "from boost.planning.perf_model import calibrate_cpu; print(calibrate_cpu())"

then copy the numbers into ``CPU_GLOO`` with the date.
"""

from __future__ import annotations


def calibrate_cpu(size: int = 1024, repeats: int = 5) -> dict[str, float]:
    """Measure this machine for ``CPU_GLOO``: fp32 GEMM FLOP/s, copy bandwidth, gloo all-reduce
    latency and bus bandwidth between 2 local processes. Slow (seconds); never run by the tests."""
    import os
    import tempfile
    import time

    import torch
    import torch.multiprocessing as mp

    def best_of(fn):
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    a, b = torch.randn(size, size), torch.randn(size, size)
    flops = 2 * size**3 / best_of(lambda: torch.matmul(a, b))
    big = torch.randn(32 * 2**20 // 4)
    mem_bw = 2 * big.numel() * 4 / best_of(lambda: big.clone())
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "gloo.pt")
        mp.spawn(_gloo_worker, args=(2, os.path.join(tmp, "store"), out, repeats), nprocs=2, join=True)
        latency, bus_bw = torch.load(out)
    return {"peak_flops": flops, "mem_bw": mem_bw, "latency": latency, "bus_bw": bus_bw}


def _gloo_worker(rank: int, world: int, store: str, out: str, repeats: int) -> None:
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)

    def timed(n):
        x = torch.ones(n)
        dist.all_reduce(x)
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            best = min(best, time.perf_counter() - t0)
        return best

    small, n = timed(1), 8 * 2**20
    large = timed(n)
    bus_bw = 2 * (world - 1) / world * n * 4 / max(large - small, 1e-9)
    if rank == 0:
        torch.save((small, bus_bw), out)
    dist.destroy_process_group()

"""Run a test body on N real gloo processes on this machine (no mocks of torch.distributed)."""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from boost.runtime.process_exit import exit_finished_process

# The ranks fork from one server process that imported these once (multiprocessing's forkserver,
# started on first use): a rank then costs a fork, not a Python start and torch's import. Each rank
# starts from the state right after these imports, as fresh as a spawned one, and nothing a rank
# does reaches the next; only the environment is the server's (it starts with the session's).
PRELOAD = [
    "torch",
    "torch.distributed.tensor",
    "torch.distributed.tensor.parallel",
    "torch.distributed.fsdp",
    "boost",
    "boost.training.parallel",
    "torchtitan_ext.infra.parallelize",
    "tests.distributed",
]


def _worker(rank: int, world_size: int, init_file: str, fn, args, error_dir: str) -> None:
    # a rank that dies on a signal (a heap corruption in a collective) leaves where it was, all threads
    faulthandler.enable(open(os.path.join(error_dir, f"rank{rank}-signal.txt"), "w"), all_threads=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    except BaseException:
        with open(os.path.join(error_dir, f"rank{rank}.txt"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()
    exit_finished_process()  # a passing rank: gloo can abort in interpreter finalisation


def run_distributed(fn, world_size: int, *args, start_method: str = "forkserver") -> None:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes; re-raise the first failure.

    ``start_method="spawn"`` starts each rank as a new Python, for a body that needs what only a
    process start sets (an environment variable read at start-up, such as glibc's ``MALLOC_*``).
    """
    if start_method == "forkserver":
        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        try:
            mp.start_processes(
                _worker,
                args=(world_size, init_file, fn, args, tmp),
                nprocs=world_size,
                join=True,
                start_method=start_method,
            )
        except Exception as exc:
            reports = sorted(f for f in os.listdir(tmp) if f.startswith("rank"))
            details = "\n".join(filter(None, (open(os.path.join(tmp, f)).read() for f in reports)))
            raise AssertionError(f"distributed test failed:\n{details or exc}") from None

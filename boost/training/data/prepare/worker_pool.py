"""File jobs run by worker processes, each taking the next file when it finishes one.

Processes, not threads: reading, decompressing, JSON and writing are Python work that one
interpreter would serialise. Each process runs ``threads`` of the tokenizer's own (Rust) threads, so
fewer files than cores still use every core. The processes are forked: a spawned one would import
torch again (seconds each), and the parent has used no tokenizer thread pool before the fork.

Workers ignore SIGINT: a Ctrl-C reaches the parent, which ends them (SIGTERM) and says one line. A
bad input ends the pool the same way, its message raised as ``BadInput``; a worker that dies
(killed, out of memory) raises ``WorkerDied`` naming the file it was preparing. A worker dies with
its parent (``PR_SET_PDEATHSIG`` on Linux): after a ``kill -9`` of the prepare, no orphan goes on
writing the folder (or holding its lock) while a re-run writes it too.

For tests, ``HOLD_ENV`` names a FIFO at which a worker waits after each file it finished (and
recorded): it opens the FIFO for reading, which returns once the test has opened it for writing, and
reads to its end, which comes when the test closes it. A test that holds the FIFO open knows how many
files are done and that the prepare cannot finish: a signal it sends then lands in a known state.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import queue
import signal
import sys
import traceback
from collections.abc import Callable

from boost.training.data.prepare.document_reader import BadInput
from boost.training.data.prepare.file_job import FileJob, prepare_file
from boost.training.data.prepare.resume_state import FileRecord

HOLD_ENV = "BOOST_PREPARE_HOLD_FIFO"


class WorkerDied(RuntimeError):
    """A worker process ended without finishing its file (killed, out of memory, a crash)."""


def _end_with_parent(parent: int) -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _work(tasks: multiprocessing.Queue, events: multiprocessing.Queue, threads: int, parent: int) -> None:
    _end_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Read by the tokenizer's thread pool when it starts, at this process's first batch.
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    pid = os.getpid()
    while (job := tasks.get()) is not None:
        events.put(("start", pid, job.index))
        try:
            record = prepare_file(job, lambda *counts: events.put(("progress", *counts)))
        except BadInput as e:
            events.put(("bad", str(e)))
            return
        except Exception:
            events.put(("error", traceback.format_exc()))
            return
        events.put(("done", record))
        _hold_between_files()


def _hold_between_files() -> None:
    """Wait at the test's FIFO, if one is named (``HOLD_ENV``), until the test lets go of it."""
    fifo = os.environ.get(HOLD_ENV)
    if fifo:
        with open(fifo, "rb") as held:
            held.read()


def run_file_jobs(
    jobs: list[FileJob],
    processes: int,
    threads: int,
    on_progress: Callable[[int, int, int], None],
    on_done: Callable[[FileRecord], None],
) -> None:
    """Run every job on ``processes`` forked workers of ``threads`` tokenizer threads each.

    Returns when all are done; raises ``BadInput``, ``WorkerDied`` or ``KeyboardInterrupt`` (or a
    worker's unexpected error as ``RuntimeError`` with its traceback) after ending every worker.
    """
    context = multiprocessing.get_context("fork")
    tasks, events = context.Queue(), context.Queue()
    workers = [
        context.Process(target=_work, args=(tasks, events, threads, os.getpid()), daemon=True)
        for _ in range(processes)
    ]
    for worker in workers:  # forked before this process starts a queue's feeder thread
        worker.start()
    for job in jobs:
        tasks.put(job)
    for _ in range(processes):
        tasks.put(None)
    preparing: dict[int, int] = {}  # worker pid -> index of the file it prepares
    paths = {job.index: job.path for job in jobs}
    remaining = len(jobs)
    try:
        while remaining:
            try:
                event = events.get(timeout=0.5)
            except queue.Empty:
                for worker in workers:
                    if worker.exitcode not in (None, 0):
                        where = paths.get(preparing.get(worker.pid, -1), "a file")
                        raise WorkerDied(
                            f"a worker process died (exit code {worker.exitcode}) while preparing {where}; "
                            "re-run the same command to continue"
                        ) from None
                continue
            kind, *payload = event
            if kind == "progress":
                on_progress(*payload)
            elif kind == "start":
                preparing[payload[0]] = payload[1]
            elif kind == "done":
                on_done(payload[0])
                remaining -= 1
            elif kind == "bad":
                raise BadInput(payload[0])
            else:
                raise RuntimeError(f"a worker process failed:\n{payload[0]}")
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers:
            worker.join()
        tasks.cancel_join_thread()
        events.cancel_join_thread()

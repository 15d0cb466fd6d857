"""A process that has imported the trainer once and forks every rank of a test run from there.

Each rank of ``./run_train.sh`` starts a fresh Python and imports torch and torchtitan before it
trains (seconds per rank, most of a short test run). Here that import is paid once per test
session: a request (one JSON line on stdin: the trainer's arguments, the environment, the number of
ranks, one log file per rank) forks that many children, each of them a rank of
``python -m torchtitan_ext.train`` as torchrun would start it (``RANK``, ``WORLD_SIZE``, a c10d
store on a free port), and answers one JSON line with their exit codes. A fork begins from the
state right after the imports, so every run starts as fresh as a new process: nothing of one run
reaches the next.

A request whose environment names a probe (``tests/trainer.py``'s ``PROBE_ENV``, ``"module:function"``)
has rank 0 call it with the trainer's ``main``: the probe trains through it and reads what the run left in
the process (``tests/end_to_end/compiled_graphs_probe.py``: inductor's record of the compiled graphs).

Not the launcher: ``run_train.sh``'s preflight and torchrun are tested where they are the point
(``tests/trainer.py``'s ``run_train``); the trainer checks the whole configuration itself.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import io
import json
import logging
import math
import os
import signal
import socket
import sys
import time
import traceback

import torch
from torchtitan.config import ConfigManager

from boost.runtime.process_exit import exit_finished_process
from boost.training.data.stdlib_corpus import stdlib_files
from tests.trainer import PROBE_ENV
from torchtitan_ext.startup_clock import STARTUP
from torchtitan_ext.train import BoostTrainer, main
from torchtitan_ext.train_spec import register_boost_train_spec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(argv: list[str], env: dict[str, str], log: str, threads: int) -> None:
    """The child: one rank, its output to ``log``; never returns."""
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        faulthandler.enable(all_threads=True)  # as run_train.sh's ranks (torchtitan_ext.launch): into the log
        os.environ.update(env)
        _reread_import_time_settings(env)
        # the start-up line's clock (one per process, made at the server's import): from this fork,
        # whose kernel start time is now, with nothing left to import
        STARTUP.__init__()
        STARTUP.mark("imports")
        torch.set_num_threads(threads)
        sys.argv = ["torchtitan_ext.train", *argv]
        # torchtitan reads the command line through a default bound at its import (sys.argv[1:] then)
        ConfigManager.parse_args.__defaults__ = (argv,)
        probe = env.get(PROBE_ENV) if env["RANK"] == "0" else None
        if probe:
            module, function = probe.split(":")
            getattr(importlib.import_module(module), function)(main)
        else:
            main(BoostTrainer)
        exit_finished_process()  # as torchtitan_ext.train's __main__: no interpreter finalisation for gloo
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _reread_import_time_settings(env: dict[str, str]) -> None:
    """What torch reads from the environment once, at its import (the server's, before any request), read
    again from a request's as a fresh rank would: the ones tests set."""
    if "TORCHINDUCTOR_VEC_ISA_OK" in env:  # inductor's vectorised CPU kernels (None: where the CPU has them)
        torch._inductor.config.cpp.vec_isa_ok = {"1": True, "0": False}.get(env["TORCHINDUCTOR_VEC_ISA_OK"])


def _run(request: dict) -> list[int]:
    ngpu, logs = request["ngpu"], request["logs"]
    # run_train.sh's share of the cores: OMP_NUM_THREADS if set, else ceil(cores / processes) each
    threads = int(os.environ.get("OMP_NUM_THREADS") or math.ceil(len(os.sched_getaffinity(0)) / ngpu))
    common = {
        **request["env"],
        "WORLD_SIZE": str(ngpu),
        "LOCAL_WORLD_SIZE": str(ngpu),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "OMP_NUM_THREADS": str(threads),
    }
    sys.stdout.flush()
    children = {}
    for rank in range(ngpu):
        env = {**common, "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0"}
        pid = os.fork()
        if pid == 0:
            _rank(request["argv"], env, logs[rank], threads)
        children[pid] = rank
    codes: list[int | None] = [None] * ngpu
    deadline = time.time() + request.get("timeout", 600)
    while any(c is None for c in codes):
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if time.time() > deadline:
                _kill(children, codes)
                codes = [-signal.SIGKILL if c is None else c for c in codes]
                break
            time.sleep(0.05)
            continue
        codes[children[pid]] = os.waitstatus_to_exitcode(status)
        if codes[children[pid]] != 0:  # as torchrun: one failed rank ends the others
            _kill(children, codes)
    return codes


def _kill(children: dict[int, int], codes: list[int | None]) -> None:
    for pid, rank in children.items():
        if codes[rank] is None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _warm() -> None:
    """Work every rank of a test run repeats and whose result depends on nothing a test sets, done
    once here so that the forks inherit it: the stdlib corpus's file list (a walk of the standard
    library, cached per process) and tyro's parser caches for torchtitan's config classes."""
    stdlib_files("train")
    with contextlib.redirect_stderr(io.StringIO()):  # torchtitan's warnings about the default job
        ConfigManager().parse_args(
            ["--job.config_file", "./train_configs/debug.toml", "--training.steps", "1"]
        )


def serve() -> None:
    register_boost_train_spec()
    _warm()
    out = sys.stdout
    print("ready", file=out, flush=True)
    for line in sys.stdin:
        codes = _run(json.loads(line))
        print(json.dumps(codes), file=out, flush=True)


if __name__ == "__main__":
    serve()

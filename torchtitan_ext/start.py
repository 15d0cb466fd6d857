"""``run_train.sh``'s one Python process: the preflight, the device, then torchrun's agent or the dry run.

``python -m torchtitan_ext.start ARGS`` takes the trainer's arguments (``--job.config_file X.toml``
and the overrides) and run_train.sh's environment: ``NGPU`` (processes on this node), ``DRY_RUN=1``
(one process, rank 0 of ``NGPU``, on torchtitan's fake process group), ``TRAIN_FILE`` (the module each
rank runs, ``torchtitan_ext.train``), ``LOG_RANK`` (the ranks shown on the console: ``console_ranks``) and
``LOG_DIR`` (every rank's output kept in files). In order:

0. The installed torch against the supported range (``torchtitan_ext.torch_range``, from its
   metadata: torch is not imported): older than it (or none), one line naming both, exit 2.
1. The preflight (``torchtitan_ext.preflight.preflight``). A value that does not parse, a broken
   rule or a bad input file is refused before torch is imported, a refused checkpoint or a held run
   folder after it: one line, exit 2, and no process started. Where torch is first imported, a torch
   newer than the range gets one line saying which range was tested, and runs where it has every
   private torch name BOOST bridges (``torch_private.missing_private_api``); where it lacks any, that
   line names them, exit 2.
2. The device: where torch sees no accelerator, each process gets its share of the cores
   (``OMP_NUM_THREADS``, unless set): CPU processes each default to every core and oversubscribe.
3. torchrun's agent in this process (``torchtitan_ext.launch``), which starts the ranks; with
   ``DRY_RUN=1``, the trainer itself in this process.

The ranks are told which job was checked (``PREFLIGHT_MARK_ENV``): a rank whose job is that one
does not read its input files again. Started by torchrun directly, a rank checks everything.
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import sys

from boost.training.config_error import ConfigError

TRAIN_MODULE = "torchtitan_ext.train"
# the ranks' CUDA allocator, unless PYTORCH_ALLOC_CONF says otherwise (fewer fragmentation OOMs)
ALLOC_CONF = "expandable_segments:True"


def main(argv: list[str]) -> int:
    from torchtitan_ext.preflight.check import (
        PREFLIGHT_MARK_ENV,
        dry_run_mode,
        dry_run_rank,
        log_ranks,
        preflight,
        preflight_mark,
        process_count,
    )
    from torchtitan_ext.torch_range import torch_version_problem

    problem = torch_version_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    dry_run = os.environ.get("DRY_RUN", "0") == "1"
    try:
        ngpu = process_count(os.environ.get("NGPU", "1"))
        values = preflight(argv, ngpu)
        dry_run_mode(values.comm.mode, dry_run)
        dry_run_rank(os.environ.get("DRY_RUN_RANK"), ngpu, dry_run)
        log_rank = log_ranks(os.environ.get("LOG_RANK"), ngpu)
    except ConfigError as e:
        print(f"BOOST config error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # a refused checkpoint or a held run folder: the message alone
        if not isinstance(e.code, str):
            raise  # --help, whose text torchtitan's parser printed
        print(e.code, file=sys.stderr, flush=True)
        return 2
    os.environ[PREFLIGHT_MARK_ENV] = preflight_mark(values, ngpu)
    share_the_cores(1 if dry_run else ngpu)
    train_module = os.environ.get("TRAIN_FILE") or TRAIN_MODULE
    if dry_run:
        return _dry_run(train_module, argv, ngpu)
    from torchtitan_ext.launch import main as launch

    os.environ.setdefault("PYTORCH_ALLOC_CONF", ALLOC_CONF)
    # the ranks read it too: torchtitan warns where it leaves out the rank holding the loss
    os.environ["LOG_RANK"] = console_ranks(values, ngpu, log_rank)
    log_dir = os.environ.get("LOG_DIR")
    return launch(
        [
            f"--nproc_per_node={ngpu}",
            "--rdzv_backend",
            "c10d",
            "--rdzv_endpoint=localhost:0",
            "--local-ranks-filter",
            os.environ["LOG_RANK"],
            "--role",
            "rank",
            "--tee",
            "3",
            *(["--log-dir", log_dir] if log_dir else []),
            "-m",
            train_module,
            *argv,
        ]
    )


def console_ranks(values, ngpu: int, log_rank: str | None) -> str:
    """The ranks the console shows (torchrun's ``--local-ranks-filter``): ``LOG_RANK`` where set; else
    rank 0 (BOOST's one-rank lines: a stop, a resume, a refusal) and, under pipeline parallelism, the
    rank whose step lines hold the loss (``rules.pipeline_loss_rank``)."""
    if log_rank:
        return log_rank
    from boost.training.rules import pipeline_loss_rank

    par = values.parallelism
    return ranks_beside_rank0(
        pipeline_loss_rank(par.pipeline_parallel_schedule, par.pipeline_parallel_degree, ngpu)
    )


def ranks_beside_rank0(rank: int) -> str:
    """``LOG_RANK`` for rank 0 and ``rank``: ``"0"``, or ``"0,<rank>"``."""
    return "0" if rank == 0 else f"0,{rank}"


def share_the_cores(processes: int) -> None:
    """Where torch sees no accelerator, give each of ``processes`` its share of this machine's cores
    (``OMP_NUM_THREADS``, unless it is set), rounded up."""
    import torch

    if torch.cuda.is_available() or os.environ.get("OMP_NUM_THREADS"):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = -(-cores // processes)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)  # this process too, where it trains (the dry run): torch is loaded


def _dry_run(train_module: str, argv: list[str], ngpu: int) -> int:
    """torchtitan's dry run, in this process: rank ``DRY_RUN_RANK`` (unset: 0) of ``ngpu``, which the trainer's
    fake process group takes (``torchtitan_private.fake_process_group_as``); ``RANK`` stays 0, as the one
    process speaks for the job (its refusals, the run folder's lock), and ``LOCAL_RANK`` names device 0."""
    os.environ.update(NGPU=str(ngpu), LOCAL_RANK="0", RANK="0")
    # a fatal signal prints every thread's Python stack, as in torchrun's ranks (torchtitan_ext.launch)
    faulthandler.enable(all_threads=True)
    sys.argv = [train_module, *argv]
    runpy.run_module(train_module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

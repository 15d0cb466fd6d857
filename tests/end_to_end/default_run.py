"""One trained run of the default job, shared by every test that reads or resumes such a run (the
session fixture ``default_run``, made available to tests/end_to_end/ by its conftest.py)."""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.trainer import losses, run_train

# A 1-process run of the default job (CoLA, BTP, debug model) through run_train.sh, as a user starts
# it: a checkpoint every 2 steps, 3 kept. The LR schedule is fixed at 14 steps, so a run resumed from
# it to any step up to 14 follows the same schedule (torchtitan rebuilds the schedule from the
# command line; only its position is in the checkpoint). 10 steps: the loss falls by 0.8 beyond the
# 1.0 test_train.py asks (8.03 -> 6.27; per-batch noise is ~0.5, step 7's batch alone is 7.48).
DEFAULT_RUN = [
    "--validation.no-enable",
    "--lr_scheduler.warmup_steps",
    "2",
    "--lr_scheduler.total_steps",
    "14",
    "--checkpoint.interval",
    "2",
    "--checkpoint.keep_latest_k",
    "3",
]
DEFAULT_STEPS = 10


@dataclass(frozen=True)
class TrainedRun:
    tmp: Path  # the run's dump folder is tmp / "out"
    losses: dict[int, float]
    log: str


@pytest.fixture(scope="session")
def default_run(tmp_path_factory) -> TrainedRun:
    """The default job trained for 10 steps: checkpoints step-6, step-8, step-10 and its tensorboard.
    Tests copy what they change (``shutil.copytree``) and never write into it.

    Under pytest-xdist every worker is a session of its own: the first worker to ask trains the run
    in the folder all workers share, the others wait on its lock and read it (trained once a suite)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the workers' common folder
    tmp, done = base / "default-run", base / "default-run" / "log.txt"
    with open(base / "default-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():  # a worker whose run failed wrote none: the next one starts it afresh
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            done.write_text(run_train(tmp, *DEFAULT_RUN, steps=DEFAULT_STEPS))
    log = done.read_text()
    return TrainedRun(tmp, losses(log), log)

"""One trained run of the default job, shared by every test that reads or resumes such a run (the
session fixture ``default_run``, made available to tests/end_to_end/ by its conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.suite_once import once_per_suite
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
    """The default job trained for 10 steps: checkpoints step-6, step-8, step-10 and its tensorboard,
    once a suite (``tests/suite_once.py``). Tests copy what they change (``shutil.copytree``) and never
    write into it."""
    tmp, log = once_per_suite(
        tmp_path_factory, "default-run", lambda folder: run_train(folder, *DEFAULT_RUN, steps=DEFAULT_STEPS)
    )
    return TrainedRun(tmp, losses(log), log)

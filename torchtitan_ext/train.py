"""Entry point: torchtitan's own ``main``, with a trainer that first checks the whole configuration
and the checkpoint it would resume from — before any process group, data or model exists.

``run_train.sh`` runs ``torchrun ... -m torchtitan_ext.train --job.config_file X.toml``.
"""

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist
import torchtitan.train as titan_train
from torchtitan.tools.logging import logger
from torchtitan.train import Trainer, main

from boost.process_exit import exit_finished_process
from boost.rules import MODEL_NAME
from torchtitan_ext.guards.checkpoint_guard import CheckpointRefused, prepare_resume
from torchtitan_ext.guards.checkpoint_identity import model_identity
from torchtitan_ext.guards.checkpoint_manager import BoostCheckpointManager
from torchtitan_ext.guards.graceful_stop import GracefulStop
from torchtitan_ext.guards.launcher_watch import end_with_launcher
from torchtitan_ext.guards.run_lock import RunFolderInUse, RunLock
from torchtitan_ext.preflight import ConfigError, check_config, world_size_from_env
from torchtitan_ext.startup_clock import STARTUP
from torchtitan_ext.torch_private import fill_fake_collective_outputs
from torchtitan_ext.train_spec import register_boost_train_spec

# How long ranks other than 0 wait, after a refusal, for torchrun to stop them once rank 0 has exited.
_REFUSAL_GRACE_S = 30


class BoostTrainer(Trainer):
    """torchtitan's ``Trainer``: config and checkpoint checks first, the run folder held for the life
    of the run, checkpoints that record their model, and an orderly exit."""

    checkpointer: BoostCheckpointManager

    def __init__(self, job_config):
        STARTUP.mark("config")  # torchtitan's main has read the job
        if job_config.compile.enable:
            STARTUP.watch_compiles()
        if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun, not a dry run's shell
            end_with_launcher()
        try:
            check_config(job_config, world_size_from_env(job_config))
            # before anything is built: a signal during start-up is a stop request too
            self.stop = GracefulStop(job_config.boost.stop_grace_s, job_config.boost.stop_check_every)
        except (ConfigError, ValueError) as e:
            print(f"BOOST config error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        try:
            # rank 0 holds the folder; the other ranks are stopped by torchrun if it refuses
            self.run_lock = (
                RunLock.acquire(job_config.job.dump_folder) if os.environ.get("RANK", "0") == "0" else None
            )
            resume_plan = prepare_resume(job_config, world_size_from_env(job_config))
        except (CheckpointRefused, RunFolderInUse) as e:
            if os.environ.get("RANK", "0") == "0":
                print(e, file=sys.stderr, flush=True)
            else:
                # Every rank refuses alike; rank 0 says why. A rank leaving first has torchrun stop
                # rank 0, perhaps before it printed, so the others wait to be stopped with it.
                time.sleep(_REFUSAL_GRACE_S)
            raise SystemExit(2) from None
        if job_config.comm.mode == "fake_backend":  # a dry run: outputs defined on every torch
            fill_fake_collective_outputs()
        super().__init__(job_config)
        records = self.checkpointer.enable and job_config.model.name == MODEL_NAME
        self.checkpointer = BoostCheckpointManager.adopt(
            self.checkpointer,
            model_identity=model_identity(self.model_args, job_config) if records else None,
            resume_plan=resume_plan,
        )
        self.stop.device = self.device
        self._start_step: int | None = None
        self._first_step_done = False

    def train_step(self, data_iterator) -> None:
        self.metrics_processor.step_begins(self.step)  # which steps the communication counter watches
        if self._first_step_done:
            super().train_step(data_iterator)
            return
        STARTUP.begin("step 1")
        super().train_step(data_iterator)
        STARTUP.end("step 1")
        self._first_step_done = True
        logger.info(STARTUP.line())

    def should_continue_training(self) -> bool:
        # torchtitan asks this at every step boundary, after the step's own save and validation
        if self._start_step is None:
            self._start_step = self.step  # the loaded step: nothing new to save before the first step
        if self.stop.agreed(self.step):
            self._stop_here()
            return False
        return super().should_continue_training()

    def _stop_here(self) -> None:
        name = signal.Signals(self.stop.signum).name if self.stop.signum else "a signal on another rank"
        if self.step == self._start_step:
            said = "before its first step: nothing new to save"
        elif self.checkpointer.save_at_stop(self.step):
            said = f"checkpoint {self.checkpointer.folder}/step-{self.step} saved; run the same command to resume"
        else:
            said = "checkpointing is off: nothing saved"
        self.stop.done()
        if os.environ.get("RANK", "0") == "0":
            print(f"BOOST: stopped by {name} after step {self.step}: {said}", file=sys.stderr, flush=True)

    def train(self) -> None:
        with _without_final_sleep():
            super().train()
        # Ranks leave together: torchtitan's rank 0 would sleep 2 s after the last step for the others to
        # finish, and gloo aborts (SIGABRT) on an uneven teardown; this barrier waits exactly as long.
        # Only after a normal finish: a rank that raised must not wait here for peers that may be gone.
        if dist.is_initialized():
            dist.barrier()


class _TimeWithoutSleep:
    """The ``time`` module as ``torchtitan.train`` sees it during ``Trainer.train``, less ``sleep``: its
    one sleep is rank 0's 2 s after the last step, which the barrier after it replaces."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


class _DropSleepLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Sleeping 2 seconds for other ranks")


@contextmanager
def _without_final_sleep() -> Iterator[None]:
    """``Trainer.train`` without its final 2-second sleep, and without the log line announcing it."""
    drop = _DropSleepLine()
    titan_train.time, previous = _TimeWithoutSleep(), titan_train.time
    logger.addFilter(drop)
    try:
        yield
    finally:
        titan_train.time = previous
        logger.removeFilter(drop)


if __name__ == "__main__":
    STARTUP.mark("imports")
    register_boost_train_spec()
    main(BoostTrainer)  # raises on failure: only a finished run reaches the next line
    exit_finished_process()  # see boost.process_exit: gloo can abort in interpreter finalisation

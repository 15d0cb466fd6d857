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

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torchtitan.train as titan_train
from torch.distributed.tensor import DTensor
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.distributed import utils as dist_utils
from torchtitan.tools.logging import logger
from torchtitan.train import Trainer, main

from boost.runtime.process_exit import exit_finished_process
from boost.training.parallel.grad_norm import clip_grads_with_norm_, local_grad_norm_applies, total_grad_norm
from boost.training.rules import MODEL_NAME, pipeline_loss_rank
from torchtitan_ext.config import DRY_RUN_COMM_MODE
from torchtitan_ext.dry_run import dry_run_line, dry_run_vocab_shard, fold_tokens
from torchtitan_ext.guards.checkpoint_guard import CheckpointRefused, prepare_resume
from torchtitan_ext.guards.checkpoint_identity import model_identity
from torchtitan_ext.guards.checkpoint_manager import BoostCheckpointManager
from torchtitan_ext.guards.graceful_stop import GracefulStop
from torchtitan_ext.guards.launcher_watch import end_with_launcher
from torchtitan_ext.guards.run_lock import RunFolderInUse, RunLock
from torchtitan_ext.guards.step_hold import hold_at_step
from torchtitan_ext.infra import cudagraphs
from torchtitan_ext.infra.context_parallel import counted_labels, prepare_job_batch
from torchtitan_ext.preflight import ConfigError, check_config, dry_run_rank, world_size_from_env
from torchtitan_ext.start_warnings import install as answer_start_warnings
from torchtitan_ext.startup_clock import STARTUP
from torchtitan_ext.torch_private import fill_fake_collective_outputs
from torchtitan_ext.torchtitan_private import fake_process_group_as
from torchtitan_ext.train_spec import register_boost_train_spec

answer_start_warnings()  # before torchtitan's main parses the job and starts the process group

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
            dry_run = job_config.comm.mode == DRY_RUN_COMM_MODE
            played = dry_run_rank(os.environ.get("DRY_RUN_RANK"), world_size_from_env(job_config), dry_run)
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
        if dry_run:  # outputs defined on every torch
            fill_fake_collective_outputs()
        self._cudagraphs = job_config.boost.cudagraphs
        if self._cudagraphs:
            cudagraphs.set_nccl_env()  # before the process group starts
        with fake_process_group_as(played):  # a dry run's rank; 0 unless DRY_RUN_RANK says
            super().__init__(job_config)
        if dry_run:
            pp = self.parallel_dims.pp
            holder = pipeline_loss_rank(
                job_config.parallelism.pipeline_parallel_schedule, pp, dist.get_world_size()
            )
            logger.info(
                dry_run_line(
                    dist.get_rank(), dist.get_world_size(), pp == 1 or self.pp_has_last_stage, holder
                )
            )
        records = self.checkpointer.enable and job_config.model.name == MODEL_NAME
        self.checkpointer = BoostCheckpointManager.adopt(
            self.checkpointer,
            model_identity=model_identity(self.model_args, job_config) if records else None,
            resume_plan=resume_plan,
        )
        self.stop.device = self.device
        # a dry run's token ids within its rank's vocabulary shard (why: torchtitan_ext.dry_run)
        tp = self.parallel_dims.tp
        self._dry_run_vocab_shard = dry_run_vocab_shard(
            dry_run,
            self.model_args.vocab_size,
            tp,
            self.parallel_dims.get_mesh("tp").get_local_rank() if dry_run and tp > 1 else 0,
        )
        self._start_step: int | None = None
        self._first_step_done = False
        self._params: list[torch.nn.Parameter] | None = None

    def train_step(self, data_iterator) -> None:
        if self._cudagraphs:
            cudagraphs.mark_step()
        if self._first_step_done:
            self._train_step(data_iterator)
            return
        STARTUP.begin("step 1")
        self._train_step(data_iterator)
        STARTUP.end("step 1")
        self._first_step_done = True
        logger.info(STARTUP.line())
        if self._cudagraphs:
            logger.info(cudagraphs.first_step_line())

    def _train_step(self, data_iterator) -> None:
        """torchtitan 0.2.2's ``Trainer.train_step`` with no host sync but the log step's: the global
        count of valid tokens stays on the device (torchtitan reads it with ``.item()`` every step,
        which stops the host until the device has run everything queued before it), and the gradient
        norm is taken and clipped on the gradients' local shards (``boost.training.parallel.grad_norm``: one
        foreach norm and one collective, where torch's DTensor path propagates shardings per parameter)."""
        self.optimizers.zero_grad()
        lr = self.lr_schedulers.schedulers[0].get_last_lr()[0]
        parallel_dims = self.parallel_dims

        microbatches = []
        local_valid_tokens = torch.tensor(0, dtype=torch.int64)
        for _ in range(self.gradient_accumulation_steps):
            input_dict, labels = next(data_iterator)
            if self._dry_run_vocab_shard is not None:
                input_dict["input"], labels = fold_tokens(
                    input_dict["input"], labels, self._dry_run_vocab_shard
                )
            counted = counted_labels(labels, parallel_dims, self.job_config)  # a dry run's: its CP share
            local_valid_tokens += (counted != IGNORE_INDEX).sum()
            microbatches.append((input_dict, labels))
        # the communication counter, on the steps it watches, from here: every collective of the step, none of
        # the data loader's host-side work
        self.metrics_processor.data_loaded(self.step)
        local_valid_tokens = local_valid_tokens.to(self.device)
        if parallel_dims.dp_enabled:
            batch_mesh = parallel_dims.get_mesh("batch")
            global_valid_tokens = funcol.all_reduce(local_valid_tokens, "sum", batch_mesh).float()
        else:
            global_valid_tokens = local_valid_tokens.float()
        if parallel_dims.pp_enabled:  # the schedule divides each micro-batch's loss by it
            self.pp_schedule.count_step_tokens(global_valid_tokens)

        accumulated_losses = []
        for input_dict, labels in microbatches:
            for k, v in input_dict.items():
                if isinstance(v, torch.Tensor):
                    input_dict[k] = v.to(self.device)
            loss = self.forward_backward_step(
                input_dict=input_dict, labels=labels.to(self.device), global_valid_tokens=global_valid_tokens
            )
            accumulated_losses.append(loss.detach())

        grad_norm = self._clip_grad_norm()
        self._grad_norm = grad_norm  # a stop's checkpoint reads it (_stop_here): log steps check their own
        self.checkpointer.maybe_wait_for_staging()
        self.optimizers.step()
        self.lr_schedulers.step()
        loss = torch.sum(torch.stack(accumulated_losses))

        if not self.metrics_processor.should_log(self.step):
            return
        if parallel_dims.dp_cp_enabled:
            # Under CP a rank's loss is its share of the window: the data-parallel rank's loss is the sum
            # over the cp mesh, and its tokens (counted before the sharding) are the window's. The max
            # over ranks and the tokens seen are then taken over the batch mesh only (torchtitan takes
            # both over dp × cp: the max a cp-th of the loss, the tokens cp times the data).
            loss = loss.detach()
            # loss-parallel TP's loss is a replicated DTensor, and functional collectives take tensors
            if isinstance(loss, DTensor):
                loss = loss.full_tensor()
            cp_mesh = parallel_dims.get_optional_mesh("cp")
            window_loss = funcol.all_reduce(loss, "sum", cp_mesh) if cp_mesh is not None else loss
            batch_mesh = parallel_dims.get_optional_mesh("batch")
            local_avg_loss = window_loss * global_valid_tokens / local_valid_tokens
            global_avg_loss, global_max_loss, global_ntokens_seen = (
                dist_utils.dist_sum(window_loss, batch_mesh),
                dist_utils.dist_max(local_avg_loss, batch_mesh),
                dist_utils.dist_sum(
                    torch.tensor(self.ntokens_seen, dtype=torch.int64, device=self.device), batch_mesh
                ),
            )
        else:
            global_avg_loss = global_max_loss = loss.detach().item()
            global_ntokens_seen = self.ntokens_seen
        if parallel_dims.pp_enabled and not self.pp_has_last_stage:
            # no loss here: torchtitan's placeholder -1, not its sum over the loss mesh (-dp·cp)
            global_avg_loss = global_max_loss = -1.0
        self.metrics_processor.log(
            self.step,
            global_avg_loss,
            global_max_loss,
            grad_norm.item(),
            extra_metrics={"n_tokens_seen": global_ntokens_seen, "lr": lr},
        )

    def post_dataloading_process(self, input_dict, labels):
        """torchtitan's, for BOOST's model (``context_parallel.prepare_job_batch``): the masks of every attention
        kernel (torchtitan builds them for flex and varlen only), then this rank's share of the sequence."""
        model = self.model_parts[0]
        return prepare_job_batch(
            model, self.tokenizer, input_dict, labels, self.parallel_dims, self.job_config
        )

    def _clip_grad_norm(self) -> torch.Tensor:
        """torchtitan's ``clip_grad_norm_`` (the norm over every rank, pipeline stages included), on
        local shards where ``boost.training.parallel.grad_norm`` applies, torchtitan's own elsewhere."""
        if self._params is None:  # the same Parameter objects every step (a checkpoint loads into them)
            self._params = [p for m in self.model_parts for p in m.parameters()]
        params = self._params
        grads = [p.grad for p in params if p.grad is not None]
        max_norm, pp_mesh = self.job_config.training.max_norm, self.parallel_dims.get_optional_mesh("pp")
        if self.parallel_dims.ep_enabled or not local_grad_norm_applies(grads, 2.0):
            return dist_utils.clip_grad_norm_(
                params, max_norm, foreach=True, pp_mesh=pp_mesh, ep_enabled=self.parallel_dims.ep_enabled
            )
        total = total_grad_norm(grads)
        if pp_mesh is not None:
            total = total.square()
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=pp_mesh.get_group())
            total = total.sqrt()
        clip_grads_with_norm_(grads, max_norm, total)
        return total

    def should_continue_training(self) -> bool:
        # torchtitan asks this at every step boundary, after the step's own save and validation
        if self._start_step is None:
            self._start_step = self.step  # the loaded step: nothing new to save before the first step
        hold_at_step(self.step)  # tests only (step_hold.HOLD_ENV): a signal lands at a known boundary
        if self.stop.agreed(self.step):
            self._stop_here()
            return False
        return super().should_continue_training()

    def _stop_here(self) -> None:
        name = signal.Signals(self.stop.signum).name if self.stop.signum else "a signal on another rank"
        if self.step != self._start_step:
            # a stop lands on any step, not only on a log step whose gradient norm the guard has read: a
            # non-finite step must not reach the stop's checkpoint (every rank holds the same norm)
            self.metrics_processor.refuse_non_finite(self.step, float(self._grad_norm))
        if self.step == self._start_step:
            said = "before its first step: nothing new to save"
        elif self.step >= self.job_config.training.steps:
            # torchtitan's last save has run (the model alone under checkpoint.last_save_model_only): the
            # run is over, and no command resumes it
            said = (
                f"the run had reached training.steps = {self.job_config.training.steps}: its training is done"
            )
        elif self.checkpointer.save_at_stop(self.step):
            # a run started at checkpoint.load_step N would load N again under the same command
            pinned = self.job_config.checkpoint.load_step != -1
            again = (
                f"the same command with --checkpoint.load_step {self.step}" if pinned else "the same command"
            )
            said = f"checkpoint {self.checkpointer.folder}/step-{self.step} saved; run {again} to resume"
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
    exit_finished_process()  # see boost.runtime.process_exit: gloo can abort in interpreter finalisation

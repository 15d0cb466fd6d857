"""torchtitan's metrics processor plus BOOST's communication metrics and the non-finite guard.

A step's collectives are counted by ``boost.runtime.comm_counter.CommCounter``, opened once the step's data
is loaded (before the token count's all-reduce and, under PP, the schedule's first receive) and closed
after the optimizer step (so the gradient-norm all-reduce and an optimizer's own collectives, LORO's exact
steps', are included). The counter is a dispatch mode that sees every op, so it watches only the steps
whose numbers are reported:

- eager: each log step;
- compiled: one step, the second this process runs, eagerly (``torch.compiler.set_stance
  ("force_eager")``: a dispatch mode cannot be traced with ``fullgraph=True``), and its numbers are
  reported from then on. BTP's collectives are functional collectives, the same compiled or eager, and
  they repeat step to step; SimpleFSDP's, one per weight eager, are merged by inductor into one
  all-gather and one reduce-scatter a block (the same bytes), which the line says. The first step
  is left to compile, before torchtitan lowers the process groups' timeouts after step 1.

The counter also holds every counted collective to NCCL's rules (``boost.runtime.comm_counter.NcclRuleError``)
against the parameters' device, on any backend, and counts the step's host syncs up to the optimizer step
(Adam's ``.item()`` on its step counts, host tensors, waits on no device).
Tensorboard gets ``boost/comm_bytes_per_step``, ``boost/comm_count_per_step``, ``boost/host_syncs_per_step``
and one ``boost/comm_bytes/<kind>`` per collective kind; the console gets one ``comm/step`` line per log.
Every checkpoint step is a log step, where the global gradient norm comes to the host anyway: the
non-finite guard (``torchtitan_ext.guards.nonfinite_guard``) reads it there, before the save.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
import torch.distributed as dist
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.tools.logging import logger

from boost.runtime.comm_counter import CommCounter
from boost.training.rules import pipeline_loss_rank
from torchtitan_ext.config import DRY_RUN_COMM_MODE
from torchtitan_ext.guards.nonfinite_guard import refuse_non_finite
from torchtitan_ext.torchtitan_private import metrics_logged_on


class BoostMetricsProcessor(MetricsProcessor):
    def __init__(self, job_config, parallel_dims, tag: str | None = None):
        # TensorBoard / W&B on the rank whose loss is the loss (torchtitan_private.metrics_logged_on: why)
        par = job_config.parallelism
        loss_rank = pipeline_loss_rank(
            par.pipeline_parallel_schedule, parallel_dims.pp, parallel_dims.world_size
        )
        with metrics_logged_on(loss_rank):
            super().__init__(job_config, parallel_dims, tag)
        self._counter: CommCounter | None = None
        self._compiled = job_config.compile.enable
        self._how_counted = _how_counted(
            job_config.compile.enable, job_config.boost.fsdp == "simple_fsdp" and parallel_dims.fsdp_enabled
        )
        self._enabled = job_config.boost.log_comm
        self._checkpoint = job_config.checkpoint
        self._last_step = job_config.training.steps
        self._dry_run = job_config.comm.mode == DRY_RUN_COMM_MODE
        self._steps_run = 0
        self._steps_since_log = (
            0  # torchtitan divides by log_freq: a checkpoint's or the last step's log is sooner
        )
        self._host_syncs = 0  # the counted step's, up to its optimizer step
        self.last_comm: dict[str, Any] | None = None

    # The trainer assigns it after building the optimizers.
    @property
    def optimizers(self):
        return self.__dict__.get("_optimizers")

    @optimizers.setter
    def optimizers(self, optimizers) -> None:
        self.__dict__["_optimizers"] = optimizers
        if optimizers is not None and self._enabled:
            # the container steps its optimizers (one a model part) in order: the update starts with the
            # first and ends with the last
            optimizers.optimizers[0].register_step_pre_hook(self._before_update)
            optimizers.optimizers[-1].register_step_post_hook(self._after_update)

    def should_log(self, step: int) -> bool:
        # a checkpoint step is a log step: the guard reads its gradient norm before the save
        ckpt = self._checkpoint
        saves = ckpt.enable and (step % ckpt.interval == 0 or step == self._last_step)
        return super().should_log(step) or saves

    def data_loaded(self, step: int) -> None:
        """Called by the trainer once each step's data is loaded, before any collective of the step: opens
        the counter on a step it watches."""
        self._steps_run += 1
        self._steps_since_log += 1
        if not self._enabled:
            return
        watched = self._steps_run == 2 if self._compiled else self.should_log(step)
        if watched and self._counter is None:
            if self._compiled:
                torch.compiler.set_stance("force_eager")
            self._counter = CommCounter(device=next(self.model_parts[0].parameters()).device)
            self._counter.__enter__()

    def _before_update(self, optimizer, args, kwargs) -> None:
        # Adam reads its step counts, host tensors, with .item(): no wait on the device, not the step's syncs
        if self._counter is not None:
            self._host_syncs = self._counter.host_syncs

    def _after_update(self, optimizer, args, kwargs) -> None:
        self._close()

    def _close(self) -> None:
        if self._counter is not None:
            counter, self._counter = self._counter, None
            counter.__exit__(None, None, None)
            if self._compiled:
                torch.compiler.set_stance("default")
            self.last_comm = {
                "bytes": counter.total_bytes(),
                "count": counter.total_count(),
                "host_syncs": self._host_syncs,
                "by_kind": dict(counter.bytes),
                "summary": counter.summary(),
            }

    def log(
        self,
        step: int,
        global_avg_loss: float,
        global_max_loss: float,
        grad_norm: float,
        extra_metrics: dict[str, Any] | None = None,
    ):
        # the time a step took since the last log, however many steps that was: torchtitan divides its one
        # read of the clock (the one its throughput takes) by metrics.log_freq, which is asked for that read as
        # the steps since the last log
        steps, self._steps_since_log = max(self._steps_since_log, 1), 0
        extra = dict(extra_metrics or {})
        if self.last_comm is not None:
            extra["boost/comm_bytes_per_step"] = self.last_comm["bytes"]
            extra["boost/comm_count_per_step"] = self.last_comm["count"]
            extra["boost/host_syncs_per_step"] = self.last_comm["host_syncs"]
            for kind, nbytes in self.last_comm["by_kind"].items():
                extra[f"boost/comm_bytes/{kind}"] = nbytes
        metrics_config = self.job_config.metrics
        self.job_config.metrics = dataclasses.replace(metrics_config, log_freq=steps)
        try:
            super().log(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=extra)
        finally:
            self.job_config.metrics = metrics_config
        if self.last_comm and self.last_comm["count"]:
            logger.info(
                f"comm/step: {self.last_comm['summary']}, host syncs {self.last_comm['host_syncs']} "
                f"(rank {dist.get_rank() if dist.is_initialized() else 0}, one step from its data to the end of "
                f"the optimizer step{self._how_counted})"
            )
        self.refuse_non_finite(step, grad_norm)

    def log_validation(
        self,
        loss: float,
        step: int,
        extra_metrics: dict[str, Any] | None = None,
        *,
        tokens: int = 0,
        seconds: float = 0.0,
    ) -> None:
        """torchtitan's, on the validation's own ``tokens`` and ``seconds``: torchtitan's reads and resets the
        training's counters, so a validation between log steps took the training's tokens and time into its
        throughput and cut them from the next training log's. The training's interval resumes after it, less
        the validation's time."""
        train_tokens, train_since = self.ntokens_since_last_log, self.time_last_log
        self.ntokens_since_last_log, self.time_last_log = tokens, time.perf_counter() - seconds
        super().log_validation(loss, step, extra_metrics)
        self.ntokens_since_last_log, self.time_last_log = train_tokens, train_since + seconds

    def refuse_non_finite(self, step: int, grad_norm: float) -> None:
        """The non-finite guard on step ``step``'s gradient norm (``nonfinite_guard``), saying so in a dry run:
        after each log step, and before a stop's checkpoint (``torchtitan_ext.train``)."""
        refuse_non_finite(step, grad_norm, dry_run=self._dry_run)


def _how_counted(compiled: bool, simple_fsdp: bool) -> str:
    """What the ``comm/step`` line adds where the counted step is not the steps it stands for."""
    if not compiled:
        return ""
    note = ", the second, run eagerly: the compiled steps issue the same bytes"
    if simple_fsdp:  # torchtitan_ext.torch_private.merge_fsdp_collectives_in_compiled_graphs
        note += ", SimpleFSDP's all-gathers and reduce-scatters merged into one of each a block"
    return note


def build_boost_metrics_processor(job_config, parallel_dims, model_args=None, tag: str | None = None):
    return BoostMetricsProcessor(job_config, parallel_dims, tag)

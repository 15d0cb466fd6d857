"""torchtitan's metrics processor plus BOOST's communication metrics.

Each training step's collectives are counted by ``boost.comm_counter.CommCounter``, opened at the first
forward of the step and closed at the optimizer step (so the gradient-norm all-reduce is included).
A dispatch mode cannot be traced by torch.compile (torchtitan compiles with ``fullgraph=True``), so
with compile on only the first step is counted, run eagerly (``torch.compiler.set_stance
("force_eager")``), and its numbers are reported from then on: BTP's collectives are functional
collectives, the same compiled or eager, and they repeat step to step.
Tensorboard gets ``boost/comm_bytes_per_step``, ``boost/comm_count_per_step`` and one
``boost/comm_bytes/<kind>`` per collective kind; the console gets one ``comm/step`` line per log.
"""

from __future__ import annotations

from typing import Any

import torch

from torchtitan.components.metrics import MetricsProcessor
from torchtitan.tools.logging import logger

from boost.comm_counter import CommCounter


class BoostMetricsProcessor(MetricsProcessor):
    def __init__(self, job_config, parallel_dims, tag: str | None = None):
        super().__init__(job_config, parallel_dims, tag)
        self._counter: CommCounter | None = None
        self._steps_counted = 0
        self._count_every_step = not job_config.compile.enable
        self._enabled = job_config.boost.log_comm
        self.last_comm: dict[str, Any] | None = None

    # The trainer assigns these after building the model and the optimizers.
    @property
    def model_parts(self):
        return self.__dict__.get("_model_parts")

    @model_parts.setter
    def model_parts(self, parts) -> None:
        self.__dict__["_model_parts"] = parts
        if parts and self._enabled:
            parts[0].register_forward_pre_hook(self._open)

    @property
    def optimizers(self):
        return self.__dict__.get("_optimizers")

    @optimizers.setter
    def optimizers(self, optimizers) -> None:
        self.__dict__["_optimizers"] = optimizers
        if optimizers is not None and self._enabled:
            for opt in optimizers.optimizers:
                # before the non-finite guard's hook (torchtitan_ext.guards.nonfinite_guard), so that its
                # one-element all-reduce is not counted as the model's
                opt.register_step_pre_hook(self._before_update)

    def _open(self, module, args) -> None:
        if self._counter is None and (self._count_every_step or self._steps_counted == 0) and module.training:
            if not self._count_every_step:
                torch.compiler.set_stance("force_eager")
            self._counter = CommCounter()
            self._counter.__enter__()

    def _before_update(self, optimizer, args, kwargs) -> None:
        self._close()

    def _close(self) -> None:
        if self._counter is not None:
            counter, self._counter = self._counter, None
            counter.__exit__(None, None, None)
            if not self._count_every_step:
                torch.compiler.set_stance("default")
            self._steps_counted += 1
            self.last_comm = {
                "bytes": counter.total_bytes(),
                "count": counter.total_count(),
                "by_kind": dict(counter.bytes),
                "summary": counter.summary(),
            }

    def log(self, step: int, global_avg_loss: float, global_max_loss: float, grad_norm: float,
            extra_metrics: dict[str, Any] | None = None):
        extra = dict(extra_metrics or {})
        if self.last_comm is not None:
            extra["boost/comm_bytes_per_step"] = self.last_comm["bytes"]
            extra["boost/comm_count_per_step"] = self.last_comm["count"]
            for kind, nbytes in self.last_comm["by_kind"].items():
                extra[f"boost/comm_bytes/{kind}"] = nbytes
        super().log(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=extra)
        if self.last_comm and self.last_comm["count"]:
            logger.info(f"comm/step: {self.last_comm['summary']} (rank 0, all collectives of one step)")


def build_boost_metrics_processor(job_config, parallel_dims, model_args=None, tag: str | None = None):
    return BoostMetricsProcessor(job_config, parallel_dims, tag)

"""A rule of the job table and the job it checks: ``JobContext``, ``Rule``, and the builders of the
simple rows (``at_least``, ``within``, ``one_of``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from boost.training import rules
from boost.training.model.args import ModelArgs


@dataclass
class JobContext:
    """A job and the world size it will run at, with the quantities rules share. ``job`` is a
    ``JobConfig``, or the values one will be built from, read the same way (``job.training.steps``)."""

    job: Any
    world_size: int

    def value(self, field: str) -> Any:
        """The value of a dotted field (``NGPU`` is the world size)."""
        if field == "NGPU":
            return self.world_size
        value = self.job
        for name in field.split("."):
            value = getattr(value, name)
        return value

    @property
    def boost(self):
        return self.job.boost

    @property
    def tp(self) -> int:
        return self.job.parallelism.tensor_parallel_degree

    @property
    def pp(self) -> int:
        return self.job.parallelism.pipeline_parallel_degree

    @property
    def non_shard_degrees(self) -> int:
        """tp × pp × dp_replicate × cp: the mesh dimensions besides dp_shard, which -1 gives the rest."""
        par = self.job.parallelism
        return self.tp * self.pp * par.data_parallel_replicate_degree * par.context_parallel_degree

    @property
    def dp(self) -> int:
        """The data-parallel degree: how many different batches a step reads."""
        par = self.job.parallelism
        return rules.data_parallel_degree(
            self.world_size,
            tp=self.tp,
            pp=self.pp,
            cp=par.context_parallel_degree,
            dp_replicate=par.data_parallel_replicate_degree,
            dp_shard=par.data_parallel_shard_degree,
        )

    @property
    def fsdp_wraps(self) -> bool:
        """Whether FSDP wraps the model (``boost.training.rules.fsdp_wraps``)."""
        par = self.job.parallelism
        return rules.fsdp_wraps(
            dp_replicate=par.data_parallel_replicate_degree,
            dp_shard=self.dp // max(1, par.data_parallel_replicate_degree),
            cp=par.context_parallel_degree,
            tp=self.tp,
            pp=self.pp,
            mixed_precision_param=self.job.training.mixed_precision_param,
        )

    @property
    def compiled_model(self) -> bool:
        return rules.compiles_model(self.job.compile.enable, self.job.compile.components)

    @property
    def microbatches(self) -> int:
        """Forward-backward passes a step: the global batch over what the data-parallel ranks read at once."""
        global_batch, at_once = (
            self.job.training.global_batch_size,
            self.job.training.local_batch_size * self.dp,
        )
        return global_batch // at_once if global_batch > 0 and at_once > 0 else 1

    @cached_property
    def model_args(self) -> ModelArgs:
        return ModelArgs.from_flavor(self.job.model.flavor)

    @property
    def rank(self) -> int:
        """The bottleneck rank the model will be built with."""
        return rules.resolve_rank(self.model_args.dim, self.boost.rank, self.boost.rank_ratio)


Check = Callable[[JobContext], "str | None"]


@dataclass(frozen=True)
class Rule:
    """One row of the table: ``check`` returns ``None`` when the rule holds, else what to change."""

    field: str
    requirement: str
    check: Check
    shown: Callable[[JobContext], Any] | None = None  # the value to quote, when not the field's own

    def problem(self, ctx: JobContext) -> tuple[Any, str] | None:
        """``(value, message)`` when the rule is broken, else ``None``."""
        message = self.check(ctx)
        if message is None:
            return None
        return (self.shown(ctx) if self.shown else ctx.value(self.field)), message


# ----------------------------------------------------------------------------- row builders


def at_least(field: str, low: int, why: str = "", when: Callable[[JobContext], bool] | None = None) -> Rule:
    """``field >= low`` (only where ``when`` holds)."""
    suffix = f" ({why})" if why else ""

    def check(ctx: JobContext) -> str | None:
        if when is not None and not when(ctx):
            return None
        return None if ctx.value(field) >= low else f"must be at least {low}{suffix}"

    condition = (
        f" {when.__doc__}" if when else ""
    )  # the predicate's docstring says when, e.g. "when validation.enable"
    return Rule(field, f"≥ {low}{condition}{suffix}", check)


def within(field: str, low: float, high: float, low_open: bool = False, high_open: bool = False) -> Rule:
    """``low <= field <= high`` (open ends where asked), and finite."""
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    interval = f"{left}{low}, {high if math.isfinite(high) else '∞'}{right}"

    def check(ctx: JobContext) -> str | None:
        v = ctx.value(field)
        inside = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
        return None if inside and not math.isnan(v) else f"must lie in {interval}"

    return Rule(field, f"in {interval}", check)


def one_of(field: str, choices: tuple, why: str = "") -> Rule:
    suffix = f" ({why})" if why else ""
    return Rule(
        field,
        f"one of {', '.join(map(str, choices))}",
        lambda ctx: None if ctx.value(field) in choices else f"choose one of {choices}{suffix}",
    )

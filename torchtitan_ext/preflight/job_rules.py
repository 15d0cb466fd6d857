"""The range and combination rules of a BOOST job: one table, checked in order, rendered into the docs.

Each ``Rule`` names the field it refuses, says in words what must hold (the docs column), and checks
a :class:`JobContext`; a broken rule ends the check with ``<field> = <value>: <what to change>``.
Rules run after the type check (``torchtitan_ext.preflight.config_types``), so they may assume well-typed
values, and in table order, so a rule may assume every rule above it held (the TP-shape rules
assume a known flavor, the batch rules a consistent mesh). The preflight runs them on the job's values
before torchtitan builds its dataclasses, whose ``__post_init__`` checks name no field: the table
restates those checks (``validation.steps``, ``parallelism.context_parallel_load_balancer``) with the
field and the fix.

``python -m torchtitan_ext.preflight.job_rules`` prints the table as it appears in docs/config_errors.md
(a test keeps the two equal).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from boost.training import rules
from boost.training.model.args import FLAVORS, ModelArgs
from boost.training.rules import (
    AC_MODES,
    ATTENTION_TYPES,
    FSDP_IMPLS,
    KINDS,
    LAX_GATES,
    LINEAR_KINDS,
    MASK_TYPES,
    NORM_MODES,
    TP_SCHEMES,
)
from torchtitan_ext.config import DRY_RUN_COMM_MODE

# torchtitan.components.optimizer.build_optimizers knows Adam and AdamW (NotImplementedError otherwise);
# torchtitan_ext.optimizer.build_boost_optimizers adds LORO.
OPTIMIZER_NAMES = ("Adam", "AdamW", "LORO")
# A byte-level BPE holds the 256 byte symbols plus BOS and EOS.
MIN_VOCAB_SIZE = 256 + 2


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


# ----------------------------------------------------------------------------- combination checks


def _mesh_fills_world(ctx: JobContext) -> str | None:
    shard = ctx.job.parallelism.data_parallel_shard_degree
    if shard == -1:
        return None  # the "parallelism" row checks the product
    product = ctx.non_shard_degrees * max(shard, 0)
    if shard >= 1 and product == ctx.world_size:
        return None
    return (
        f"tp×pp×dp_replicate×cp×dp_shard = {product} must equal the world size {ctx.world_size} ({_world_from()}); "
        "set data_parallel_shard_degree = -1 to fill the rest"
    )


def _non_shard_divides_world(ctx: JobContext) -> str | None:
    if ctx.job.parallelism.data_parallel_shard_degree != -1 or ctx.world_size % ctx.non_shard_degrees == 0:
        return None
    return f"must divide the world size {ctx.world_size} ({_world_from()})"


def _world_from() -> str:
    """Where the world size came from: run_train.sh's NGPU, or NGPU × NNODES under scripts/node_train.sh."""
    return "NGPU × NNODES" if os.environ.get("NNODES", "1") != "1" else "NGPU"


def _global_batch_divides(ctx: JobContext) -> str | None:
    global_batch, local = ctx.job.training.global_batch_size, ctx.job.training.local_batch_size
    if global_batch == -1 or (global_batch > 0 and global_batch % (local * ctx.dp) == 0):
        return None
    return (
        f"must be -1 or a positive multiple of local_batch_size × data-parallel degree = {local} × {ctx.dp} "
        f"= {local * ctx.dp} (torchtitan accumulates gradients over the quotient)"
    )


def _microbatch_divides_batch(ctx: JobContext) -> str | None:
    if (
        ctx.pp == 1
        or ctx.job.training.local_batch_size % ctx.job.parallelism.pipeline_parallel_microbatch_size == 0
    ):
        return None
    return f"must divide training.local_batch_size = {ctx.job.training.local_batch_size} under pipeline parallelism"


def _validation_splits_into_microbatches(ctx: JobContext) -> str | None:
    # The schedule splits every batch into the same number of micro-batches as training's
    # (torchtitan_ext.infra.pipeline gives each stage the validation micro-batch's shape too).
    if ctx.pp == 1 or not ctx.job.validation.enable:
        return None
    n = ctx.job.training.local_batch_size // ctx.job.parallelism.pipeline_parallel_microbatch_size
    if ctx.job.validation.local_batch_size % n == 0:
        return None
    return (
        f"must split into the pipeline's {n} micro-batches (training.local_batch_size / "
        "parallelism.pipeline_parallel_microbatch_size): choose a multiple of it"
    )


def _known_pipeline_schedule(ctx: JobContext) -> str | None:
    if ctx.pp == 1:
        return None
    from torch.distributed.pipelining.schedules import get_schedule_class  # torch only under PP

    try:
        get_schedule_class(ctx.job.parallelism.pipeline_parallel_schedule)
    except ValueError as e:
        return f"unknown schedule: {e}"
    return None


def _pipeline_stages(ctx: JobContext) -> tuple[str, bool, int]:
    """The schedule's name, whether it runs several stages per rank, and the stage count over all ranks:
    the parts of ``module_fqns_per_model_part`` where it names them (torchtitan then ignores the rest)."""
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class

    par = ctx.job.parallelism
    multi_stage = issubclass(get_schedule_class(par.pipeline_parallel_schedule), PipelineScheduleMulti)
    if par.module_fqns_per_model_part:
        return par.pipeline_parallel_schedule, multi_stage, len(par.module_fqns_per_model_part)
    stages = rules.pipeline_stage_count(
        multi_stage,
        ctx.pp,
        ctx.model_args.n_layers,
        par.pipeline_parallel_layers_per_stage,
        par.pipeline_parallel_first_stage_less_layers,
        par.pipeline_parallel_last_stage_less_layers,
    )
    return par.pipeline_parallel_schedule, multi_stage, stages


def _stages_named_by_hand(ctx: JobContext) -> bool:
    return bool(ctx.job.parallelism.module_fqns_per_model_part)


def _pipeline_stages_fit_schedule(by_hand: bool) -> Check:
    """The stage count fits the schedule: the rule of ``module_fqns_per_model_part`` where it names the
    stages (``by_hand``), else of ``pipeline_parallel_layers_per_stage``, which sets the count."""

    def check(ctx: JobContext) -> str | None:
        if ctx.pp == 1 or _stages_named_by_hand(ctx) != by_hand:
            return None
        schedule, multi_stage, stages = _pipeline_stages(ctx)
        return rules.pipeline_stages_problem(schedule, multi_stage, ctx.pp, stages)

    return check


def _torchtitan_cuts_the_stages(ctx: JobContext) -> str | None:
    """torchtitan's own split of the stage count (``infra.stage_split``), which raises where it cannot cut
    it, on every rank after start."""
    if ctx.pp == 1 or _stages_named_by_hand(ctx):
        return None
    from torchtitan_ext.infra.stage_split import stage_module_names  # torchtitan only under PP

    par = ctx.job.parallelism
    _, multi_stage, _ = _pipeline_stages(ctx)
    try:
        stage_module_names(par, multi_stage, ctx.pp, ctx.model_args.n_layers)
    except ValueError as e:
        return (
            f"torchtitan's split (generate_llm_fqn_per_model_part; its input and output weights are "
            f"pipeline_parallel_first_stage_less_layers = {par.pipeline_parallel_first_stage_less_layers} and "
            f"pipeline_parallel_last_stage_less_layers = {par.pipeline_parallel_last_stage_less_layers}) refuses "
            f"them: {str(e).rstrip('.')}; cut fewer stages (a lower pipeline_parallel_degree, a single-stage "
            "schedule, or pipeline_parallel_layers_per_stage), lower those two, or name each stage's modules "
            "in parallelism.module_fqns_per_model_part"
        )
    return None


def _stage_cut(ctx: JobContext) -> str:
    """The stages torchtitan's split is asked to cut, and from what: the value its rule quotes."""
    _, _, stages = _pipeline_stages(ctx)
    return f"{stages} stages of flavor {ctx.job.model.flavor}'s {ctx.model_args.n_layers} layers"


def _stages_named_but_unread(ctx: JobContext) -> str | None:
    """Stages named where nothing reads them, or beside a setting torchtitan then ignores: either way one of
    the two settings would be silently dropped."""
    par = ctx.job.parallelism
    if not _stages_named_by_hand(ctx):
        return None
    if ctx.pp == 1:
        return (
            "names pipeline stages, which only pipeline parallelism reads: set "
            "parallelism.pipeline_parallel_degree > 1, or unset it"
        )
    if par.pipeline_parallel_layers_per_stage is not None:
        return (
            "names the stages, so torchtitan ignores parallelism.pipeline_parallel_layers_per_stage = "
            f"{par.pipeline_parallel_layers_per_stage}: unset one of the two"
        )
    return None


def _module_split(ctx: JobContext) -> str | None:
    if ctx.pp == 1 or not _stages_named_by_hand(ctx):
        return None
    return rules.module_split_problem(ctx.job.parallelism.module_fqns_per_model_part, ctx.model_args.n_layers)


def _enough_microbatches(ctx: JobContext) -> str | None:
    local_batch = ctx.job.training.local_batch_size
    if ctx.pp == 1 or local_batch < 1:  # the training.local_batch_size row names a batch below 1
        return None
    schedule, _, stages = _pipeline_stages(ctx)
    return rules.pipeline_microbatch_problem(
        schedule, local_batch, ctx.job.parallelism.pipeline_parallel_microbatch_size, ctx.pp, stages
    )


def _sequence_parallel_sequence(ctx: JobContext, seq_len: int) -> str | None:
    """A sequence the validator runs, split over the TP ranks as training's is (``boost.sequence_parallel``)."""
    return rules.sequence_parallel_length_problem(
        ctx.boost.sequence_parallel, ctx.boost.tp_scheme, seq_len, ctx.tp
    )


def _context_parallel_sequence(ctx: JobContext, seq_len: int) -> str | None:
    par = ctx.job.parallelism
    return rules.context_parallel_problem(
        par.context_parallel_degree,
        seq_len,
        ctx.boost.attn_type,
        par.context_parallel_load_balancer,
        ctx.tp,
        ctx.boost.sequence_parallel,
    )


def _rank_ratio_in_range(ctx: JobContext) -> str | None:
    b = ctx.boost
    if not KINDS[b.linear].low_rank or b.rank or 0 < b.rank_ratio < 1:
        return None
    return f"must lie in (0, 1); the paper uses {rules.DEFAULT_RANK_RATIO}"


def _rank_below_smallest_dim(ctx: JobContext) -> str | None:
    if not KINDS[ctx.boost.linear].low_rank:
        return None
    args = ctx.model_args
    problem = rules.rank_problem(ctx.rank, args.dim, args.kv_heads * args.head_dim, args.ffn_dim)
    return None if problem is None else f"{problem} for flavor {ctx.job.model.flavor}"


def _tp_divides_model(ctx: JobContext) -> str | None:
    if ctx.tp == 1:
        return None
    args = ctx.model_args
    problem = rules.tp_shape_problem(
        rules.tp_sharded_dims(ctx.boost.tp_scheme, args.n_heads, args.kv_heads, args.dim, args.ffn_dim),
        ctx.tp,
    )
    return None if problem is None else f"{problem} of flavor {ctx.job.model.flavor}"


def _vocab_divisible_by_tp(ctx: JobContext) -> str | None:
    # A tokenizer from model.hf_assets_path has its own size: torchtitan_ext.data.tokenizer checks that one.
    if ctx.tp == 1 or ctx.job.model.hf_assets_path or ctx.boost.tokenizer_vocab_size % ctx.tp == 0:
        return None
    return f"must be divisible by the TP degree {ctx.tp}"


def _one_activation_checkpoint_switch(ctx: JobContext) -> str | None:
    torchtitan_mode, boost_mode = ctx.job.activation_checkpoint.mode, ctx.boost.activation_checkpoint
    if torchtitan_mode == "none":
        return None
    if boost_mode not in ("none", torchtitan_mode):
        return (
            f"conflicts with boost.activation_checkpoint = {boost_mode!r}: BOOST has one switch; "
            'set [activation_checkpoint] mode = "none" and keep boost.activation_checkpoint'
        )
    return (
        "BOOST's switch is boost.activation_checkpoint (none | full | lowrank): set [activation_checkpoint] "
        'mode = "none" (torchtitan\'s default is "selective") and use boost.activation_checkpoint'
    )


def _seed_has_a_shuffle(ctx: JobContext) -> str | None:
    training = ctx.job.training
    if training.dataset_seed is None or training.dataset.lower() == "tokens":
        return None
    return (
        f'only the "tokens" dataset shuffles (training.dataset = {training.dataset!r} reads in its own order): '
        "remove it"
    )


def _tokens_read_in_process(section: str) -> Check:
    def check(ctx: JobContext) -> str | None:
        cfg = getattr(ctx.job, section)
        if section == "validation" and not cfg.enable:
            return None
        if cfg.dataset.lower() != "tokens" or cfg.dataloader.num_workers == 0:
            return None
        return (
            'the "tokens" dataset reads a memory map in the training process, hundreds of times faster than a '
            "rank consumes (bench/results/token_loader.md); worker processes would each read the same "
            "samples: set it to 0"
        )

    return check


def _loro(ctx: JobContext) -> bool:
    '''when optimizer.name = "LORO"'''
    return ctx.job.optimizer.name == "LORO"


def _cosine_restart(ctx: JobContext) -> bool:
    '''when lr_scheduler.decay_type = "cosine_restart"'''
    return ctx.job.lr_scheduler.decay_type == "cosine_restart"


def _loro_rank_fits(ctx: JobContext) -> str | None:
    if not _loro(ctx) or not KINDS[ctx.boost.linear].low_rank:
        return None
    args = ctx.model_args
    return rules.loro_rank_problem(ctx.rank, min(args.dim, args.kv_heads * args.head_dim, args.ffn_dim))


def _loro_cycle_resumes_with_the_schedule(ctx: JobContext) -> str | None:
    # LORO counts its exact/refresh cycle in the optimizer's state, the schedule its restarts in its own
    excluded = set(ctx.job.checkpoint.exclude_from_loading)
    if not _loro(ctx) or ("optimizer" in excluded) == ("lr_scheduler" in excluded):
        return None
    return (
        "LORO's exact steps and moment refreshes count in the optimizer's state, the learning rate's restarts "
        "in the scheduler's: resumed with one and not the other, they fall out of step. Exclude both "
        "(a fresh optimizer and schedule) or neither"
    )


def _loro_lr_scaler(ctx: JobContext) -> str | None:
    v = ctx.job.optimizer.loro_lr_scaler
    if v == -1 or (0 < v < math.inf):
        return None
    return "use -1 (rank / dim, the authors' recipes) or a positive factor"


def _restart_schedule_fits(ctx: JobContext) -> str | None:
    sched = ctx.job.lr_scheduler
    if not _cosine_restart(ctx):
        return None
    total = sched.total_steps or ctx.job.training.steps
    if sched.warmup_steps + sched.restart_adjust_steps < total:
        return None
    return (
        f"warmup_steps + restart_adjust_steps = {sched.warmup_steps + sched.restart_adjust_steps} must be "
        f"below the schedule's {total} steps (the authors' recipes use restart_adjust_steps = -warmup_steps)"
    )


def _validation_applies(ctx: JobContext) -> bool:
    """when validation.enable"""
    return ctx.job.validation.enable


def _profiling_applies(ctx: JobContext) -> bool:
    """when profiling.enable_profiling"""
    return ctx.job.profiling.enable_profiling


def _known_compile_backend(ctx: JobContext) -> str | None:
    compile_cfg = ctx.job.compile
    if not compile_cfg.enable or not compile_cfg.components:
        return None
    import torch._dynamo  # torch only where something compiles

    if compile_cfg.backend in torch._dynamo.list_backends(exclude_tags=()):  # the debug ones (eager) too
        return None
    return "not a torch.compile backend this torch knows: use inductor (the default), aot_eager or eager"


def _early_step_problem(ctx: JobContext) -> str | None:
    """An optimizer stepped in backward (torchtitan's ``OptimizersInBackwardContainer``) steps each parameter as
    its gradient lands: no pipeline schedule runs it, and no norm of the whole gradient exists to clip."""
    if not ctx.job.optimizer.early_step_in_backward or _loro(ctx):  # LORO's own row names it
        return None
    if ctx.pp > 1:
        return "torchtitan steps no optimizer in backward under pipeline parallelism: set it false"
    if ctx.microbatches > 1:
        return (
            f"training.global_batch_size = {ctx.job.training.global_batch_size} accumulates {ctx.microbatches} "
            "backward passes a step, and each would step the optimizer: set it false, or the global batch to "
            "local_batch_size × the data-parallel degree"
        )
    max_norm = ctx.job.training.max_norm
    if math.isfinite(max_norm):
        return (
            f"each parameter steps before any gradient norm is taken, so training.max_norm = {max_norm} would "
            "clip nothing (the logged grad_norm is 0): set it false, or training.max_norm = inf to train unclipped"
        )
    return None


def _is_set(field: str, message: str) -> Check:
    """A switch the trainer never reads: refused when on, rather than dropped."""
    return lambda ctx: message if ctx.value(field) else None


def _wandb_importable(ctx: JobContext) -> str | None:
    import importlib.util

    if not ctx.job.metrics.enable_wandb or importlib.util.find_spec("wandb") is not None:
        return None
    return "wandb is not installed, and torchtitan's logger imports it on every rank: install it, or set it false"


# the longest a rank waits for a collective (seconds): a week. A collective waiting longer has hung, and
# datetime.timedelta (which torch's process group takes) overflows not far above.
MAX_COMM_TIMEOUT_S = 7 * 24 * 3600
# torch.manual_seed takes a 64-bit integer
SEED_RANGE = (-(2**63), 2**63 - 1)


def _comm_timeout(field: str) -> Rule:
    return Rule(
        field,
        f"in [1, {MAX_COMM_TIMEOUT_S}] (a week)",
        lambda c: (
            None
            if 1 <= c.value(field) <= MAX_COMM_TIMEOUT_S
            else f"must lie in [1, {MAX_COMM_TIMEOUT_S}] seconds (a week): a collective waiting longer has hung"
        ),
    )


# ----------------------------------------------------------------------------- the table

RULES: tuple[Rule, ...] = (
    # The job
    one_of("model.name", (rules.MODEL_NAME,), "this launcher trains BOOST's model"),
    one_of("model.flavor", tuple(FLAVORS)),
    Rule(
        "model.converters",
        "empty (BOOST's model takes none of torchtitan's converters)",
        lambda c: (
            None
            if not c.job.model.converters
            else "BOOST's model takes none of torchtitan's model converters (quantize.linear.float8, "
            "quantize.linear.mx), which its trainer does not register: leave it empty"
        ),
    ),
    Rule(
        "compile.backend",
        "a backend torch._dynamo.list_backends() knows, debug ones included (compile.enable)",
        _known_compile_backend,
    ),
    Rule(
        "debug.seed",
        "unset, or a 64-bit integer",
        lambda c: (
            None
            if c.job.debug.seed is None or SEED_RANGE[0] <= c.job.debug.seed <= SEED_RANGE[1]
            else "torch seeds its generators with a 64-bit integer: choose one in [-2**63, 2**63 - 1], or unset it"
        ),
    ),
    Rule(
        "fault_tolerance.enable",
        "false (torchtitan 0.2.2's trainer builds no TorchFT manager)",
        _is_set(
            "fault_tolerance.enable",
            "torchtitan 0.2.2's trainer builds no fault-tolerance manager (TorchFT): nothing would recover a "
            "replica; set it false",
        ),
    ),
    Rule(
        "memory_estimation.enable",
        "false (torchtitan 0.2.2's trainer runs no memory estimation)",
        _is_set(
            "memory_estimation.enable",
            "torchtitan 0.2.2's trainer runs no memory estimation (only its forge experiment reads it): set it "
            "false",
        ),
    ),
    Rule(
        "parallelism.enable_async_tensor_parallel",
        "false (BOOST's parallelization applies no async TP)",
        _is_set(
            "parallelism.enable_async_tensor_parallel",
            "BOOST's parallelization applies no async TP (torchtitan's llama parallelize reads it, BOOST's "
            "model does not use that): set it false",
        ),
    ),
    Rule("metrics.enable_wandb", "false where wandb is not installed", _wandb_importable),
    one_of("boost.linear", LINEAR_KINDS),
    one_of("boost.lax_gate", LAX_GATES),
    Rule(
        "boost.lax_gate_form",
        "one of factored, kron (kron: boost.lax_gate = tensorized)",
        lambda c: rules.lax_gate_form_problem(c.boost.lax_gate, c.boost.lax_gate_form),
    ),
    one_of("boost.norm", NORM_MODES),
    one_of("boost.tp_scheme", TP_SCHEMES),
    one_of("boost.activation_checkpoint", AC_MODES),
    one_of("boost.fsdp", FSDP_IMPLS),
    one_of("boost.attn_type", ATTENTION_TYPES),
    one_of("boost.attn_mask_type", MASK_TYPES),
    Rule(
        "boost.attn_mask_type",
        "one the attention kernel computes (varlen: block_causal)",
        lambda c: rules.attention_mask_problem(c.boost.attn_type, c.boost.attn_mask_type),
    ),
    Rule(
        "boost.log_comm",
        "false with boost.attn_type = flex (its compiled kernel runs under no dispatch mode)",
        lambda c: rules.comm_count_problem(c.boost.attn_type, c.boost.log_comm),
    ),
    Rule(
        "activation_checkpoint.mode",
        '"none"; BOOST\'s one switch is boost.activation_checkpoint',
        _one_activation_checkpoint_switch,
    ),
    Rule(
        "boost.tokenizer_vocab_size",
        f"≥ {MIN_VOCAB_SIZE} (256 bytes + BOS + EOS)",
        lambda c: (
            None
            if c.boost.tokenizer_vocab_size >= MIN_VOCAB_SIZE
            else f"a byte-level BPE needs at least {MIN_VOCAB_SIZE} tokens"
        ),
    ),
    Rule(
        "boost.rank",
        "≥ 0 (0: use rank_ratio)",
        lambda c: None if c.boost.rank >= 0 else "must be positive (or 0 to use boost.rank_ratio)",
    ),
    Rule("boost.rank_ratio", "in (0, 1) when boost.rank = 0", _rank_ratio_in_range),
    Rule(
        "boost.rank",
        "resolved rank in (0, smallest factored dim)",
        _rank_below_smallest_dim,
        shown=lambda c: c.rank,
    ),
    within("boost.stop_grace_s", 0, math.inf, low_open=True),
    at_least("boost.stop_check_every", 1, "steps between the ranks' agreement on a stop signal"),
    # Processes and the device mesh
    at_least("NGPU", 1, "processes on this node"),
    at_least("parallelism.tensor_parallel_degree", 1),
    at_least("parallelism.pipeline_parallel_degree", 1),
    at_least("parallelism.data_parallel_replicate_degree", 1),
    at_least("parallelism.context_parallel_degree", 1),
    Rule(
        "boost.attn_type",
        "sdpa or flex under context or pipeline parallelism (varlen has neither)",
        lambda c: rules.attention_layout_problem(
            c.boost.attn_type, c.job.parallelism.context_parallel_degree, c.pp
        ),
    ),
    Rule(
        "parallelism.context_parallel_load_balancer",
        'a name, or None; not "" (torchtitan checks it even at CP 1)',
        lambda c: (
            None
            if c.job.parallelism.context_parallel_load_balancer != ""
            else 'an empty name is no balancer: leave it unset (torchtitan\'s "headtail"), or pass '
            "--parallelism.context_parallel_load_balancer None for none"
        ),
    ),
    Rule(
        "parallelism.context_parallel_load_balancer",
        "headtail, ptrr (flex only) or None",
        lambda c: rules.load_balancer_problem(
            c.job.parallelism.context_parallel_load_balancer,
            c.boost.attn_type,
            c.job.parallelism.context_parallel_degree,
        ),
    ),
    Rule(
        "parallelism.expert_parallel_degree",
        "1 (BOOST models have no experts)",
        lambda c: (
            None if c.job.parallelism.expert_parallel_degree == 1 else "BOOST models have no experts: use 1"
        ),
    ),
    Rule(
        "parallelism.data_parallel_shard_degree",
        "-1, or tp×pp×dp_replicate×cp×dp_shard = NGPU",
        _mesh_fills_world,
    ),
    Rule(
        "parallelism",
        "tp×pp×dp_replicate×cp divides NGPU when dp_shard = -1",
        _non_shard_divides_world,
        shown=lambda c: f"tp×pp×dp_replicate×cp = {c.non_shard_degrees}",
    ),
    # Tensor parallelism
    Rule(
        "boost.tp_scheme",
        "megatron for linear = full, btp or vanilla otherwise (TP > 1)",
        lambda c: rules.tp_scheme_problem(c.boost.linear, c.boost.tp_scheme, c.tp),
    ),
    Rule(
        "parallelism.tensor_parallel_degree",
        "divides n_heads, kv_heads, dim, ffn_dim of the flavor",
        _tp_divides_model,
    ),
    Rule("boost.tokenizer_vocab_size", "divisible by the TP degree", _vocab_divisible_by_tp),
    Rule(
        "boost.group_linears",
        "false under tp_scheme = vanilla (TP > 1)",
        lambda c: rules.grouping_problem(c.boost.tp_scheme, c.boost.group_linears, c.tp),
    ),
    Rule(
        "boost.rank",
        "divisible by the TP degree under tp_scheme = vanilla",
        lambda c: rules.vanilla_rank_problem(c.boost.tp_scheme, c.rank, c.tp),
        shown=lambda c: c.rank,
    ),
    Rule(
        "boost.norm",
        '"sync" or "local" when btp runs ungrouped (TP > 1)',
        lambda c: rules.online_norm_problem(
            c.boost.linear, c.boost.tp_scheme, c.boost.norm, c.boost.group_linears, c.tp
        ),
    ),
    Rule(
        "boost.sequence_parallel",
        "megatron or btp; seq_len divisible by the TP degree",
        lambda c: rules.sequence_parallel_problem(
            c.boost.sequence_parallel, c.boost.tp_scheme, c.job.training.seq_len, c.tp
        ),
    ),
    Rule(
        "boost.activation_checkpoint",
        '"lowrank" only under tp_scheme = btp with TP > 1',
        lambda c: rules.activation_checkpoint_problem(c.boost.activation_checkpoint, c.boost.tp_scheme, c.tp),
    ),
    # Pipeline parallelism
    Rule(
        "parallelism.pipeline_parallel_degree",
        "≤ n_layers",
        lambda c: rules.pipeline_problem(c.boost.linear, c.pp, c.model_args.n_layers),
    ),
    at_least("parallelism.pipeline_parallel_microbatch_size", 1),
    Rule(
        "parallelism.pipeline_parallel_microbatch_size",
        "divides training.local_batch_size (PP > 1)",
        _microbatch_divides_batch,
    ),
    Rule(
        "parallelism.pipeline_parallel_schedule",
        "a schedule torch.distributed.pipelining knows (PP > 1)",
        _known_pipeline_schedule,
    ),
    Rule(
        "parallelism.pipeline_parallel_schedule_csv",
        "empty: a schedule named in pipeline_parallel_schedule (PP > 1)",
        lambda c: rules.pipeline_csv_problem(c.job.parallelism.pipeline_parallel_schedule_csv, c.pp),
    ),
    Rule(
        "parallelism.pipeline_parallel_schedule",
        "not a zero-bubble schedule (InterleavedZeroBubble, ZBVZeroBubble, DualPipeV) on a compiled model",
        lambda c: rules.pipeline_schedule_problem(
            c.job.parallelism.pipeline_parallel_schedule, c.pp, c.compiled_model
        ),
    ),
    Rule(
        "parallelism.pipeline_parallel_layers_per_stage",
        "unset, or ≥ 1",
        lambda c: (
            None
            if (c.job.parallelism.pipeline_parallel_layers_per_stage or 1) >= 1
            else "must be at least 1 (or be left unset: torchtitan's default stage count)"
        ),
    ),
    Rule(
        "parallelism.module_fqns_per_model_part",
        "unset, or set under PP > 1 with pipeline_parallel_layers_per_stage unset (each would be ignored)",
        _stages_named_but_unread,
    ),
    Rule(
        "parallelism.module_fqns_per_model_part",
        "unset, or naming tok_embeddings, layers.0 … layers.n-1, norm, output over its parts, each once, in order "
        "(PP > 1)",
        _module_split,
    ),
    Rule(
        "parallelism.module_fqns_per_model_part",
        "unset, or as many parts as pipeline_parallel_layers_per_stage's stages must be (PP > 1)",
        _pipeline_stages_fit_schedule(by_hand=True),
    ),
    Rule(
        "parallelism.pipeline_parallel_layers_per_stage",
        "unset, or giving a multiple of pp stages: 1 per rank single-stage, ≥ 2 multi-stage, 2 for ZBV/DualPipeV",
        _pipeline_stages_fit_schedule(by_hand=False),
    ),
    Rule(
        "parallelism",
        "stages torchtitan's split can cut from the layers, the embedding and the head weighing "
        "pipeline_parallel_first/last_stage_less_layers (PP > 1, module_fqns_per_model_part unset)",
        _torchtitan_cuts_the_stages,
        shown=_stage_cut,
    ),
    Rule(
        "training.local_batch_size",
        "/ pipeline_parallel_microbatch_size ≥ the stages (1F1B, DualPipeV); "
        "equal rounds of n // pp (Interleaved1F1B, InterleavedZeroBubble) (PP > 1)",
        _enough_microbatches,
    ),
    Rule(
        "validation.local_batch_size",
        "a multiple of the pipeline's micro-batch count (PP > 1, validation on)",
        _validation_splits_into_microbatches,
    ),
    Rule(
        "validation.enable",
        "false with a V-shaped pipeline schedule (ZBVZeroBubble, DualPipeV)",
        lambda c: rules.pipeline_validation_problem(
            c.job.parallelism.pipeline_parallel_schedule, c.pp, c.job.validation.enable
        ),
    ),
    # Training
    at_least("training.steps", 1),
    at_least("training.local_batch_size", 1),
    at_least("training.seq_len", 2, "an input and a label token"),
    Rule(
        "training.seq_len",
        "divisible by cp (× 2 under a load balancer, × tp under sequence parallelism; cp × 128 for flex)",
        lambda c: _context_parallel_sequence(c, c.job.training.seq_len),
    ),
    Rule(
        "training.global_batch_size",
        "-1, or a multiple of local_batch_size × data-parallel degree",
        _global_batch_divides,
    ),
    # after the degrees and the batch they read are checked
    Rule(
        "boost.fsdp",
        "simple_fsdp where FSDP wraps: compiled model, no PP, HSDP, CPU offload or LORO, reshard policy default",
        lambda c: rules.simple_fsdp_problem(
            c.boost.fsdp,
            fsdp_wraps=c.fsdp_wraps,
            compiled=c.compiled_model,
            pp=c.pp,
            dp_replicate=c.job.parallelism.data_parallel_replicate_degree,
            cpu_offload=c.job.training.enable_cpu_offload,
            reshard_policy=c.job.parallelism.fsdp_reshard_after_forward,
            optimizer=c.job.optimizer.name,
        ),
    ),
    Rule(
        "boost.cudagraphs",
        "compiled (inductor), SimpleFSDP where FSDP wraps, one micro-batch, no PP, HSDP, CPU offload or LORO",
        lambda c: rules.cudagraphs_problem(
            c.boost.cudagraphs,
            compiled=c.compiled_model,
            backend=c.job.compile.backend,
            fsdp=c.boost.fsdp,
            fsdp_wraps=c.fsdp_wraps,
            pp=c.pp,
            dp_replicate=c.job.parallelism.data_parallel_replicate_degree,
            microbatches=c.microbatches,
            cpu_offload=c.job.training.enable_cpu_offload,
            optimizer=c.job.optimizer.name,
        ),
    ),
    within("training.max_norm", 0, math.inf, low_open=True),
    at_least("training.gc_freq", 1),
    at_least("training.dataloader.num_workers", 0),
    Rule(
        "training.dataloader.num_workers",
        '0 when training.dataset = "tokens" (read in the training process)',
        _tokens_read_in_process("training"),
    ),
    Rule("training.dataset_seed", 'unset unless training.dataset = "tokens"', _seed_has_a_shuffle),
    # Optimizer and schedule
    one_of("optimizer.name", OPTIMIZER_NAMES, "torchtitan's build_optimizers"),
    within("optimizer.lr", 0, math.inf, low_open=True, high_open=True),
    within("optimizer.eps", 0, math.inf, low_open=True, high_open=True),
    within("optimizer.beta1", 0, 1, high_open=True),
    within("optimizer.beta2", 0, 1, high_open=True),
    within("optimizer.weight_decay", 0, math.inf, high_open=True),
    at_least("lr_scheduler.warmup_steps", 0),
    Rule(
        "lr_scheduler.total_steps",
        "unset (training.steps), or ≥ 1",
        lambda c: (
            None
            if c.job.lr_scheduler.total_steps is None or c.job.lr_scheduler.total_steps >= 1
            else "must be at least 1 (or be left unset: training.steps)"
        ),
    ),
    Rule(
        "lr_scheduler.decay_ratio",
        "unset, or in [0, 1]",
        lambda c: (
            None
            if c.job.lr_scheduler.decay_ratio is None or 0 <= c.job.lr_scheduler.decay_ratio <= 1
            else "must lie in [0, 1] (or be left unset)"
        ),
    ),
    within("lr_scheduler.min_lr_factor", 0, 1),
    # LORO and its schedule
    Rule(
        "optimizer.name",
        '"LORO" only with boost.linear = "svd" (B·A must be the layer\'s weight)',
        lambda c: rules.loro_kind_problem(c.boost.linear) if _loro(c) else None,
    ),
    Rule(
        "boost.rank", "2·rank ≤ min(dim, kv dim, ffn_dim) under LORO", _loro_rank_fits, shown=lambda c: c.rank
    ),
    at_least("optimizer.loro_freq", 1, "steps between LORO's exact steps"),
    at_least("optimizer.loro_refresh_freq", 0, "0: never"),
    Rule("optimizer.loro_lr_scaler", "-1 (rank / dim) or a positive factor", _loro_lr_scaler),
    Rule(
        "optimizer.early_step_in_backward",
        "false under LORO",
        lambda c: (
            "LORO's exact step needs every factor's gradient at once, not one parameter's in backward: set "
            "it false"
            if _loro(c) and c.job.optimizer.early_step_in_backward
            else None
        ),
    ),
    Rule(
        "optimizer.early_step_in_backward",
        "false under PP, with gradient accumulation, and with a finite training.max_norm (nothing is clipped)",
        _early_step_problem,
    ),
    Rule(
        "checkpoint.exclude_from_loading",
        "under LORO, optimizer and lr_scheduler loaded together or neither",
        _loro_cycle_resumes_with_the_schedule,
    ),
    at_least("lr_scheduler.restart_every", 1, "steps per cosine_restart cycle"),
    at_least("lr_scheduler.restart_warmup_steps", 0),
    Rule(
        "lr_scheduler.min_lr_factor",
        'in (0, 1] under decay_type = "cosine_restart"',
        lambda c: (
            "must lie in (0, 1] for cosine_restart (the authors' schedule asserts it; their recipes use 0.1)"
            if _cosine_restart(c) and not 0 < c.job.lr_scheduler.min_lr_factor <= 1
            else None
        ),
    ),
    Rule(
        "lr_scheduler.restart_adjust_steps",
        'warmup_steps + restart_adjust_steps < the schedule\'s steps under "cosine_restart"',
        _restart_schedule_fits,
    ),
    # Checkpoints, metrics, validation, profiling, communication
    at_least("checkpoint.interval", 1),
    Rule(
        "checkpoint.keep_latest_k",
        "0 (keep all) or ≥ 2",
        lambda c: (
            None
            if c.job.checkpoint.keep_latest_k == 0 or c.job.checkpoint.keep_latest_k >= 2
            else "use 0 to keep every checkpoint, or at least 2 (the newest may still be being written)"
        ),
    ),
    at_least("checkpoint.load_step", -1, "-1: the newest"),
    Rule(
        "checkpoint.last_save_in_hf",
        "false (BOOST's model has no state-dict adapter in torchtitan; export after training)",
        lambda c: (
            "BOOST gives torchtitan's checkpointer no Hugging Face state-dict adapter: set it false, and export "
            "the saved checkpoint with python -m boost.after_training.interop export --config <toml> --out <dir>"
            if c.job.checkpoint.enable and c.job.checkpoint.last_save_in_hf
            else None
        ),
    ),
    at_least("metrics.log_freq", 1),
    at_least("validation.freq", 1, when=_validation_applies),
    Rule(
        "validation.steps",
        "-1 (the whole set) or ≥ 1 (torchtitan checks it even when validation is off)",
        lambda c: (
            None
            if c.job.validation.steps == -1 or c.job.validation.steps >= 1
            else "use -1 for the whole validation set, or at least 1"
        ),
    ),
    at_least("validation.local_batch_size", 1, when=_validation_applies),
    at_least("validation.seq_len", 2, when=_validation_applies),
    Rule(
        "validation.seq_len",
        "divisible as training.seq_len under CP and sequence parallelism, when validation.enable",
        lambda c: (
            _context_parallel_sequence(c, c.job.validation.seq_len)
            or _sequence_parallel_sequence(c, c.job.validation.seq_len)
            if _validation_applies(c)
            else None
        ),
    ),
    Rule(
        "validation.dataloader.num_workers",
        '0 when validation.dataset = "tokens" and validation.enable',
        _tokens_read_in_process("validation"),
    ),
    at_least("profiling.profile_freq", 1, when=_profiling_applies),
    at_least("profiling.profiler_active", 1, when=_profiling_applies),
    at_least("profiling.profiler_warmup", 0, when=_profiling_applies),
    _comm_timeout("comm.init_timeout_seconds"),
    _comm_timeout("comm.train_timeout_seconds"),
    # torch's LocalTensor simulation of every rank in one process: BOOST's seeded init reads each rank's
    # shard offsets as whole numbers, which it makes per-rank symbols (it stops there with an AttributeError)
    one_of(
        "comm.mode",
        ("default", DRY_RUN_COMM_MODE),
        "fake_backend is DRY_RUN=1's; local_tensor does not run BOOST",
    ),
    Rule(
        "checkpoint.enable",
        "false in a dry run (comm.mode fake_backend)",
        lambda c: (
            "a dry run plays one rank of NGPU, and a checkpoint holds every rank's shards: its save at the last "
            "step cannot be planned across the fake process group; pass --checkpoint.no-enable"
            if c.job.comm.mode == DRY_RUN_COMM_MODE and c.job.checkpoint.enable
            else None
        ),
    ),
)


def broken_rule(job: Any, world_size: int) -> tuple[Rule, Any, str] | None:
    """The first rule of ``RULES`` that ``job`` at ``world_size`` breaks, with the value and message."""
    ctx = JobContext(job, world_size)
    for rule in RULES:
        found = rule.problem(ctx)
        if found is not None:
            return rule, *found
    return None


def kernel_bound(rule: Rule, job: Any, world_size: int) -> bool:
    """Whether ``job`` breaks ``rule`` only with its ``boost.attn_type``: another kernel passes it. The
    refusal is then the kernel's, and a machine that cannot train the kernel at all has the one to say first."""
    if job.boost.attn_type not in ATTENTION_TYPES:
        return False
    for kind in ATTENTION_TYPES:
        other = copy.deepcopy(job)
        other.boost.attn_type = kind
        if rule.problem(JobContext(other, world_size)) is None:
            return True
    return False


def rules_markdown() -> str:
    """``RULES`` as the markdown table in docs/config_errors.md."""
    rows = ["| field | must be |", "|---|---|"]
    rows += [f"| `{rule.field}` | {rule.requirement.replace('|', '/')} |" for rule in RULES]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(rules_markdown(), end="")

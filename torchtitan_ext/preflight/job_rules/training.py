"""Training's rows: the steps and batch, the FSDP and CUDA-graph switches, the optimizer and its
schedule, LORO.

Rows of ``RULES`` (``torchtitan_ext.preflight.job_rules``), in table order."""

from __future__ import annotations

import math

from boost.training import rules
from boost.training.rules import KINDS
from torchtitan_ext.data.dataset_check import BOOST_DATASETS
from torchtitan_ext.preflight.job_rules.rule import Check, JobContext, Rule, at_least, one_of, within

# torchtitan.components.optimizer.build_optimizers knows Adam and AdamW (NotImplementedError otherwise);
# torchtitan_ext.optimizer.build_boost_optimizers adds LORO.
OPTIMIZER_NAMES = ("Adam", "AdamW", "LORO")


def _global_batch_divides(ctx: JobContext) -> str | None:
    global_batch, local = ctx.job.training.global_batch_size, ctx.job.training.local_batch_size
    if global_batch == -1 or (global_batch > 0 and global_batch % (local * ctx.dp) == 0):
        return None
    return (
        f"must be -1 or a positive multiple of local_batch_size × data-parallel degree = {local} × {ctx.dp} "
        f"= {local * ctx.dp} (torchtitan accumulates gradients over the quotient)"
    )


def _seed_has_a_shuffle(ctx: JobContext) -> str | None:
    training = ctx.job.training
    if training.dataset_seed is None or training.dataset.lower() == "tokens":
        return None
    return (
        f'only the "tokens" dataset shuffles (training.dataset = {training.dataset!r} reads in its own order): '
        "remove it"
    )


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


def _early_step_problem(ctx: JobContext) -> str | None:
    """An optimizer stepped in backward (torchtitan's ``OptimizersInBackwardContainer``) steps each parameter as
    its gradient lands: no pipeline schedule runs it, and no norm of the whole gradient exists, to clip or for
    the non-finite guard to read (``guards/nonfinite_guard.py``: a step whose gradients overflowed would be
    applied and saved; tried: lr 1e30, its checkpoint held 47 of 51 tensors non-finite, the run exited 0)."""
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
    clipped = f"training.max_norm = {max_norm} would clip nothing, and " if math.isfinite(max_norm) else ""
    return (
        f"each parameter steps before any gradient norm is taken, so {clipped}BOOST's non-finite guard, which "
        "reads that norm before every checkpoint, would let a NaN/inf step be applied and saved (the logged "
        "grad_norm is 0): set it false"
    )


def context_parallel_sequence(ctx: JobContext, seq_len: int) -> str | None:
    par = ctx.job.parallelism
    return rules.context_parallel_problem(
        par.context_parallel_degree,
        seq_len,
        ctx.boost.attn_type,
        par.context_parallel_load_balancer,
        ctx.tp,
        ctx.boost.sequence_parallel,
    )


def tokens_read_in_process(section: str) -> Check:
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


# BOOST's text datasets are map-style ``datasets.Dataset``s (torchtitan_ext/data/text_datasets.py), which
# torchtitan's HuggingFaceTextDataset iterates whole in every DataLoader worker: it splits by data-parallel
# rank, not by worker (a streaming dataset of the hub splits its shards over workers itself)
_MAP_STYLE_TEXT = BOOST_DATASETS


def text_workers_read_alike(section: str) -> Check:
    def check(ctx: JobContext) -> str | None:
        cfg = getattr(ctx.job, section)
        if section == "validation" and not cfg.enable:
            return None
        if cfg.dataset.lower() not in _MAP_STYLE_TEXT or cfg.dataloader.num_workers <= 1:
            return None
        return (
            f"dataset {cfg.dataset!r} is one map-style dataset that every DataLoader worker reads whole "
            f"(torchtitan splits it by data-parallel rank, not by worker), so each of the "
            f"{cfg.dataloader.num_workers} workers yields the same batches, each read "
            "that many times: set it to 0 or 1"
        )

    return check


def _schedule_covers_training(ctx: JobContext) -> str | None:
    sched, steps = ctx.job.lr_scheduler, ctx.job.training.steps
    if sched.total_steps is None or sched.total_steps >= steps:
        return None
    return (
        f"ends the learning-rate schedule before training.steps = {steps}: past its end torchtitan's linear "
        "and sqrt decays turn the learning rate negative, cosine (and cosine_restart) climb back up, and with "
        "no decay steps left (warmup_steps ≥ total_steps) the step after it stops on an AssertionError: set "
        "it to at least training.steps, or leave it unset"
    )


ROWS: tuple[Rule, ...] = (
    # Training
    at_least("training.steps", 1),
    at_least("training.local_batch_size", 1),
    at_least("training.seq_len", 2, "an input and a label token"),
    Rule(
        "training.seq_len",
        "divisible by cp (× 2 under a load balancer, × tp under sequence parallelism; cp × 128 for flex)",
        lambda c: context_parallel_sequence(c, c.job.training.seq_len),
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
        tokens_read_in_process("training"),
    ),
    Rule(
        "training.dataloader.num_workers",
        "≤ 1 for the stdlib and local datasets (each worker would read the same samples)",
        text_workers_read_alike("training"),
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
    Rule("lr_scheduler.total_steps", "unset, or ≥ training.steps", _schedule_covers_training),
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
        "false: no norm of the whole gradient exists, to clip or for the non-finite guard to read",
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
)

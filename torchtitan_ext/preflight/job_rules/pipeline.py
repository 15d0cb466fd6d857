"""Pipeline parallelism's rows: the schedule, the stages torchtitan cuts, and the micro-batches.

Rows of ``RULES`` (``torchtitan_ext.preflight.job_rules``), in table order."""

from __future__ import annotations

from boost.training import rules
from torchtitan_ext.preflight.job_rules.rule import Check, JobContext, Rule, at_least


def _microbatch_divides_batch(ctx: JobContext) -> str | None:
    return rules.microbatch_size_problem(
        ctx.pp, ctx.job.training.local_batch_size, ctx.job.parallelism.pipeline_parallel_microbatch_size
    )


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


ROWS: tuple[Rule, ...] = (
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
)

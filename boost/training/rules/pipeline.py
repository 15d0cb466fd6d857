"""Pipeline parallelism: the stages a schedule cuts, what each of torch's schedules accepts (micro-batches,
stages per rank, a split backward, compiled stages, validation, the device), and the rank holding the loss.

Example::

    >>> pipeline_loss_rank("1F1B", pp=2, world_size=8), pipeline_loss_rank("ZBVZeroBubble", pp=2, world_size=8)
    (4, 0)
"""

from __future__ import annotations


def pipeline_problem(linear: str, pp: int, n_layers: int) -> str | None:
    """At most one stage per layer (LaX's carry crosses stage boundaries with the residual stream)."""
    if pp > 1 and pp > n_layers:
        return f"more stages than the {n_layers} layers"
    return None


def model_part_names(n_layers: int) -> list[str]:
    """The modules a pipeline cuts BOOST's model into stages by, in its forward's order
    (``boost.training.model.Transformer``'s children, its blocks by index)."""
    return ["tok_embeddings", *(f"layers.{i}" for i in range(n_layers)), "norm", "output"]


def module_split_problem(parts: list[list[str]], n_layers: int) -> str | None:
    """Stages named by hand (``parallelism.module_fqns_per_model_part``) that read in order give
    ``model_part_names`` exactly: each stage keeps only the modules it names (torchtitan's
    ``pipeline_module_split``), so a module no stage names is never trained, and one named twice is
    trained as two copies.

    Example::

        >>> module_split_problem([["tok_embeddings", "layers.0"], ["layers.2", "norm", "output"]], 3)[:19]
        'leaves out layers.1'
    """
    expected = model_part_names(n_layers)
    layers = f"layers.0 … layers.{n_layers - 1}" if n_layers > 2 else ", ".join(expected[1:-2])
    fix = f"the stages, read in order, must name tok_embeddings, {layers}, norm, output, each once"
    named = [name for part in parts for name in part]
    empty = [i for i, part in enumerate(parts) if not part]
    unknown = [name for name in named if name not in expected]
    twice = [name for name in expected if named.count(name) > 1]
    missing = [name for name in expected if name not in named]
    if empty:
        return f"stage {empty[0]} names no module: {fix}"
    if unknown:
        return f"names {unknown[0]!r}, which the model does not have ({n_layers} layers): {fix}"
    if twice:
        return f"names {twice[0]} in more than one stage, which would train a copy of it in each: {fix}"
    if missing:
        return f"leaves out {', '.join(missing)}, which no stage would train: {fix}"
    if named != expected:
        return f"names the modules out of the forward's order: {fix}"
    return None


def pipeline_stage_count(
    multi_stage: bool,
    pp: int,
    n_layers: int,
    layers_per_stage: int | None,
    first_stage_less: int,
    last_stage_less: int,
) -> int:
    """The stages torchtitan's ``pipeline_llm`` cuts the model into, over all ranks: one per rank for a
    single-stage schedule and two for a multi-stage one, unless ``layers_per_stage`` sets the count (the
    embedding and the head weigh ``first_stage_less`` and ``last_stage_less`` layers)."""
    if layers_per_stage is None:
        return pp * (2 if multi_stage else 1)
    return -(-(n_layers + first_stage_less + last_stage_less) // layers_per_stage)


# What each torch.distributed.pipelining schedule's constructor raises on (torch 2.13, schedules.py), by
# lower-case name: the schedules that need a micro-batch per stage, the interleaved ones that run their
# micro-batches in equal rounds of n // pp, and the V-shaped ones that hold exactly two stages per rank.
PIPELINE_MICROBATCH_PER_STAGE = ("1f1b", "dualpipev")
PIPELINE_MICROBATCH_ROUNDS = ("interleaved1f1b", "interleavedzerobubble")
PIPELINE_TWO_STAGES_PER_RANK = ("zbvzerobubble", "dualpipev")
# The zero-bubble schedules, which split each backward into an input- and a weight-gradient pass: torch
# refuses them over compiled stage modules (``_check_torch_compile_compatibility``, torch 2.11 to 2.14).
PIPELINE_SPLIT_BACKWARD = ("interleavedzerobubble", "zbvzerobubble", "dualpipev")


def splits_backward(schedule: str) -> bool:
    """Whether a schedule (torch's name, any case) splits each backward in two (``PIPELINE_SPLIT_BACKWARD``)."""
    return schedule.lower() in PIPELINE_SPLIT_BACKWARD


def pipeline_loss_rank(schedule: str, pp: int, world_size: int) -> int:
    """The rank whose step lines and metrics hold the loss: the first rank of the last pipeline stage
    (torchtitan's mesh puts ``pp`` outermost, so that is ``world_size // pp * (pp - 1)``); rank 0 without
    PP, and under a V-shaped schedule (``PIPELINE_TWO_STAGES_PER_RANK``), whose last stage is rank 0's
    second. The other pipeline ranks log a loss of -1 (torchtitan's placeholder)."""
    if pp <= 1 or schedule.lower() in PIPELINE_TWO_STAGES_PER_RANK:
        return 0
    return world_size // pp * (pp - 1)


def pipeline_csv_problem(schedule_csv: str | None, pp: int) -> str | None:
    """No custom CSV schedule: what BOOST checks and builds per schedule (the split backward, the stages per
    rank, the micro-batch rounds, the rank holding the loss) goes by ``pipeline_parallel_schedule``'s name,
    which a CSV's actions would overrule unchecked."""
    if pp > 1 and schedule_csv:
        return (
            'BOOST checks a pipeline schedule by its name, not by a CSV\'s actions: set it to "" and name '
            "the schedule in parallelism.pipeline_parallel_schedule"
        )
    return None


def pipeline_schedule_problem(schedule: str, pp: int, compiled: bool) -> str | None:
    """A schedule that splits the backward (``PIPELINE_SPLIT_BACKWARD``) needs eager stages."""
    if pp > 1 and compiled and splits_backward(schedule):
        return (
            f"schedule {schedule} splits each backward into an input- and a weight-gradient pass, which torch "
            "runs on eager stages only: choose 1F1B or Interleaved1F1B to compile, or pass --compile.no-enable"
        )
    return None


def pipeline_validation_problem(schedule: str, pp: int, validation: bool) -> str | None:
    """The V-shaped schedules (``PIPELINE_TWO_STAGES_PER_RANK``) cannot run validation: torch's forward-only
    pass asserts there ("can't steal_bwd_input if this stage doesn't have backward", torch 2.13 and 2.14)."""
    if pp > 1 and validation and schedule.lower() in PIPELINE_TWO_STAGES_PER_RANK:
        return (
            f"schedule {schedule} cannot validate: torch's V-shaped schedules run no forward-only pass; choose "
            "Interleaved1F1B or InterleavedZeroBubble, or pass --validation.no-enable"
        )
    return None


def pipeline_runtime_problem(schedule: str, pp: int, *, exact_split_backward: bool) -> str | None:
    """A schedule this torch cannot run right: ``PIPELINE_SPLIT_BACKWARD`` where its split backward is not
    exact."""
    if pp > 1 and not exact_split_backward and splits_backward(schedule):
        return (
            f"schedule {schedule} splits each backward in two, which this torch's pipelining (before 2.13) "
            "computes wrong where a node has several outputs: use torch ≥ 2.13, or choose 1F1B or "
            "Interleaved1F1B"
        )
    return None


def pipeline_stages_problem(schedule: str, multi_stage: bool, pp: int, stages: int) -> str | None:
    """The stages (``pipeline_stage_count``) split evenly over the ranks, as many per rank as the schedule runs."""
    per_rank, rest = divmod(stages, pp)
    if rest:
        return (
            f"gives {stages} stages, which {pp} pipeline ranks cannot split evenly: "
            f"choose one giving a multiple of {pp}"
        )
    if not multi_stage and per_rank != 1:
        return (
            f"gives {per_rank} stages per rank; schedule {schedule} runs one: leave it unset, "
            "or choose a multi-stage schedule"
        )
    if multi_stage and per_rank < 2:
        return (
            f"gives 1 stage per rank; schedule {schedule} runs several: lower it (unset gives 2 per rank), "
            "or choose a single-stage schedule"
        )
    if schedule.lower() in PIPELINE_TWO_STAGES_PER_RANK and per_rank != 2:
        return f"gives {per_rank} stages per rank; schedule {schedule} runs exactly 2: leave it unset"
    return None


def microbatch_size_problem(pp: int, local_batch_size: int, microbatch_size: int) -> str | None:
    """The pipeline's micro-batch size divides the batch a rank reads (torchtitan's schedule splits it)."""
    if pp == 1 or local_batch_size % microbatch_size == 0:
        return None
    return f"must divide training.local_batch_size = {local_batch_size} under pipeline parallelism"


def pipeline_microbatch_problem(
    schedule: str, local_batch_size: int, microbatch_size: int, pp: int, stages: int
) -> str | None:
    """The micro-batch count (``local_batch_size / microbatch_size``) that the schedule accepts over ``stages``."""
    n = local_batch_size // microbatch_size
    split = (
        f"with parallelism.pipeline_parallel_microbatch_size = {microbatch_size} that is {n} "
        f"micro-batch{'es' if n > 1 else ''}"
    )
    name = schedule.lower()
    if name in PIPELINE_MICROBATCH_PER_STAGE and n < stages:
        smaller = " (or lower the micro-batch size)" if microbatch_size > 1 else ""
        return (
            f"{split}, fewer than the {stages} stages of schedule {schedule}, which needs one per stage: "
            f"raise training.local_batch_size to at least {stages * microbatch_size}{smaller}"
        )
    rounds = max(1, n // pp)
    if name in PIPELINE_MICROBATCH_ROUNDS and n % rounds:
        return (
            f"{split}, which schedule {schedule} cannot split into n // pp = {rounds} equal rounds: "
            f"make the micro-batch count a multiple of pp = {pp}, or below {2 * pp}"
        )
    return None

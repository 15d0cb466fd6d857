"""The rows around the training: checkpoints, metrics, validation, profiling and communication.

Rows of ``RULES`` (``torchtitan_ext.preflight.job_rules``), in table order."""

from __future__ import annotations

from pathlib import Path

from boost.training import rules
from torchtitan_ext.config import DRY_RUN_COMM_MODE
from torchtitan_ext.preflight.job_rules.rule import JobContext, Rule, at_least, one_of
from torchtitan_ext.preflight.job_rules.training import (
    context_parallel_sequence,
    text_workers_read_alike,
    tokens_read_in_process,
)

# the longest a rank waits for a collective (seconds): a week. A collective waiting longer has hung, and
# datetime.timedelta (which torch's process group takes) overflows not far above.
MAX_COMM_TIMEOUT_S = 7 * 24 * 3600


def _sequence_parallel_sequence(ctx: JobContext, seq_len: int) -> str | None:
    """A sequence the validator runs, split over the TP ranks as training's is (``boost.sequence_parallel``)."""
    return rules.sequence_parallel_length_problem(
        ctx.boost.sequence_parallel, ctx.boost.tp_scheme, seq_len, ctx.tp
    )


def _validation_applies(ctx: JobContext) -> bool:
    """when validation.enable"""
    return ctx.job.validation.enable


def _profiling_applies(ctx: JobContext) -> bool:
    """when profiling.enable_profiling"""
    return ctx.job.profiling.enable_profiling


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


def _validation_reads_training_text(ctx: JobContext) -> str | None:
    """The text datasets' counterpart of the tokens folders' check (``token_sources._refuse_training_text``):
    a validation loss over the very text the run trains on says nothing of held-out text, and nothing else
    would say so."""
    val, train = ctx.job.validation, ctx.job.training
    if not val.enable or val.dataset.lower() != train.dataset.lower():
        return None
    if val.dataset.lower() == "stdlib":
        return 'is the training split: the loss would score training text: set it to "stdlib_validation"'
    return None


def _validation_path_is_training_text(ctx: JobContext) -> str | None:
    val, train = ctx.job.validation, ctx.job.training
    if not val.enable or not val.dataset.lower() == train.dataset.lower() == "local":
        return None
    if not (val.dataset_path and train.dataset_path):
        return None
    if Path(val.dataset_path).expanduser().resolve() != Path(train.dataset_path).expanduser().resolve():
        return None
    return (
        "is training.dataset_path: the loss would score training text: set it to held-out text, or prepare "
        "the corpus into token folders with a held-out split (boost.training.data.prepare --validation-fraction F)"
    )


# what torchtitan's checkpointer holds (model, optimizer, dataloader, lr_scheduler; the trainer's train_state)
CHECKPOINT_STATES = ("model", "optimizer", "lr_scheduler", "dataloader", "train_state")


def _excluded_states_exist(ctx: JobContext) -> str | None:
    unknown = [s for s in ctx.job.checkpoint.exclude_from_loading if s not in CHECKPOINT_STATES]
    if not unknown:
        return None
    return (
        f"{unknown[0]!r} is not a state a checkpoint holds (torchtitan stops on it at the first resume): "
        f"name some of {', '.join(CHECKPOINT_STATES)}"
    )


def _loading_needs_checkpointing(ctx: JobContext) -> str | None:
    ckpt = ctx.job.checkpoint
    if ckpt.enable or ckpt.create_seed_checkpoint:  # the seed checkpoint's row names it
        return None
    asked = [
        name
        for name, set_ in (
            (f"checkpoint.initial_load_path = {ckpt.initial_load_path!r}", bool(ckpt.initial_load_path)),
            (f"checkpoint.load_step = {ckpt.load_step}", ckpt.load_step != -1),
        )
        if set_
    ]
    if not asked:
        return None
    return (
        f"torchtitan's checkpointer loads nothing while it is off: {asked[0]} would be ignored and the run "
        "would train from random weights: set checkpoint.enable = true (with a new job.dump_folder to keep "
        "this run's checkpoints apart), or remove it"
    )


def _seed_checkpoint(ctx: JobContext) -> str | None:
    ckpt = ctx.job.checkpoint
    if not ckpt.create_seed_checkpoint:
        return None
    if ctx.world_size != 1:
        return (
            "torchtitan writes the seed checkpoint from one unsharded process: run it at NGPU=1, "
            f"not {ctx.world_size}"
        )
    if not ckpt.enable:
        return "torchtitan saves it through the checkpointer: set checkpoint.enable = true"
    return None


def _profile_window_fits(ctx: JobContext) -> str | None:
    prof = ctx.job.profiling
    if not prof.enable_profiling:
        return None
    window = prof.profiler_warmup + prof.profiler_active
    if prof.profile_freq >= window:
        return None
    return (
        f"each profiled window is profiler_warmup + profiler_active = {prof.profiler_warmup} + "
        f"{prof.profiler_active} = {window} steps, longer than the period (torchtitan stops on an "
        f"AssertionError): raise it to at least {window}, or lower those two"
    )


ROWS: tuple[Rule, ...] = (
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
    Rule(
        "checkpoint.initial_load_in_hf",
        "false (BOOST's model has no state-dict adapter in torchtitan), and so initial_load_in_hf_quantized",
        lambda c: (
            "BOOST gives torchtitan's checkpointer no Hugging Face state-dict adapter: set it false, and start "
            "from a BOOST checkpoint with checkpoint.initial_load_path = <run>/checkpoint/step-N"
            if c.job.checkpoint.initial_load_in_hf or c.job.checkpoint.initial_load_in_hf_quantized
            else None
        ),
        shown=lambda c: c.job.checkpoint.initial_load_in_hf or c.job.checkpoint.initial_load_in_hf_quantized,
    ),
    Rule(
        "checkpoint.exclude_from_loading",
        "states a checkpoint holds: model, optimizer, lr_scheduler, dataloader, train_state",
        _excluded_states_exist,
    ),
    Rule(
        "checkpoint.create_seed_checkpoint",
        "false, or at NGPU = 1 with checkpoint.enable",
        _seed_checkpoint,
    ),
    Rule(
        "checkpoint.enable",
        "true where checkpoint.initial_load_path or checkpoint.load_step asks for a load",
        _loading_needs_checkpointing,
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
            context_parallel_sequence(c, c.job.validation.seq_len)
            or _sequence_parallel_sequence(c, c.job.validation.seq_len)
            if _validation_applies(c)
            else None
        ),
    ),
    Rule(
        "validation.dataloader.num_workers",
        '0 when validation.dataset = "tokens" and validation.enable',
        tokens_read_in_process("validation"),
    ),
    Rule(
        "validation.dataset",
        'not "stdlib" beside training.dataset = "stdlib" (its training split), when validation.enable',
        _validation_reads_training_text,
    ),
    Rule(
        "validation.dataset_path",
        "not training.dataset_path for the local datasets, when validation.enable",
        _validation_path_is_training_text,
    ),
    Rule(
        "validation.dataloader.num_workers",
        "≤ 1 for the stdlib and local datasets, when validation.enable",
        text_workers_read_alike("validation"),
    ),
    at_least("profiling.profile_freq", 1, when=_profiling_applies),
    at_least("profiling.profiler_active", 1, when=_profiling_applies),
    at_least("profiling.profiler_warmup", 0, when=_profiling_applies),
    Rule(
        "profiling.profile_freq",
        "≥ profiler_warmup + profiler_active when profiling.enable_profiling",
        _profile_window_fits,
    ),
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

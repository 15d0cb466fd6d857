"""The job's rows: the model, its kind and switches, and what torchtitan's trainer would not read.

Rows of ``RULES`` (``torchtitan_ext.preflight.job_rules``), in table order."""

from __future__ import annotations

import math

from boost.training import rules
from boost.training.model.args import FLAVORS
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
from torchtitan_ext.preflight.job_rules.rule import Check, JobContext, Rule, at_least, one_of, within

# A byte-level BPE holds the 256 byte symbols plus BOS and EOS.
MIN_VOCAB_SIZE = 256 + 2
# torch.manual_seed takes a 64-bit integer
SEED_RANGE = (-(2**63), 2**63 - 1)


def _known_compile_backend(ctx: JobContext) -> str | None:
    compile_cfg = ctx.job.compile
    if not compile_cfg.enable or not compile_cfg.components:
        return None
    import torch._dynamo  # torch only where something compiles

    if compile_cfg.backend in torch._dynamo.list_backends(exclude_tags=()):  # the debug ones (eager) too
        return None
    return "not a torch.compile backend this torch knows: use inductor (the default), aot_eager or eager"


def _is_set(field: str, message: str) -> Check:
    """A switch the trainer never reads: refused when on, rather than dropped."""
    return lambda ctx: message if ctx.value(field) else None


def _wandb_importable(ctx: JobContext) -> str | None:
    import importlib.util

    if not ctx.job.metrics.enable_wandb or importlib.util.find_spec("wandb") is not None:
        return None
    return "wandb is not installed, and torchtitan's logger imports it on every rank: install it, or set it false"


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


def _kron_needs_lax(ctx: JobContext) -> str | None:
    """kron is a form of LaX's gate: under another kind, which has no gate, it would be ignored."""
    if ctx.boost.lax_gate_form != "kron" or ctx.boost.linear == "lax":
        return None
    return (
        f'kron computes LaX\'s tensorized gate, and boost.linear = "{ctx.boost.linear}" has no gate (it would '
        'be ignored): set boost.linear = "lax", or leave lax_gate_form "factored"'
    )


ROWS: tuple[Rule, ...] = (
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
        "one of factored, kron (kron: boost.linear = lax, boost.lax_gate = tensorized)",
        lambda c: rules.lax_gate_form_problem(c.boost.lax_gate, c.boost.lax_gate_form) or _kron_needs_lax(c),
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
)

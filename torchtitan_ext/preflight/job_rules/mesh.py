"""The device mesh's rows: the degrees, how they fill the world, and the tensor-parallel shapes.

Rows of ``RULES`` (``torchtitan_ext.preflight.job_rules``), in table order."""

from __future__ import annotations

import os

from boost.training import rules
from torchtitan_ext.preflight.job_rules.rule import JobContext, Rule, at_least


def _world_from() -> str:
    """Where the world size came from: run_train.sh's NGPU, or NGPU × NNODES under scripts/node_train.sh."""
    return "NGPU × NNODES" if os.environ.get("NNODES", "1") != "1" else "NGPU"


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


ROWS: tuple[Rule, ...] = (
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
        "false at TP 1; megatron or btp; seq_len divisible by the TP degree",
        lambda c: rules.sequence_parallel_problem(
            c.boost.sequence_parallel, c.boost.tp_scheme, c.job.training.seq_len, c.tp
        ),
    ),
    Rule(
        "boost.activation_checkpoint",
        '"lowrank" only under tp_scheme = btp with TP > 1',
        lambda c: rules.activation_checkpoint_problem(c.boost.activation_checkpoint, c.boost.tp_scheme, c.tp),
    ),
)

"""Whole-model tensor-parallel plans for a built ``boost.Transformer``: btp, vanilla, megatron.

``apply_tp(model, tp_mesh, scheme)`` returns the model; its forward still takes replicated token ids
and returns logits — a ``Shard(-1)`` DTensor over the vocabulary when ``loss_parallel`` (use it
inside ``torch.distributed.tensor.parallel.loss_parallel()``), else a replicated local tensor.

Per layer and direction (b·s tokens, MHA shapes):

========  ===========================================  ==========================
scheme    forward collectives                          elements
========  ===========================================  ==========================
btp       4 all-reduce: qkv 3r, o r, gate/up 2r, down r   7·r  (+2 norm statistics)
btp, sp   4 reduce-scatter + 4 all-gather of the same      7·r each (+2 norm statistics)
vanilla   7 all-reduce after every B (q k v o gate up down)  5d + 2f
megatron  2 all-reduce (wo, w2)                          2d
========  ===========================================  ==========================
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Placement, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from boost.training.parallel.bottleneck_style import BoostParallelStyle
from boost.training.parallel.styles import (
    ReplicatedLatentParallel,
    ReplicatedParallel,
    ShardedRMSNormParallel,
    check_norm_mode,
)
from boost.training.rules import (
    KINDS,
    SCHEMES,
    grouping_problem,
    online_norm_problem,
    tp_scheme,
    tp_scheme_problem,
    tp_shape_problem,
    tp_sharded_dims,
    vanilla_rank_problem,
)


def check_tp_shapes(args, t: int, scheme: str, sequence_parallel: bool = False) -> None:
    """Raise ``ValueError`` naming the field when the model cannot be split ``t`` ways under ``scheme``
    (the rules of ``boost.training.rules``, which the trainer's preflight checks before any process starts)."""
    tp_scheme(scheme)
    shapes = {
        **tp_sharded_dims(scheme, args.n_heads, args.kv_heads, args.dim, args.ffn_dim),
        "vocab_size": args.vocab_size,
    }
    # The rules pass a TP degree of 1, where the trainer applies no plan; apply_tp applies its plan on a mesh
    # of one too, which must then take the kind and the grouping as at any degree.
    applied = max(t, 2)
    sequence_plan = SCHEMES[scheme].sequence_parallel is not None or not sequence_parallel
    for field, value, problem in (
        ("boost.tp_scheme", scheme, tp_scheme_problem(args.linear, scheme, applied)),
        ("boost.group_linears", args.group_linears, grouping_problem(scheme, args.group_linears, applied)),
        ("parallelism.tensor_parallel_degree", t, tp_shape_problem(shapes, t)),
        ("boost.rank", args.rank, vanilla_rank_problem(scheme, args.rank, t)),
        (
            "boost.sequence_parallel",
            sequence_parallel,
            None if sequence_plan else f"{scheme} has no such plan",
        ),
    ):
        if problem is not None:
            raise ValueError(f"{field} = {value!r}: {problem}")


def apply_tp(
    model: nn.Module,
    tp_mesh: DeviceMesh,
    scheme: str = "btp",
    norm: str = "online",
    loss_parallel: bool = True,
    sequence_parallel: bool = False,
) -> nn.Module:
    """Apply one of the three tensor-parallel schemes to a built ``boost.Transformer`` in place: one
    ``parallelize_module`` call per block with that block's plan, then one for the embedding, the final
    norm and the LM head. The shapes are checked once, here, before anything is sharded. A model with
    ``tie_embeddings`` (read from Hugging Face) comes out with its embedding and LM head as two parameters,
    equal as they were loaded (BTP shards them on different dims): sharded inference, not training, which
    never ties them.

    Example (4 processes)::

        >>> mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
        >>> model = apply_tp(Transformer(args), mesh, scheme="btp", norm="online")
        >>> with loss_parallel():
        ...     loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
    """
    args, t = model.model_args, tp_mesh.size()
    check_tp_shapes(args, t, scheme, sequence_parallel)
    check_norm_mode(norm)  # norm = "local" is said where a norm is sharded: the BTP styles
    record = SCHEMES[scheme]
    # what sequence parallelism shards: the residual between blocks (megatron) or each latent (btp)
    sp = record.splits(sequence_parallel, t, "residual")
    sp_latent = record.splits(sequence_parallel, t, "latent")
    if record.shards_residual:
        problem = online_norm_problem(args.linear, scheme, norm, args.group_linears, t)
        if problem is not None:
            # The trainer's preflight refuses this pair; a library caller is told, once, what runs instead.
            warnings.warn(
                f'boost.norm = "online": {problem}. The ungrouped model runs norm = "sync"', stacklevel=2
            )
        block_plan, edge_plan = btp_block_plan(args.grouped, norm, sp_latent), btp_edge_plan()
    else:
        block_plan, edge_plan = (
            replicated_residual_block_plan(record.low_rank, sp),
            replicated_residual_edge_plan(sp),
        )
    edge_plan["output"] = ColwiseParallel(
        input_layouts=Shard(1) if sp else Replicate(),
        output_layouts=Shard(-1) if loss_parallel else Replicate(),
        use_local_output=not loss_parallel,
    )
    crossing = KINDS[args.linear].latent_crossing and not record.shards_residual
    for layer in model.layers.values():
        parallelize_module(
            layer, tp_mesh, {**block_plan, **(rank_sharded_crossing_plan() if crossing else {})}
        )
    # a pipeline stage holds some of the edges (torchtitan sets the others to None)
    parallelize_module(
        model, tp_mesh, {name: style for name, style in edge_plan.items() if getattr(model, name) is not None}
    )
    if not record.shards_residual and model.tok_embeddings is not None:
        model.tok_embeddings.register_forward_hook(_wait_for_async_output)
    return model


def btp_block_plan(grouped: bool, norm: str, sequence_parallel: bool = False) -> dict[str, ParallelStyle]:
    """One transformer block under BTP: every bottleneck a ``BoostParallelStyle`` (its collectives r wide).

    Grouped, each pre-norm lives inside the one down-projection that reads it (``wqkv``, ``w13``), where
    the online norm's statistic rides in that bottleneck's all-reduce. Ungrouped, several down-projections
    read a pre-norm, so it stands alone over the sharded hidden dim (``sync`` or ``local``).
    ``sequence_parallel``: every latent on a rank's tokens between its reduce-scatter and all-gather.
    """
    # B's partial input-gradient is summed where the up-projections read the latent, apart from LaX's carry
    writer = BoostParallelStyle(latent="up_input", sequence_parallel=sequence_parallel)
    if grouped:
        reader = BoostParallelStyle(
            latent="up_input", norm="norm", norm_mode=norm, sequence_parallel=sequence_parallel
        )
        return {
            "attention.wqkv": reader,
            "attention.wo": writer,
            "feed_forward.w13": reader,
            "feed_forward.w2": writer,
        }
    return {
        "attention_norm": ShardedRMSNormParallel(norm),
        "attention.wq": writer,
        "attention.wk": writer,
        "attention.wv": writer,
        "attention.wo": writer,
        "ffn_norm": ShardedRMSNormParallel(norm),
        "feed_forward.w1": writer,
        "feed_forward.w3": writer,
        "feed_forward.w2": writer,
    }


def btp_edge_plan() -> dict[str, ParallelStyle]:
    """The embedding table sharded on its embedding dim yields the ``Shard(-1)`` residual stream with no
    collective; at the end of the network the hidden state is gathered once, for the replicated final norm."""
    return {
        "tok_embeddings": ColwiseParallel(input_layouts=Replicate()),
        "norm": ReplicatedParallel(input_layouts=Shard(-1)),
    }


def replicated_residual_block_plan(low_rank: bool, sp: bool) -> dict[str, ParallelStyle]:
    """One block under Megatron's plan (dense) or its low-rank transposition, vanilla: the residual is
    replicated (or sequence-sharded with ``sp``) and every block output is all-reduced at full width."""
    seq = Shard(1) if sp else Replicate()
    norm_style = SequenceParallel if sp else ReplicatedParallel
    plan: dict[str, ParallelStyle] = {
        "attention_norm": norm_style(),
        "ffn_norm": norm_style(),
        # One Replicate DTensor per sublayer input: the column-parallel readers' gradients are
        # summed into one all-reduce (Megatron's "f"), not one per reader.
        "attention": PrepareModuleInput(
            input_layouts=(seq, None, None),
            desired_input_layouts=(Replicate(), None, None),
            use_local_output=False,
        ),
        "feed_forward": PrepareModuleInput(
            input_layouts=(seq, None), desired_input_layouts=(Replicate(), None), use_local_output=False
        ),
    }
    for reader in ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3"):
        plan.update(_column_then_row(reader, low_rank, writes=None))
    for writer in ("attention.wo", "feed_forward.w2"):
        plan.update(_column_then_row(writer, low_rank, writes=seq))
    return plan


def rank_sharded_crossing_plan() -> dict[str, ParallelStyle]:
    """LaX under a plan that shards the rank dim (vanilla, whose projections are ungrouped): each latent is
    gathered whole, crossed (its LayerNorm and gate read all of r) and carried whole on every rank, and the
    up-projection reads its r/t slice. Per bottleneck and direction one r-wide all-gather more than CoLA's."""
    plan: dict[str, ParallelStyle] = {}
    for fqn in _PROJECTIONS:
        plan[f"{fqn}.latent"] = ReplicatedLatentParallel()
        plan[f"{fqn}.up_input"] = PrepareModuleInput(
            input_layouts=Replicate(), desired_input_layouts=Shard(-1), use_local_output=True
        )
    return plan


_PROJECTIONS = (
    "attention.wq",
    "attention.wk",
    "attention.wv",
    "attention.wo",
    "feed_forward.w1",
    "feed_forward.w3",
    "feed_forward.w2",
)


def replicated_residual_edge_plan(sp: bool) -> dict[str, ParallelStyle]:
    seq = Shard(1) if sp else Replicate()
    return {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "norm": SequenceParallel() if sp else ReplicatedParallel(),
    }


def _wait_for_async_output(module: nn.Module, args, out: torch.Tensor) -> torch.Tensor:
    """``RowwiseParallel`` returns its all-reduced output still in flight (an ``AsyncCollectiveTensor``).
    Handed so to a compiled block, its gradient comes back as a plain tensor where the eager
    redistribute's backward wants a DTensor (torch 2.13: ``'Tensor' object has no attribute
    '_local_tensor'``). Waiting here, outside the compiled region, costs nothing: the block's first
    op needs the value anyway."""
    return out.clone() if isinstance(out, AsyncCollectiveTensor) else out


def _column_then_row(fqn: str, low_rank: bool, writes: Placement | None) -> dict[str, ParallelStyle]:
    """Dense (Megatron): a reader is column-parallel, a writer row-parallel. Low-rank (vanilla): every
    bottleneck is A column-parallel on r, B row-parallel with a full-width all-reduce."""
    if not low_rank:
        if writes is None:
            return {fqn: ColwiseParallel(use_local_output=True)}
        return {fqn: RowwiseParallel(output_layouts=writes)}
    return {
        f"{fqn}.down": ColwiseParallel(use_local_output=True),
        f"{fqn}.up.0": RowwiseParallel(output_layouts=writes or Replicate()),
    }


__all__ = ["apply_tp", "check_tp_shapes"]

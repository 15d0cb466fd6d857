"""Whole-model tensor-parallel plans for a built ``boost.Transformer``: btp, vanilla, megatron.

``apply_tp(model, tp_mesh, scheme)`` returns the model; its forward still takes replicated token ids
and returns logits — a ``Shard(-1)`` DTensor over the vocabulary when ``loss_parallel`` (use it
inside ``torch.distributed.tensor.parallel.loss_parallel()``), else a replicated local tensor.

Per layer and direction (b·s tokens, MHA shapes):

========  ===========================================  ==========================
scheme    forward collectives                          elements
========  ===========================================  ==========================
btp       4 all-reduce: qkv 3r, o r, gate/up 2r, down r   7·r  (+2 norm statistics)
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
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from boost.model.linears import Bottleneck
from boost.parallel.styles import (
    BoostParallelStyle,
    ReplicatedParallel,
    ShardedRMSNormParallel,
    _check_norm_mode,
)
from boost.rules import (
    TP_SCHEMES,
    grouping_problem,
    online_norm_problem,
    tp_scheme_problem,
    tp_shape_problem,
    tp_sharded_dims,
    vanilla_rank_problem,
)

def check_tp_shapes(args, t: int, scheme: str) -> None:
    """Raise ``ValueError`` naming the field when the model cannot be split ``t`` ways under ``scheme``
    (the rules of ``boost.rules``, which the trainer's preflight checks before any process starts)."""
    if scheme not in TP_SCHEMES:
        raise ValueError(f"boost.tp_scheme = {scheme!r} is unknown; choose one of {TP_SCHEMES}")
    shapes = {**tp_sharded_dims(args.n_heads, args.kv_heads, args.dim, args.ffn_dim), "vocab_size": args.vocab_size}
    for field, value, problem in (
        ("boost.tp_scheme", scheme, tp_scheme_problem(args.linear, scheme, t)),
        ("boost.group_linears", args.group_linears, grouping_problem(scheme, args.group_linears, t)),
        ("parallelism.tensor_parallel_degree", t, tp_shape_problem(shapes, t)),
        ("boost.rank", args.rank, vanilla_rank_problem(scheme, args.rank, t)),
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
    """Apply one of the three tensor-parallel schemes to a built ``boost.Transformer`` in place.

    Example (4 processes)::

        >>> mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
        >>> model = apply_tp(Transformer(args), mesh, scheme="btp", norm="online")
        >>> with loss_parallel():
        ...     loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
    """
    args = model.model_args
    check_tp_shapes(args, tp_mesh.size(), scheme)
    _check_norm_mode(norm)
    if scheme == "btp":
        _apply_btp(model, tp_mesh, norm)
    else:
        _apply_replicated_residual(model, tp_mesh, scheme, sequence_parallel and scheme == "megatron")
    head_input = Shard(1) if (sequence_parallel and scheme == "megatron") else Replicate()
    if model.output is not None:
        parallelize_module(
            model.output,
            tp_mesh,
            ColwiseParallel(
                input_layouts=head_input,
                output_layouts=Shard(-1) if loss_parallel else Replicate(),
                use_local_output=not loss_parallel,
            ),
        )
    return model


def _apply_btp(model: nn.Module, mesh: DeviceMesh, norm: str) -> None:
    args = model.model_args
    problem = online_norm_problem(args.linear, "btp", norm, args.group_linears, mesh.size())
    if problem is not None:
        # The trainer's preflight refuses this pair; a library caller is told, once, what runs instead.
        warnings.warn(f'boost.norm = "online": {problem}. The ungrouped model runs norm = "sync"', stacklevel=3)
    # The embedding table sharded on its embedding dim yields the Shard(-1) residual stream directly.
    if model.tok_embeddings is not None:
        parallelize_module(model.tok_embeddings, mesh, ColwiseParallel(input_layouts=Replicate()))
    for layer in model.layers.values():
        for norm_module in (layer.attention_norm, layer.ffn_norm):
            if norm_module is not None:  # ungrouped: several readers, so the norm stands alone
                parallelize_module(norm_module, mesh, ShardedRMSNormParallel(norm))
        for sub in (layer.attention, layer.feed_forward):
            for child in sub.children():
                assert isinstance(child, Bottleneck)
                style = BoostParallelStyle(
                    latent="cross", norm="norm" if child.norm is not None else None, norm_mode=norm
                )
                parallelize_module(child, mesh, style)
    # End of network: gather the hidden state once, then the replicated final norm.
    if model.norm is not None:
        parallelize_module(model.norm, mesh, ReplicatedParallel(input_layouts=Shard(-1)))


def _apply_replicated_residual(model: nn.Module, mesh: DeviceMesh, scheme: str, sp: bool) -> None:
    """Megatron's plan (dense) and its low-rank transposition, vanilla: the residual is replicated
    (or sequence-sharded with ``sp``) and every block output is all-reduced at full width."""
    seq = Shard(1) if sp else Replicate()
    if model.tok_embeddings is not None:
        parallelize_module(model.tok_embeddings, mesh, RowwiseParallel(input_layouts=Replicate(), output_layouts=seq))
        model.tok_embeddings.register_forward_hook(_wait_for_async_output)
    if model.norm is not None:
        parallelize_module(model.norm, mesh, SequenceParallel() if sp else ReplicatedParallel())
    for layer in model.layers.values():
        plan = {}
        norm_style = SequenceParallel if sp else ReplicatedParallel
        plan.update({"attention_norm": norm_style(), "ffn_norm": norm_style()})
        # One Replicate DTensor per sublayer input: the column-parallel readers' gradients are
        # summed into one all-reduce (Megatron's "f"), not one per reader.
        plan["attention"] = PrepareModuleInput(
            input_layouts=(seq, None, None), desired_input_layouts=(Replicate(), None, None), use_local_output=False
        )
        plan["feed_forward"] = PrepareModuleInput(
            input_layouts=(seq, None), desired_input_layouts=(Replicate(), None), use_local_output=False
        )
        readers = {"attention": ("wq", "wk", "wv"), "feed_forward": ("w1", "w3")}
        writers = {"attention": "wo", "feed_forward": "w2"}
        for sub, names in readers.items():
            for name in names:
                plan.update(_column_then_row(f"{sub}.{name}", scheme, Replicate(), None))
            plan.update(_column_then_row(f"{sub}.{writers[sub]}", scheme, None, seq))
        parallelize_module(layer, mesh, plan)


def _wait_for_async_output(module: nn.Module, args, out: torch.Tensor) -> torch.Tensor:
    """``RowwiseParallel`` returns its all-reduced output still in flight (an ``AsyncCollectiveTensor``).
    Handed so to a compiled block, its gradient comes back as a plain tensor where the eager
    redistribute's backward wants a DTensor (torch 2.13: ``'Tensor' object has no attribute
    '_local_tensor'``). Waiting here, outside the compiled region, costs nothing: the block's first
    op needs the value anyway."""
    return out.clone() if isinstance(out, AsyncCollectiveTensor) else out


def _column_then_row(fqn: str, scheme: str, reads, writes) -> dict:
    """Megatron (dense): a reader is column-parallel, a writer row-parallel. Vanilla (low-rank):
    every bottleneck is A column-parallel on r, B row-parallel with a full-width all-reduce."""
    if scheme == "megatron":
        if writes is None:
            return {fqn: ColwiseParallel(use_local_output=True)}
        return {fqn: RowwiseParallel(output_layouts=writes)}
    return {
        f"{fqn}.down": ColwiseParallel(use_local_output=True),
        f"{fqn}.up.0": RowwiseParallel(output_layouts=writes or Replicate()),
    }


__all__ = ["apply_tp", "check_tp_shapes"]

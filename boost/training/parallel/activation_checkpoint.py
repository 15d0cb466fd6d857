"""Activation checkpointing of BOOST blocks: low-rank (keep the r-wide latents, recompute the rest,
communicate nothing), and full AC for blocks that will be compiled.

A checkpoint region is one transformer block, i.e. a run of BTP chunks. What is kept is every
forward all-reduce's result — in a BTP block exactly the replicated r-wide latents (plus the norm
statistic column) — and the block's input (the ``d/t`` residual shard); everything else is
recomputed in backward, and the recompute issues no collective, so the backward sends exactly what
it sends without checkpointing. Two mechanisms, one policy:

``eager``     record and replay (``boost.training.parallel.latent_replay``): the forward records each all-reduce's
              result, the recompute replays them in order. The down-projection GEMM and its
              all-reduce are one Function, so the replayed latent also stands in for the GEMM.
``compiled``  torch's selective checkpointing: a policy that must-save the outputs of the
              functional all-reduce ops (and of attention, see ``KEPT_ATTENTION``) and prefers to
              recompute everything else. torch.compile
              accepts only this form (a pair of ``TorchDispatchMode``s); AOTAutograd's partitioner
              then drops the saved collectives from the recompute. In eager mode (e.g. the first,
              eagerly counted step of a compiled run) it is still exact; it recomputes the down GEMMs.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.attention.varlen  # noqa: F401  (registers torch.ops.torch_attn._varlen_attn)
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from boost.training.parallel.latent_replay import record_and_replay_collectives

_c10d, _aten = torch.ops._c10d_functional, torch.ops.aten
# The forward collectives of BTP (boost.training.parallel.collectives) and of the vanilla/megatron plans (DTensor).
# In the graphs torch traces, wait_tensor is each collective's only reader, so keeping it alone keeps their
# results; the collectives are kept as well so that no graph that reads one unwaited re-issues it in backward.
KEPT_COLLECTIVES = frozenset(
    {
        _c10d.all_reduce.default,
        _c10d.all_reduce_coalesced.default,
        _c10d.wait_tensor.default,
        _c10d.all_gather_into_tensor.default,
        _c10d.reduce_scatter_tensor.default,
    }
)
# Compiled only (low-rank and full AC): the attention output is kept too (as torchtitan's selective AC
# keeps it). SDPA's
# kernels are tagged as seeded (a dropout argument); recomputing one makes AOTAutograd save an RNG
# state, which torch 2.13 appends after the DeviceMesh objects of DTensor inputs and then fails
# ("expected all tensors_saved_with_vc_check to be Tensors"). Cost: d/t values per token per
# block beside the 7·r kept latents; gain: no O(s²) attention recompute.
KEPT_ATTENTION = frozenset(
    {
        _aten._scaled_dot_product_flash_attention_for_cpu.default,
        _aten._scaled_dot_product_flash_attention.default,
        _aten._scaled_dot_product_efficient_attention.default,
        _aten._scaled_dot_product_cudnn_attention.default,
        # FlexAttention and varlen (boost.attn_type), as torchtitan's selective AC keeps them
        torch._higher_order_ops.flex_attention,
        torch.ops.torch_attn._varlen_attn.default,
    }
)


def keep_collective_outputs(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """Compiled low-rank AC's selective policy: the collectives' and the attention kernel's outputs kept,
    everything else recomputed in backward (with no communication)."""
    if op in KEPT_COLLECTIVES or op in KEPT_ATTENTION:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _keep_attention_outputs(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in KEPT_ATTENTION else CheckpointPolicy.PREFER_RECOMPUTE


def _wrap_blocks(model: nn.Module, context_fn) -> nn.Module:
    for layer_id, block in model.layers.named_children():
        wrapped = checkpoint_wrapper(block, context_fn=context_fn, preserve_rng_state=False)
        model.layers.register_module(layer_id, wrapped)
    return model


def apply_compiled_full_ac(model: nn.Module) -> nn.Module:
    """Whole-block AC for blocks that will be ``torch.compile``d: everything is recomputed but the
    attention kernel's output (``KEPT_ATTENTION``: torch 2.13 cannot recompute it in a compiled
    DTensor block). Eager runs use torchtitan's full AC."""
    return _wrap_blocks(
        model, functools.partial(create_selective_checkpoint_contexts, _keep_attention_outputs)
    )


def apply_lowrank_ac(model: nn.Module, compiled: bool = False) -> nn.Module:
    """Wrap every transformer block of ``model`` (after tensor parallelism, before compile/FSDP).

    ``compiled``: the blocks will be ``torch.compile``d next (torch.compile wants the selective
    checkpointing form; see the module docstring).

    Example::

        >>> model = apply_lowrank_ac(apply_tp(Transformer(args), tp_mesh), compiled=False)
    """
    if compiled:
        return _wrap_blocks(
            model, functools.partial(create_selective_checkpoint_contexts, keep_collective_outputs)
        )
    return _wrap_blocks(model, record_and_replay_collectives)

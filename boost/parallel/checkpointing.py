"""Low-rank activation checkpointing: keep the r-wide latents, recompute the rest, communicate nothing.

A checkpoint region is one transformer block, i.e. a run of BTP chunks. In the forward, every
forward all-reduce's result — in a BTP block exactly the replicated r-wide latents (plus the norm
statistic column) — is recorded; everything else in the block is dropped. In backward the block is
recomputed from its input (the ``d/t`` residual shard) and the recorded latents are replayed in
place of the all-reduces, so the recompute issues no collective and the backward sends exactly what
it sends without checkpointing. Kept per block: the residual shard and ``7·r`` latent columns.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from boost.parallel.comm import record_and_replay_collectives


def apply_lowrank_ac(model: nn.Module) -> nn.Module:
    """Wrap every transformer block of ``model`` (after tensor parallelism, before compile/FSDP)."""
    for layer_id, block in model.layers.named_children():
        wrapped = checkpoint_wrapper(block, context_fn=record_and_replay_collectives, preserve_rng_state=False)
        model.layers.register_module(layer_id, wrapped)
    return model

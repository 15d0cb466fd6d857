"""Context parallelism (``parallelism.context_parallel_degree``) for BOOST's model, as torchtitan's LLaMA runs it:
each window's sequence sharded over the ``cp`` mesh dim, with every TP scheme, FSDP (whose mesh holds
``dp_shard × cp``, torchtitan's), PP, AC and compile. The blocks see ``s/cp`` tokens; only attention looks
across the sequence:

    attn_type  mask          a rank's queries attend                           applied by
    sdpa       causal        over the other ranks' keys and values by torch's  torchtitan's apply_cp_to_attention_module
                             ring (the CPU's kernel registered here)
    sdpa       block_causal  all-gathered keys and values; the mask's rows     torch's FlexAttention CP pre-hook
                             dealt as the queries, its columns in the order    (``all_gathered_keys_and_values``)
                             the ranks hold the keys
    flex       either        all-gathered keys and values; the BlockMask's     torchtitan's apply_cp_to_attention_module
                             rows dealt as the queries (torchtitan's cp_shard)

The batch (``prepare_batch``, the trainer's and the validator's): the masks once a batch (every kernel's,
``JobTransformer.get_attention_masks``), then torchtitan's ``prepare_context_parallel_input``: inputs, labels
and ``positions`` (RoPE at each token's own position) dealt to the ranks by the load balancer
(``headtail``: chunks ``i`` and ``2·cp - 1 - i`` to rank ``i``, so every rank has as much of the causal
triangle), the SDPA mask's rows with them. The loss is each rank's tokens' sum over the step's global token
count, and FSDP sums the gradients over ``dp_shard × cp``: the one-process step, as torchtitan's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import parallelize_module
from torchtitan.distributed.context_parallel import (
    apply_cp_to_attention_module,
    cp_shard,
    prepare_context_parallel_input,
)
from torchtitan.tools.logging import logger

from boost.training.rules import context_parallel_path
from torchtitan_ext.config import DRY_RUN_COMM_MODE
from torchtitan_ext.torch_private import (
    all_gathered_keys_and_values,
    ring_attention_on_cpu_kernel,
    ring_rotate_method,
    sequence_order,
)


def apply_context_parallel(
    model: nn.Module, cp_mesh: DeviceMesh, attn_type: str, mask_type: str, rotate_method: str = "allgather"
) -> None:
    """Every block's attention kernel (``attention.inner_attention``) over ``cp_mesh`` (module docstring's
    table); ``rotate_method``: how the ring passes keys and values on (``context_parallel_rotate_method``,
    which torchtitan 0.2.2's trainer leaves unset: its ring always all-gathers)."""
    kernels = [block.attention.inner_attention for block in model.layers.values()]
    path = context_parallel_path(attn_type, mask_type)
    if path == "ring":
        apply_cp_to_attention_module(kernels, cp_mesh, "sdpa")
        ring_attention_on_cpu_kernel()  # after torchtitan's: enabling torch's dispatcher resets the handlers
        ring_rotate_method(rotate_method)
        how = f"ring attention ({rotate_method})"
    elif attn_type == "sdpa":
        for kernel in kernels:
            parallelize_module(kernel, cp_mesh, all_gathered_keys_and_values())
        how = "keys and values all-gathered, mask rows sharded"
    else:
        apply_cp_to_attention_module(kernels, cp_mesh, attn_type)
        how = "keys and values all-gathered, block mask rows sharded"
    logger.info(f"Applied context parallelism (degree {cp_mesh.size()}) to {attn_type} attention: {how}")


def prepare_batch(
    model: nn.Module,
    tokenizer,
    input_dict: dict[str, torch.Tensor],
    labels: torch.Tensor,
    cp_mesh: DeviceMesh | None,
    load_balancer: str | None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], dict[str, Any]]:
    """torchtitan's ``post_dataloading_process`` for BOOST: ``(inputs, labels, extra_inputs, extra_kwargs)``
    with the masks of every kernel (torchtitan builds them for flex and varlen only; ``None`` for causal
    SDPA, and then no keyword), this rank's share of the sequence under CP (``cp_mesh``)."""
    inputs = input_dict["input"]
    extra_inputs = {k: v for k, v in input_dict.items() if k != "input"}
    extra_kwargs: dict[str, Any] = {}
    masks = model.get_attention_masks(input_batch=inputs, tokenizer=tokenizer, extra_inputs=extra_inputs)
    if masks is not None:
        extra_kwargs["attention_masks"] = masks
    if cp_mesh is None:
        return inputs, labels, extra_inputs, extra_kwargs
    sdpa_mask = extra_kwargs.pop("attention_masks") if isinstance(masks, torch.Tensor) else None
    inputs, labels, extra_kwargs = prepare_context_parallel_input(
        inputs, labels, extra_kwargs, cp_mesh, inputs.device, load_balancer
    )
    if sdpa_mask is not None:
        extra_kwargs["attention_masks"] = shard_mask_rows(sdpa_mask, cp_mesh, load_balancer)
    return inputs, labels, extra_inputs, extra_kwargs


def prepare_job_batch(model: nn.Module, tokenizer, input_dict, labels, parallel_dims, job_config):
    """``prepare_batch`` with the job's CP mesh (``None`` without CP) and load balancer: the trainer's
    ``post_dataloading_process`` and the validator's, one rule for both."""
    cp_mesh = parallel_dims.get_mesh("cp") if parallel_dims.cp_enabled else None
    load_balancer = job_config.parallelism.context_parallel_load_balancer
    return prepare_batch(model, tokenizer, input_dict, labels, cp_mesh, load_balancer)


def counted_labels(labels: torch.Tensor, parallel_dims, job_config) -> torch.Tensor:
    """The labels whose valid tokens a step's loss is divided by: the whole window's, since the CP ranks' loss
    shares sum to the window's over the cp mesh; on a dry run's fake process group, which sums nothing, this
    rank's share (as ``prepare_batch`` deals it), so its loss and gradients keep a real run's scale."""
    if job_config.comm.mode != DRY_RUN_COMM_MODE or not parallel_dims.cp_enabled:
        return labels
    load_balancer = job_config.parallelism.context_parallel_load_balancer
    (share,), _ = cp_shard(parallel_dims.get_mesh("cp"), (labels,), None, load_balancer)
    return share


def shard_mask_rows(mask: torch.Tensor, cp_mesh: DeviceMesh, load_balancer: str | None) -> torch.Tensor:
    """SDPA's ``[b, 1, s, s]`` mask for this rank's queries, ``[b, 1, s/cp, s]``: its rows dealt as the queries
    are (torchtitan's ``cp_shard``), its columns in the order the ranks hold the keys the attention all-gathers."""
    order = sequence_order(load_balancer, mask.shape[-1], cp_mesh.size(), mask.device)
    (rows,), _ = cp_shard(cp_mesh, (mask[..., order].squeeze(1),), None, load_balancer)
    return rows.unsqueeze(1)

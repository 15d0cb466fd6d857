"""torchtitan's parallelize function for BOOST models: TP/BTP -> CP -> activation checkpointing -> compile -> FSDP2.

The order and the compile/AC code are torchtitan's (llama3); the tensor-parallel plan is BOOST's, and
so is one FSDP2 argument: where a batched up-projection is sharded (``shard_placement``), and so is where
FSDP2 wraps (``fsdp_wraps``): data-parallel replicas are its HSDP at every shard degree, never torchtitan's
DDP, which averages the gradients of a loss already divided by the global token count.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Shard
from torchtitan.config import TORCH_DTYPE_MAP
from torchtitan.distributed import ParallelDims
from torchtitan.distributed.activation_checkpoint import apply_ac
from torchtitan.models.llama3.infra.parallelize import apply_compile, disable_fsdp_gradient_division
from torchtitan.tools.logging import logger

import boost.training.parallel
from boost.training import rules
from boost.training.rules import reshards_after_forward
from torchtitan_ext.infra.attention import compile_flex_attention
from torchtitan_ext.infra.context_parallel import apply_context_parallel
from torchtitan_ext.infra.cudagraphs import apply_compile_with_cudagraphs
from torchtitan_ext.infra.simple_fsdp import apply_simple_fsdp
from torchtitan_ext.torch_private import keep_ranks_compiled_graphs_apart
from torchtitan_ext.torchtitan_private import data_parallel_mesh


def parallelize_boost(model: nn.Module, parallel_dims: ParallelDims, job_config) -> nn.Module:
    cfg = job_config.boost
    if parallel_dims.tp_enabled:
        boost.training.parallel.apply_tp(
            model,
            parallel_dims.get_mesh("tp"),
            scheme=cfg.tp_scheme,
            norm=cfg.norm,
            loss_parallel=not job_config.parallelism.disable_loss_parallel,
            sequence_parallel=cfg.sequence_parallel,
        )
        logger.info(
            f"Applied {cfg.tp_scheme} tensor parallelism (degree {parallel_dims.tp}, norm {cfg.norm})"
        )

    logger.info(f"Attention: {cfg.attn_type}, {cfg.attn_mask_type} mask")
    if cfg.attn_type == "flex":
        compile_flex_attention()  # torchtitan's LLaMA always runs FlexAttention compiled
    if parallel_dims.cp_enabled:
        apply_context_parallel(
            model,
            parallel_dims.get_mesh("cp"),
            cfg.attn_type,
            cfg.attn_mask_type,
            job_config.parallelism.context_parallel_rotate_method,
        )

    compile_model = rules.compiles_model(job_config.compile.enable, job_config.compile.components)
    # One switch: boost.activation_checkpoint (the preflight refuses torchtitan's own [activation_checkpoint]
    # mode beside it). "full" is torchtitan's whole-block AC, applied by torchtitan's own code.
    ac_mode = cfg.activation_checkpoint
    if ac_mode == "full" and compile_model:
        boost.training.parallel.apply_compiled_full_ac(
            model
        )  # keeps attention: see boost.training.parallel.activation_checkpoint
        logger.info(
            "Applied full activation checkpointing to the model (attention output kept, for torch.compile)"
        )
    elif ac_mode == "full":
        # torchtitan's section with its mode set, as a copy: the job is read, never written
        ac_config = dataclasses.replace(job_config.activation_checkpoint, mode="full")
        apply_ac(
            model, ac_config, model_compile_enabled=compile_model, base_folder=job_config.job.dump_folder
        )
    elif ac_mode == "lowrank":
        boost.training.parallel.apply_lowrank_ac(model, compiled=compile_model)
        logger.info(
            "Applied low-rank activation checkpointing (%s)",
            "selective, for torch.compile" if compile_model else "record and replay",
        )

    if job_config.compile.enable and parallel_dims.world_size > 1:
        # the ranks' graphs name different process groups: the loss's too (loss-parallel TP), compiled alone
        keep_ranks_compiled_graphs_apart()
    if compile_model and cfg.cudagraphs:
        apply_compile_with_cudagraphs(model, job_config.compile)
        logger.info("Compiling each TransformerBlock with torch.compile and inductor's CUDA graphs")
    elif compile_model:
        apply_compile(model, job_config.compile)

    wraps = fsdp_wraps(parallel_dims, job_config.training.mixed_precision_param)
    if wraps and cfg.fsdp == "simple_fsdp":
        apply_simple_fsdp(
            model,
            data_parallel_mesh(parallel_dims, ["fsdp"]),
            param_dtype=TORCH_DTYPE_MAP[job_config.training.mixed_precision_param],
            reduce_dtype=TORCH_DTYPE_MAP[job_config.training.mixed_precision_reduce],
        )
        logger.info("Applied SimpleFSDP to the model (gathers and reductions inside the compiled blocks)")
    elif wraps:
        names = ["dp_replicate", "fsdp"] if parallel_dims.dp_replicate_enabled else ["fsdp"]
        apply_fsdp(
            model,
            data_parallel_mesh(parallel_dims, names),
            param_dtype=TORCH_DTYPE_MAP[job_config.training.mixed_precision_param],
            reduce_dtype=TORCH_DTYPE_MAP[job_config.training.mixed_precision_reduce],
            pp_enabled=parallel_dims.pp_enabled,
            cpu_offload=job_config.training.enable_cpu_offload,
            reshard_after_forward_policy=job_config.parallelism.fsdp_reshard_after_forward,
        )
        if torch.distributed.get_backend() == "gloo":
            # FSDP's divide factor becomes ReduceOp.PREMUL_SUM, which gloo refuses: SUM, then scale.
            for module in model.modules():
                if isinstance(module, FSDPModule):
                    module.set_force_sum_reduction_for_comms(True)
        logger.info("Applied %s to the model", "HSDP" if parallel_dims.dp_replicate_enabled else "FSDP")
    precision = compute_precision(parallel_dims, job_config.training.mixed_precision_param, cfg.fsdp)
    logger.info("BOOST computes in %s", precision)
    if not parallel_dims.fsdp_enabled and fsdp_for_precision(
        parallel_dims, job_config.training.mixed_precision_param
    ):
        # torchtitan's maybe_enable_amp, called next, says mixed precision is off for TP/PP without
        # FSDP: the shard-degree-1 wrap above is what holds it there
        ContraryPrecisionLines.install(precision)
    return model


class ContraryPrecisionLines(logging.Filter):
    """torchtitan's two lines saying mixed precision is off under TP/PP without FSDP, once: its warning
    is dropped, its "disabled" line says what computes instead (BOOST's FSDP2 at shard degree 1)."""

    WARNING = "Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled"
    DISABLED = "Mixed precision training is disabled"

    def __init__(self, precision: str) -> None:
        super().__init__()
        self.precision = precision

    @classmethod
    def install(cls, precision: str) -> None:
        """On torchtitan's logger, until its "disabled" line has passed (each pipeline stage asks again)."""
        if not any(isinstance(f, cls) for f in logger.filters):
            logger.addFilter(cls(precision))

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(self.WARNING):
            return False
        if message == self.DISABLED:
            record.msg, record.args = f"Mixed precision training: BOOST computes in {self.precision}", None
            logger.removeFilter(self)
        return True


def fsdp_for_precision(parallel_dims: ParallelDims, mixed_precision_param: str) -> bool:
    """Whether FSDP must wrap the model at a shard degree of 1 for its mixed-precision policy
    (``boost.training.rules.fsdp_for_precision``)."""
    return rules.fsdp_for_precision(
        tp=parallel_dims.tp, pp=parallel_dims.pp, mixed_precision_param=mixed_precision_param
    )


def fsdp_wraps(parallel_dims: ParallelDims, mixed_precision_param: str) -> bool:
    """Whether FSDP wraps the model: for data parallelism (replicas included: HSDP, never DDP), or for its
    mixed precision at degree 1 (``boost.training.rules.fsdp_wraps``)."""
    return rules.fsdp_wraps(
        dp_replicate=parallel_dims.dp_replicate,
        dp_shard=parallel_dims.dp_shard,
        cp=parallel_dims.cp,
        tp=parallel_dims.tp,
        pp=parallel_dims.pp,
        mixed_precision_param=mixed_precision_param,
    )


def compute_precision(
    parallel_dims: ParallelDims, mixed_precision_param: str, fsdp: str = "fully_shard"
) -> str:
    """The dtype a layout computes in and what casts to it, e.g. ``"bfloat16 (FSDP2, shard degree 1)"``
    (``fsdp``: ``boost.fsdp``, which implementation casts)."""
    if mixed_precision_param == "float32":
        return "float32"
    wrapper = "FSDP2" if fsdp == "fully_shard" else "SimpleFSDP"
    if parallel_dims.fsdp_enabled:
        return f"{mixed_precision_param} ({wrapper})"
    if fsdp_wraps(parallel_dims, mixed_precision_param):  # replicas (HSDP), or TP/PP's precision
        return f"{mixed_precision_param} ({wrapper}, shard degree 1)"
    return f"{mixed_precision_param} (torchtitan's autocast: one device)"


def shard_placement(shard_degree: int) -> Callable[[nn.Parameter], Shard | None]:
    """FSDP2's ``shard_placement_fn`` for BOOST models: the batched up-projections ``[G, d_out, r]``
    on ``r`` (dim 2), everything else on dim 0 (FSDP2's default).

    FSDP2 shards dim 0 unless told otherwise, and there a batched weight has only ``G`` = 2 or 3
    members: with ``G`` < the shard degree, the first ranks hold whole members and the rest none
    (rank 0 held 1.30× its share of the model at 7B on 16, 2.06× at 30B on 32). ``r`` rather than
    ``d_out``: under BTP, tensor parallelism already shards ``d_out`` (dim 1), and FSDP on the same
    dim would become a ``_StridedShard`` (an interleaving copy around every all-gather); ``r`` is
    never split by TP, so each rank holds one plain box ``[G, d_out/t, r/fsdp]``. FSDP2 shards a
    dim other than 0 only evenly; where ``r`` does not divide, the weight stays on dim 0, and a
    warning (once per shape) says so: the numerics are the same either way, only the balance differs.
    """
    warned: set[tuple[int, ...]] = set()

    def placement(param: nn.Parameter) -> Shard | None:
        if param.dim() != 3:
            return None
        local = param.to_local() if isinstance(param, DTensor) else param
        if local.size(2) % shard_degree == 0:
            return Shard(2)
        if tuple(param.shape) in warned:
            return None
        warned.add(tuple(param.shape))
        logger.warning(
            f"FSDP: a batched {tuple(param.shape)} weight stays sharded on its {param.shape[0]} members: "
            f"its rank {local.size(2)} is not divisible by the FSDP degree {shard_degree}, so the first ranks "
            "hold more than their share of it"
        )
        return None

    return placement


def apply_fsdp(
    model: nn.Module,
    dp_mesh: DeviceMesh,
    param_dtype: torch.dtype,
    reduce_dtype: torch.dtype,
    pp_enabled: bool,
    cpu_offload: bool = False,
    reshard_after_forward_policy: str = "default",
) -> None:
    """torchtitan 0.2.2's llama3 ``apply_fsdp`` plus ``shard_placement_fn=shard_placement(...)``.

    Copied rather than called: torchtitan builds its ``fully_shard`` arguments inside the function
    and takes no placement argument. The wrapping units, the mixed-precision / CPU-offload policy,
    the reshard-after-forward choices and the disabled gradient division are torchtitan's, as is.
    """
    shard_degree = dp_mesh.size(dp_mesh.ndim - 1)  # HSDP: (dp_replicate, fsdp); FSDP shards on the last
    fsdp_config = {
        "mesh": dp_mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
        "shard_placement_fn": shard_placement(shard_degree),
    }
    if cpu_offload:
        fsdp_config["offload_policy"] = CPUOffloadPolicy()
    reshard_after_forward = reshards_after_forward(reshard_after_forward_policy, pp_enabled)

    if model.tok_embeddings is not None:
        fully_shard(model.tok_embeddings, **fsdp_config, reshard_after_forward=reshard_after_forward)
    for block in model.layers.values():
        fully_shard(block, **fsdp_config, reshard_after_forward=reshard_after_forward)
    # the last layers are prefetched right after the forward: torchtitan keeps them unsharded
    if model.norm is not None and model.output is not None:
        fully_shard(
            [model.norm, model.output],
            **fsdp_config,
            reshard_after_forward=reshard_after_forward_policy == "always",
        )
    fully_shard(model, **fsdp_config)
    disable_fsdp_gradient_division(model)

"""The private torch names the library (``boost/``) uses, by the module each is read from.

A torch newer than the supported range runs BOOST only where it has every private name BOOST uses:
``torchtitan_ext.torch_private.missing_private_api`` looks these up beside its own (``boost/`` imports torch
alone, so the library states its names here and the check reads them; ``tests/unit/test_torch_range.py``
holds this table to the library's code). A name is ``module.attribute`` after ``import module``; ops are
read from ``torch.ops``.
"""

from __future__ import annotations

LIBRARY_PRIVATE_TORCH: dict[str, tuple[str, ...]] = {
    # training/model/seeded_init.py: each rank's box of a DTensor, FSDP over a TP-sharded dim
    "torch.distributed.tensor._utils": ("compute_local_shape_and_global_offset",),
    "torch.distributed.tensor.placement_types": ("_StridedShard",),  # and training/optim/factor_rows.py
    # training/parallel/: collectives that trace into compiled graphs, and what AC keeps of them
    "torch.distributed._functional_collectives": (
        "all_reduce",
        "all_gather_tensor",
        "reduce_scatter_tensor",
        "AsyncCollectiveTensor",
    ),
    "torch.distributed.algorithms._checkpoint.checkpoint_wrapper": ("checkpoint_wrapper",),
    "torch.nn.attention.varlen": ("varlen_attn",),  # registers torch.ops.torch_attn._varlen_attn, read below
    "torch": (
        "ops._c10d_functional",
        "ops.aten._local_scalar_dense",
        "ops.torch_attn._varlen_attn",
        "_higher_order_ops.flex_attention",
        "_foreach_norm",  # training/parallel/grad_norm.py
        "_foreach_mul_",
    ),
    # runtime/comm_counter.py: a dispatch mode over every op, the group a collective names, backward or not
    "torch.utils._python_dispatch": ("TorchDispatchMode",),
    "torch._ops": ("HigherOrderOperator",),
    "torch._C": ("_current_graph_task_id",),
    "torch.distributed.distributed_c10d": ("_resolve_process_group",),
}

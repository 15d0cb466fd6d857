"""Tensor-parallel plans and styles for BOOST models (applied to a built model, never inside it)."""

from boost.training.parallel.activation_checkpoint import apply_compiled_full_ac, apply_lowrank_ac
from boost.training.parallel.bottleneck_style import BoostParallelStyle
from boost.training.parallel.norms import OnlineRMSNormDown, SyncRMSNorm
from boost.training.parallel.styles import ShardedRMSNormParallel
from boost.training.parallel.tp_plans import apply_tp, check_tp_shapes

__all__ = [
    "apply_lowrank_ac",
    "apply_compiled_full_ac",
    "apply_tp",
    "check_tp_shapes",
    "BoostParallelStyle",
    "ShardedRMSNormParallel",
    "OnlineRMSNormDown",
    "SyncRMSNorm",
]

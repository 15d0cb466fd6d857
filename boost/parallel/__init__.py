"""Tensor-parallel plans and styles for BOOST models (applied to a built model, never inside it)."""

from boost.parallel.checkpointing import apply_compiled_full_ac, apply_lowrank_ac
from boost.parallel.norms import OnlineRMSNormDown, SyncRMSNorm
from boost.parallel.plans import NORM_MODES, TP_SCHEMES, apply_tp, check_tp_shapes
from boost.parallel.styles import BoostParallelStyle, ShardedRMSNormParallel

__all__ = [
    "apply_lowrank_ac", "apply_compiled_full_ac",
    "NORM_MODES", "TP_SCHEMES", "apply_tp", "check_tp_shapes",
    "BoostParallelStyle", "ShardedRMSNormParallel", "OnlineRMSNormDown", "SyncRMSNorm",
]

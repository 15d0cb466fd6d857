"""Stop a run before a NaN/inf step reaches a checkpoint.

The check reads the global gradient norm torchtitan already computes (``clip_grad_norm_`` reduces it
over every parallel dimension, so every rank sees the same value and all stop together) when it is
brought to the host for logging. It adds no collective and no host sync to any step:
``torchtitan_ext.metrics`` makes every checkpoint step a log step, so no save happens unchecked.
"""

from __future__ import annotations

import math


class NonFiniteLossError(RuntimeError):
    pass


def refuse_non_finite(step: int, grad_norm: float) -> None:
    """Raise on every rank if step ``step``'s global gradient norm is NaN or inf."""
    if math.isfinite(grad_norm):
        return
    raise NonFiniteLossError(
        f"non-finite loss/gradients at step {step} (grad norm {grad_norm}): stopped before its checkpoint; "
        "the last checkpoint on disk is the last good one (lower optimizer.lr or check the data)"
    )

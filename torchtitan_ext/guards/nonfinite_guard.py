"""Stop a run before a NaN/inf step reaches a checkpoint.

The check reads the global gradient norm torchtitan already computes (``clip_grad_norm_`` reduces it
over every parallel dimension, so every rank sees the same value and all stop together) when it is
brought to the host for logging. It adds no collective and no host sync to any step:
``torchtitan_ext.metrics`` makes every checkpoint step a log step, and a stop's checkpoint (a signal's, at
any step) reads the step's norm first (``torchtitan_ext.train``), so no save happens unchecked.
"""

from __future__ import annotations

import math


class NonFiniteLossError(RuntimeError):
    pass


# A dry run (comm.mode = "fake_backend") computes on numbers no model would: each collective hands a
# rank its own data back instead of the sum over ranks. Megatron's row-parallel outputs and loss-parallel
# statistics are then one rank's share, and the dense 7B's gradient grew ~300x a block in backward until
# it overflowed at step 6-8 (bench/results/gpu.md); the same layout on real ranks trains on.
DRY_RUN_NOTE = (
    "; this is a dry run (comm.mode = fake_backend), whose collectives return each rank's own data "
    "instead of the sum over ranks: its losses and gradients are not the model's and can overflow "
    "after a few steps, while its memory and step times up to here stand (run fewer --training.steps)"
)


def refuse_non_finite(step: int, grad_norm: float, dry_run: bool = False) -> None:
    """Raise on every rank if step ``step``'s global gradient norm is NaN or inf; ``dry_run``: the run is
    on torchtitan's fake process group, and the message says what that means for its numbers."""
    if math.isfinite(grad_norm):
        return
    message = (
        f"non-finite loss/gradients at step {step} (grad norm {grad_norm}): stopped before its checkpoint; "
        "the last checkpoint on disk is the last good one (lower optimizer.lr or check the data)"
    )
    raise NonFiniteLossError(message + (DRY_RUN_NOTE if dry_run else ""))

"""Stop a run before a NaN/inf update reaches the weights, and so any checkpoint.

Installed on every optimizer by the trainer (``torchtitan_ext.train``), whatever ``boost.log_comm`` says.
"""

from __future__ import annotations

import torch


class NonFiniteLossError(RuntimeError):
    pass


def refuse_non_finite(optimizer: torch.optim.Optimizer) -> None:
    """Stop every rank before a NaN/inf update reaches the weights (and so any checkpoint).

    One all-reduce (MAX) of a one-element flag on the device the parameters live on: torchtitan
    starts an NCCL-only process group on GPUs, where a CPU tensor cannot take part in a collective.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    device = params[0].device if params else torch.device("cpu")
    bad = torch.zeros((), device=device)
    for p in params:
        if p.grad is not None:
            grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            # on the device, with no host sync per parameter: one .item() below
            bad = torch.maximum(bad, (~torch.isfinite(grad)).any().to(bad.dtype))
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MAX)
    if bad.item() == 0:
        return
    first = optimizer.param_groups[0]["params"][0]
    done = int(optimizer.state.get(first, {}).get("step", 0))
    raise NonFiniteLossError(
        f"non-finite loss/gradients at step {done + 1}: stopped before the update; the last checkpoint "
        "on disk is the last good one (lower optimizer.lr or check the data)"
    )


def install_nonfinite_guard(optimizers) -> None:
    """Check every step's gradients before the update (a step pre-hook on each of torchtitan's optimizers)."""
    for optimizer in optimizers.optimizers:
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: refuse_non_finite(opt))

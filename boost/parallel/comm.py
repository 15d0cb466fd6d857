"""Communication as conjugate pairs (Megatron's naming): which way each collective runs.

``all_reduce_grad_on_backward``  forward identity, backward all-reduce of the (Partial) gradient.
``all_reduce_local``             a differentiable-free forward all-reduce of a local tensor, used
                                 inside custom Functions that know they hold a partial sum.
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate


class _AllReduceGradOnBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: DTensor) -> DTensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: DTensor) -> DTensor:
        # The r-wide latent is Replicate; B's input-grad arrives Partial (one partial sum per
        # d_out shard). Sum it here, once, at width r — not later at width d.
        if isinstance(grad, DTensor) and any(p.is_partial() for p in grad.placements):
            grad = grad.redistribute(grad.device_mesh, [Replicate()] * grad.device_mesh.ndim)
        return grad


def all_reduce_grad_on_backward(x: torch.Tensor) -> torch.Tensor:
    """Identity forward; backward all-reduces a Partial gradient to Replicate (B's input-grad sync)."""
    if not isinstance(x, DTensor):
        return x
    return _AllReduceGradOnBackward.apply(x)


def all_reduce_local(x: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
    """Sum a local tensor over a 1-D mesh (functional collective: traceable by torch.compile)."""
    return funcol.wait_tensor(funcol.all_reduce(x, "sum", (mesh, 0)))

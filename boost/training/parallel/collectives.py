"""BTP's collectives, named for the direction each one runs in (Megatron's conjugate pairs).

``all_reduce_grad_on_backward``  forward identity, backward all-reduce of the (Partial) gradient.
``all_reduce_partial``           forward all-reduce of a rank's partial sum (a plain tensor); under
                                 low-rank activation checkpointing its results are recorded in the
                                 forward and replayed in the recompute (``boost.training.parallel.latent_replay``),
                                 which therefore communicates nothing.
``row_parallel_down``            a row-parallel down-projection and its forward all-reduce as one
                                 Function: under the recompute the replayed result stands in for
                                 both, so the GEMM whose output was kept is not run again.
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate

from boost.training.parallel.latent_replay import next_replayed, recorded

# A 1-D tensor-parallel group: a DeviceMesh, or its process group's name. The styles pass the name:
# a DeviceMesh handed to an autograd Function becomes an opaque graph input under torch.compile,
# which selective activation checkpointing then tries to save as if it were a tensor.
TPGroup = DeviceMesh | str


def _funcol_group(group: TPGroup):
    return (group, 0) if isinstance(group, DeviceMesh) else group


def group_name(mesh: DeviceMesh) -> str:
    """The name of a 1-D mesh's process group (what the styles hand to the collectives)."""
    return mesh.get_group().group_name


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


class _RowParallelDown(torch.autograd.Function):
    """``y = all_reduce(x_i A_iᵀ)`` on local shards::

    x_i  [.., d/t]   A_i  [R, d/t]   y  [.., R] replicated
    bwd  dx_i = dy A_i,  dA_i = dyᵀ x_i     no collective: dy is the full (replicated) grad
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, group: TPGroup) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        replayed = next_replayed()
        if replayed is not None:
            return replayed
        return all_reduce_partial(torch.matmul(x, weight.t()), group)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight = ctx.saved_tensors
        dx = torch.matmul(dy, weight)
        dweight = dy.reshape(-1, dy.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        return dx, dweight, None


def row_parallel_down(x: torch.Tensor, weight: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """The row-parallel down-projection with its pinned forward all-reduce, on local tensors."""
    return _RowParallelDown.apply(x, weight, group)


def all_reduce_partial(x: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """Sum a local tensor over a 1-D group (functional collective: traceable by torch.compile)."""
    replayed = next_replayed()
    if replayed is not None:
        return replayed
    return recorded(funcol.wait_tensor(funcol.all_reduce(x, "sum", _funcol_group(group))))

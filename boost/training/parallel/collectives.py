"""BTP's collectives, named for the direction each one runs in (Megatron's conjugate pairs).

``local_with_grad_summed``       the replicated latent as a local tensor; backward all-reduces the
                                 up-projections' partial input-gradient.
``all_reduce_partial``           forward all-reduce of a rank's partial sum (a plain tensor); under
                                 low-rank activation checkpointing its results are recorded in the
                                 forward and replayed in the recompute (``boost.training.parallel.latent_replay``),
                                 which therefore communicates nothing.
``row_parallel_down``            a row-parallel down-projection and its forward all-reduce as one
                                 Function: under the recompute the replayed result stands in for
                                 both, so the GEMM whose output was kept is not run again.

With the latent sharded on its tokens (``BoostParallelStyle(sequence_parallel=True)``) each all-reduce is
split into its two halves, the latent living between them on a rank's ``T/t`` tokens (rows of a
``[T, R]`` latent: contiguous, so neither half copies)::

``reduce_scatter_rows``          forward half: a rank's partial sums reduced, its rows kept (recorded where
                                 ``row_parallel_down`` calls it)
``gather_tokens``                second half: the rows gathered whole before ``B`` (recorded); backward
                                 reduce-scatters ``B``'s partial input-gradient to the rank's rows
``row_parallel_down(rows=True)`` the down-projection with the first half; backward gathers ``dy``
``summed_on_backward``           parameters read on a rank's rows only (LaX's norm and gate): their
                                 gradients summed over the group in one all-reduce
"""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from boost.training.parallel.latent_replay import replayed_or_recorded

# A 1-D tensor-parallel group: a DeviceMesh, or its process group's name. The styles pass the name:
# a DeviceMesh handed to an autograd Function becomes an opaque graph input under torch.compile,
# which selective activation checkpointing then tries to save as if it were a tensor.
TPGroup = DeviceMesh | str


def _funcol_group(group: TPGroup):
    return (group, 0) if isinstance(group, DeviceMesh) else group


def group_name(mesh: DeviceMesh) -> str:
    """The name of a 1-D mesh's process group (what the styles hand to the collectives)."""
    return mesh.get_group().group_name


class _SumGradOnBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, group: TPGroup) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # B's input-gradient: one partial sum per d_out shard. Summed here, once, at width r — not later at
        # width d. The members' views may hand it back strided; a collective's buffer is contiguous (NCCL).
        return all_reduce_sum(grad.contiguous(), ctx.group), None


def local_with_grad_summed(x: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """The replicated latent as a local tensor (a ``Replicate`` DTensor's own, or ``x`` itself), as the
    column-parallel up-projections read it; backward all-reduces their partial input-gradient."""
    local = x.to_local() if isinstance(x, DTensor) else x
    return _SumGradOnBackward.apply(local, group)


class _RowParallelDown(torch.autograd.Function):
    """``y = all_reduce(x_i A_iᵀ)`` on local shards, or its rows ``y_i = reduce_scatter(x_i A_iᵀ)``::

    x_i  [.., d/t]   A_i  [R, d/t]   y  [.., R] replicated (rows: x_i [T, d/t], y_i [T/t, R])
    bwd  dx_i = dy A_i,  dA_i = dyᵀ x_i     no collective: dy is the full (replicated) grad
         (rows: dy = all_gather(dy_i) first)
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, group: TPGroup, rows: bool) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.group, ctx.rows = group, rows
        reduce = reduce_scatter_rows if rows else all_reduce_sum
        return replayed_or_recorded(lambda: reduce(torch.matmul(x, weight.t()), group))

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight = ctx.saved_tensors
        if ctx.rows:
            dy = all_gather_rows(dy, ctx.group)
        dx = torch.matmul(dy, weight)
        dweight = dy.reshape(-1, dy.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        return dx, dweight, None, None


def row_parallel_down(
    x: torch.Tensor, weight: torch.Tensor, group: TPGroup, rows: bool = False
) -> torch.Tensor:
    """The row-parallel down-projection with its pinned forward all-reduce, on local tensors; ``rows``: of a
    ``[T, d/t]`` shard, reduce-scattered to this rank's rows of the latent."""
    return _RowParallelDown.apply(x, weight, group, rows)


def _waited(result: torch.Tensor) -> torch.Tensor:
    """A functional collective's result, waited once. Eager, it is an ``AsyncCollectiveTensor``, waited here
    into a plain tensor; traced (torch.compile), ``funcol`` has put the wait in the graph already, and a
    second ``wait_tensor`` would be one more host call per collective that waits for nothing."""
    return result.wait() if isinstance(result, funcol.AsyncCollectiveTensor) else result


def all_reduce_partial(x: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """Sum a local tensor over a 1-D group (functional collective: traceable by torch.compile); recorded
    for, and replayed in, low-rank AC's recompute."""
    return replayed_or_recorded(lambda: all_reduce_sum(x, group))


def all_reduce_sum(x: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """Sum a local tensor over the group (not recorded)."""
    return _waited(funcol.all_reduce(x, "sum", _funcol_group(group)))


def reduce_scatter_rows(x: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """Sum a local ``[T, n]`` tensor over the group, this rank's ``T/t`` rows kept (not recorded)."""
    # torch 2.13 names it reduce_scatter_single (reduce_scatter_tensor warns); older torches have only the
    # old name. Looked up at each call: a dry run's fake process group wraps whichever the torch has.
    reduce_scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
    return _waited(reduce_scatter(x.contiguous(), "sum", 0, _funcol_group(group)))


def all_gather_rows(x: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """Every rank's ``[T/t, n]`` rows gathered into the whole ``[T, n]`` (not recorded)."""
    all_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
    return _waited(all_gather(x.contiguous(), 0, _funcol_group(group)))


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows: torch.Tensor, group: TPGroup) -> torch.Tensor:
        ctx.group = group
        return replayed_or_recorded(lambda: all_gather_rows(rows, group))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # the up-projections' input-gradient: one partial sum per d_out shard, reduced and scattered to the rows
        return reduce_scatter_rows(grad, ctx.group), None


def gather_tokens(rows: torch.Tensor, group: TPGroup) -> torch.Tensor:
    """This rank's ``[T/t, R]`` rows of the latent gathered into the whole ``[T, R]`` (a local tensor, which
    the up-projections read with their local shards); backward reduce-scatters their partial
    input-gradient back to the rows: one collective, unlike a Replicate DTensor, whose ``Partial`` gradient
    ``DTensor.from_local`` would all-reduce first (torch ≥ 2.13's ``grad_placements`` aside)."""
    return _GatherTokens.apply(rows, group)


class _SummedOnBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group: TPGroup, *params: torch.Tensor):
        ctx.group = group
        return tuple(p.view_as(p) for p in params)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        flat = torch.cat([g.reshape(-1) for g in grads])
        summed = all_reduce_sum(flat, ctx.group)
        # (autograd hands a Function zeros, not None, for an output that had no gradient)
        parts = summed.split([g.numel() for g in grads])
        return (None, *(s.view_as(g).to(g.dtype) for s, g in zip(parts, grads)))


def summed_on_backward(params: list[torch.Tensor], group: TPGroup) -> tuple[torch.Tensor, ...]:
    """The local tensors of replicated parameters, as they are; backward sums their gradients over the
    group, all in one all-reduce (each rank's gradient covers its own tokens only)."""
    return _SummedOnBackward.apply(group, *params)

"""The global gradient norm and its clipping on the gradients' local shards: one foreach norm, one
collective per mesh, one foreach scale.

torch's ``clip_grad_norm_`` on DTensor gradients takes each norm as a DTensor op (a ``_NormPartial``
result per parameter), stacks the per-parameter DTensors and reduces them: sharding propagation in
Python for every parameter, every step. The sum of squares needs none of it::

    g_p   this rank's shard of parameter p's gradient, on mesh M_p with placements P_p
    c_p   Π sizes of the mesh dims where P_p is Replicate: how many ranks hold the same g_p
    ‖g‖²  = Σ_meshes all_reduce_M( Σ_{p on M} ‖g_p‖² / c_p )      (sum over every mesh dim of M)

A shard is counted once over the ranks that split it and once over the ranks that copy it, which is
what ``_NormPartial`` and Replicate give per parameter. Only the 2-norm, and no ``Partial`` gradient
(one that still owes a reduction): ``local_grad_norm_applies`` says when, and the trainer keeps torch's
path otherwise.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate


def local_grad_norm_applies(grads: Iterable[torch.Tensor], norm_type: float) -> bool:
    """Whether ``total_grad_norm`` computes these gradients' norm: the 2-norm, no ``Partial`` placement."""
    if float(norm_type) != 2.0:
        return False
    return not any(isinstance(g, DTensor) and any(p.is_partial() for p in g.placements) for g in grads)


def _copies(g: DTensor) -> int:
    return math.prod(g.device_mesh.size(i) for i, p in enumerate(g.placements) if isinstance(p, Replicate))


def total_grad_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all of ``grads`` (DTensors or plain tensors) over every rank of their meshes, fp32.

    Plain tensors are one rank's whole gradients (nothing to reduce); DTensors are reduced over their mesh.

    Example::

        >>> total_grad_norm([torch.ones(3), torch.full((4,), 2.0)])  # √(3 + 16)
        tensor(4.3589)
    """
    # (mesh or None, copies, device, dtype) -> local tensors; a mesh of None: plain, unreduced tensors
    groups: dict[tuple, list[torch.Tensor]] = defaultdict(list)
    for g in grads:
        if isinstance(g, DTensor):
            local = g._local_tensor
            groups[(g.device_mesh, _copies(g), local.device, local.dtype)].append(local)
        else:
            groups[(None, 1, g.device, g.dtype)].append(g)
    per_mesh: dict[object, list[torch.Tensor]] = defaultdict(list)
    for (mesh, copies, _, _), locals_ in groups.items():
        squares = torch.stack(torch._foreach_norm(locals_)).float().square().sum()
        per_mesh[mesh].append(squares / copies if copies != 1 else squares)
    total: torch.Tensor | None = None
    for mesh, parts in per_mesh.items():
        part = torch.stack(parts).sum() if len(parts) > 1 else parts[0]
        if mesh is not None:
            part = DTensor.from_local(part, mesh, [Partial()] * mesh.ndim, run_check=False).full_tensor()
        total = part if total is None else total + part.to(total.device)
    if total is None:
        return torch.tensor(0.0)
    return total.sqrt()


def clip_grads_with_norm_(grads: list[torch.Tensor], max_norm: float, total_norm: torch.Tensor) -> None:
    """Scale ``grads`` in place by ``min(1, max_norm / (total_norm + 1e-6))`` (torch's coefficient), on
    their local shards: one foreach multiply per device and dtype, no host sync."""
    coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    groups: dict[tuple, list[torch.Tensor]] = defaultdict(list)
    for g in grads:
        local = g._local_tensor if isinstance(g, DTensor) else g
        groups[(local.device, local.dtype)].append(local)
    for (device, _), locals_ in groups.items():
        torch._foreach_mul_(locals_, coef.to(device))

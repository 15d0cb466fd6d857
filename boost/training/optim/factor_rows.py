"""A factor parameter seen by its rows, however it is sharded: what LORO's exact step works on.

LORO's exact step is row-local except for ``r × r`` products summed over the rows (Gram matrices,
``Uᵀ·X``). So a factor keeps whatever shards its *rows* (BTP's ``Shard`` of ``d_out``/``d_in``, FSDP2's
``Shard(0)`` of an up-projection ``[d_out, r]``, both at once as a ``_StridedShard``), and those
``r × r`` sums are all-reduced over the mesh dims that shard the rows. A shard of any other dim — the
rank dim (vanilla TP; FSDP2's ``Shard(0)`` of ``A [r, d_in]``, ``Shard(2)`` of a batched ``[G, d_out, r]``)
— is gathered for the exact step, the factor and its Adam direction: twice what FSDP's forward
all-gather of that factor moves (in the parameters' fp32, not FSDP's bf16), once every exact step. The
new factor goes back as a local slice (no communication).

Example (one process: nothing is sharded, nothing moves)::

    >>> rows = factor_rows(torch.ones(6, 2), row_dim=0)
    >>> rows.local.shape, rows.groups, rows.rows
    (torch.Size([6, 2]), (), 6)
    >>> sum_over_rows([(torch.ones(2, 2), ())])[0].sum().item()
    4.0
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

Groups = tuple[dist.ProcessGroup, ...]


@dataclass
class FactorRows:
    """This rank's rows of a factor parameter, every other dim whole."""

    local: torch.Tensor
    groups: Groups
    """The process groups the rows are split over: a row-wise sum is all-reduced over each."""
    rows: int
    """The global row count (LORO's ``n``)."""
    source: torch.Tensor
    row_placements: tuple | None
    """The placements ``local`` has (the source's, rank-dim shards replaced by ``Replicate``)."""

    def write_back(self, new_local: torch.Tensor) -> None:
        """Copy ``new_local`` (laid out like ``local``) into the source's own shard: a local slice."""
        if not isinstance(self.source, DTensor):
            self.source.copy_(new_local)
            return
        src = self.source
        whole = DTensor.from_local(
            new_local, src.device_mesh, self.row_placements, shape=src.shape, stride=src.stride()
        )
        src.to_local().copy_(whole.redistribute(src.device_mesh, src.placements).to_local())


def _is_shard(placement) -> bool:
    # FSDP2 over a TP shard of the same dim places a _StridedShard, which is no Shard subclass (torch 2.13)
    return isinstance(placement, (Shard, _StridedShard))


def _shards_dim(placement, dim: int) -> bool:
    return _is_shard(placement) and placement.dim == dim


def factor_rows(t: torch.Tensor, row_dim: int) -> FactorRows:
    """``t`` (a parameter, or a tensor laid out like one) with the shards of dims other than ``row_dim``
    gathered (an all-gather per such mesh dim) and the shards of ``row_dim`` kept."""
    if not isinstance(t, DTensor):
        return FactorRows(t, (), t.shape[row_dim], t, None)
    mesh = t.device_mesh
    keep = tuple(p if _shards_dim(p, row_dim) or not _is_shard(p) else Replicate() for p in t.placements)
    local = t.to_local() if keep == tuple(t.placements) else t.redistribute(mesh, keep).to_local()
    groups = tuple(mesh.get_group(i) for i, p in enumerate(keep) if _shards_dim(p, row_dim))
    return FactorRows(local, groups, t.shape[row_dim], t, keep)


def sum_over_rows(parts: list[tuple[torch.Tensor, Groups]]) -> list[torch.Tensor]:
    """Each partial ``r × r`` product summed over its factor's row groups. Parts with the same groups
    travel together, flattened into one contiguous buffer of one dtype (NCCL's rules): one all-reduce
    per group per call, however many parts."""
    out: list[torch.Tensor | None] = [None] * len(parts)
    buckets: dict[tuple, list[int]] = {}
    for i, (t, groups) in enumerate(parts):
        if not groups:
            out[i] = t
        else:
            buckets.setdefault(tuple(id(g) for g in groups), []).append(i)
    for members in buckets.values():
        tensors = [parts[i][0] for i in members]
        dtypes = {t.dtype for t in tensors}
        assert len(dtypes) == 1, f"one dtype per all-reduce, got {dtypes}"
        flat = torch.cat([t.reshape(-1) for t in tensors])
        for group in parts[members[0]][1]:
            dist.all_reduce(flat, group=group)
        for i, piece in zip(members, flat.split([t.numel() for t in tensors])):
            out[i] = piece.view_as(parts[i][0])
    return out  # type: ignore[return-value]

"""Layout-independent random init that draws only this rank's shard, on the shard's device.

Every randomly initialised weight is a function of its canonical name, the seed and the *global*
element index alone, so the initial model is bit-identical for every parallel layout and for
grouped vs ungrouped projections — and a rank draws only what it holds, where it holds it:

    part          [R, C]          one named factor (``layers.3.attention.q.A``), std · N(0, 1);
                                  a vector [C] is one row
    element (i, j)                std · z(key, i, j): a counter-based normal (``keyed_normal``),
                                  key = blake2b(seed, name), no generator state
    shard         rows × cols     this rank's box of the global tensor (DTensor placements);
                                  the rank computes exactly the box's elements, in chunks,
                                  on the parameter's device

At 7B on 16 ranks a rank draws ~1/16 of the model instead of all of it.
A parameter may be several parts concatenated along dim 0 (grouped ``A_qkv = [A_q; A_k; A_v]``)
or stacked (batched ``B [G, d_out, r]``); each part keeps the coordinates of its own shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from boost.training.model.keyed_normal import fill_keyed_normal, key_words


@dataclass(frozen=True)
class SeededPart:
    """One named factor: ``std · N(0, 1)`` of ``shape``, seeded by ``key`` (``uniform``: a uniform of the
    same ``std``, ``U(-√3·std, √3·std)``, as Kaiming-uniform initialisations draw)."""

    key: str
    shape: tuple[int, ...]
    std: float
    uniform: bool = False


def shard_box(param: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(global offset, local shape)`` of this rank's part of ``param``: all of it unless it is a DTensor.

    Shard placements (TP, FSDP2, both on a 2-D mesh) give a box. FSDP2 marks a dim sharded by TP
    and then FSDP as ``_StridedShard(split_factor = later shards on that dim)``, which is still
    a box (each TP chunk cut further); any other strided layout is refused, not guessed.
    """
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    from torch.distributed.tensor.placement_types import _StridedShard

    if not isinstance(param, DTensor):
        return (0,) * param.dim(), tuple(param.shape)
    mesh, placements = param.device_mesh, param.placements
    for i, p in enumerate(placements):
        if isinstance(p, _StridedShard):
            later = math.prod(
                mesh.size(j)
                for j in range(i + 1, len(placements))
                if isinstance(placements[j], Shard) and placements[j].dim == p.dim
            )
            if later != p.split_factor:
                raise NotImplementedError(
                    f"seeded init: placements {placements} of a {tuple(param.shape)} parameter do not give each "
                    "rank one box of the global tensor; extend boost.training.model.seeded_init.shard_box for them"
                )
    local_shape, offset = compute_local_shape_and_global_offset(param.shape, mesh, placements)
    held = tuple(param.to_local().shape)
    if tuple(local_shape) != held:
        raise RuntimeError(
            f"seeded init: placements {placements} give a {local_shape} shard, the rank holds {held}"
        )
    return tuple(offset), tuple(local_shape)


@torch.no_grad()
def fill_seeded(param: torch.Tensor, parts: SeededPart | Sequence[SeededPart], seed: int) -> None:
    """Fill this rank's shard of ``param`` with its seeded values, drawn on the shard's device.

    ``parts`` lie along dim 0 of ``param``'s global shape, in order: a part with as many dims as
    ``param`` is concatenated, one with a dim fewer is stacked (takes one index of dim 0).
    """
    from torch.distributed.tensor import DTensor

    parts = [parts] if isinstance(parts, SeededPart) else list(parts)
    shape = tuple(param.shape)
    extents = [1 if len(p.shape) == len(shape) - 1 else p.shape[0] for p in parts]
    for p in parts:
        inner = p.shape if len(p.shape) == len(shape) - 1 else p.shape[1:]
        if tuple(inner) != shape[1:]:
            raise ValueError(f"seeded init: part {p.key} {p.shape} does not fit a {shape} parameter")
    if sum(extents) != shape[0]:
        raise ValueError(f"seeded init: parts {[p.key for p in parts]} cover {sum(extents)} rows of {shape}")
    offset, local_shape = shard_box(param)
    local = param.to_local() if isinstance(param, DTensor) else param
    rest = [slice(o, o + n) for o, n in zip(offset[1:], local_shape[1:])]
    row0, row1 = offset[0], offset[0] + local_shape[0]
    start = 0
    for part, extent in zip(parts, extents):
        lo, hi = max(start, row0), min(start + extent, row1)
        if lo < hi:
            if extent == 1 and len(part.shape) == len(shape) - 1:
                fill_region(local[lo - row0], part, seed, rest)
            else:
                fill_region(local[lo - row0 : hi - row0], part, seed, [slice(lo - start, hi - start), *rest])
        start += extent


def fill_region(out: torch.Tensor, part: SeededPart, seed: int, region: Sequence[slice]) -> None:
    """Write ``part``'s seeded values on ``region`` (slices of its global shape) into ``out`` (a view
    of the region's shape, any dtype), computed on ``out``'s device whatever the ambient one."""
    if len(part.shape) not in (1, 2):
        raise ValueError(f"seeded init: part {part.key} {part.shape} is not a vector or a matrix")
    rows, cols = (range(0, 1), region[0]) if len(part.shape) == 1 else region
    view = out.unsqueeze(0) if len(part.shape) == 1 else out
    key = key_words(part.key, seed)
    fill_keyed_normal(
        view, key, range(rows.start, rows.stop), range(cols.start, cols.stop), part.std, part.uniform
    )


def draw_region(
    part: SeededPart, seed: int, region: Sequence[slice], device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``part``'s seeded values on ``region`` (slices of its global shape), float32, on ``device``."""
    out = torch.empty([s.stop - s.start for s in region], dtype=torch.float32, device=device)
    fill_region(out, part, seed, region)
    return out

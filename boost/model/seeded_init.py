"""Layout-independent random init that draws only this rank's shard.

Every randomly initialised weight is a function of its canonical name, the seed and the *global*
element index alone, so the initial model is bit-identical for every parallel layout and for
grouped vs ungrouped projections — and a rank draws only what it holds:

    part          [R, C]          one named factor (``layers.3.attention.q.A``), std · N(0, 1)
    tile (i, j)   [256, 256]      a fixed block of the part, drawn from its own generator,
                                  seeded by (name, seed, tile index): counter-based
    shard         rows × cols     this rank's box of the global tensor (DTensor placements);
                                  the rank draws the tiles that overlap it, nothing else

At 7B on 16 ranks a rank draws ~1/16 of the model instead of all of it.
A parameter may be several parts concatenated along dim 0 (grouped ``A_qkv = [A_q; A_k; A_v]``)
or stacked (batched ``B [G, d_out, r]``); each part keeps the tiles of its own shape.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# Tile edge: shards at real scale are multiples of 256 on both dims (d/t/fsdp, r/fsdp), so a rank
# draws no more than it holds there; smaller tiles would multiply the per-tile Python overhead.
TILE = 256


@dataclass(frozen=True)
class SeededPart:
    """One named factor: ``std · N(0, 1)`` of ``shape``, seeded by ``key``."""

    key: str
    shape: tuple[int, ...]
    std: float


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
                    "rank one box of the global tensor; extend boost.model.seeded_init.shard_box for them"
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
    """Fill this rank's shard of ``param`` with its seeded values.

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
                block = draw_region(part, seed, rest).unsqueeze(0)
            else:
                block = draw_region(part, seed, [slice(lo - start, hi - start), *rest])
            local[lo - row0 : hi - row0].copy_(block)
        start += extent


def draw_region(part: SeededPart, seed: int, region: Sequence[slice]) -> torch.Tensor:
    """``part``'s seeded values on ``region`` (slices of its global shape), float64, on the CPU.

    Drawn on the CPU whatever the ambient device (``with torch.device("cuda")``): the generator is a
    CPU one, and the values must not depend on the device; the caller copies them to the parameter's.
    """
    out = torch.empty([s.stop - s.start for s in region], dtype=torch.float64, device="cpu")
    if out.numel() == 0:
        return out
    tile = _tile_shape(part.shape)
    grid = [math.ceil(n / t) for n, t in zip(part.shape, tile)]
    base = _base_seed(part.key, seed)
    gen = torch.Generator()
    for index in itertools.product(
        *(range(s.start // t, math.ceil(s.stop / t)) for s, t in zip(region, tile))
    ):
        lo = [i * t for i, t in zip(index, tile)]
        hi = [min(l + t, n) for l, t, n in zip(lo, tile, part.shape)]
        # mt19937 takes 32 bits of its seed: consecutive tiles of a part get consecutive seeds, so
        # they never share a stream; two parts' seed ranges overlap by chance, ~(parts·tiles)/2^32
        # (1e-2 at 30B), which would repeat one tile: harmless for training.
        gen.manual_seed((base + _ravel(index, grid)) % 2**32)
        values = torch.randn(
            [h - l for l, h in zip(lo, hi)], generator=gen, dtype=torch.float64, device="cpu"
        )
        a = [max(l, s.start) for l, s in zip(lo, region)]
        b = [min(h, s.stop) for h, s in zip(hi, region)]
        out[tuple(slice(x - s.start, y - s.start) for x, y, s in zip(a, b, region))] = values[
            tuple(slice(x - l, y - l) for x, y, l in zip(a, b, lo))
        ]
    return out.mul_(part.std)


def _tile_shape(shape: Sequence[int]) -> list[int]:
    # tiles span the last two dims; leading dims (if any) one index at a time
    return [1] * (len(shape) - 2) + [TILE] * min(2, len(shape))


def _ravel(index: Sequence[int], grid: Sequence[int]) -> int:
    flat = 0
    for i, n in zip(index, grid):
        flat = flat * n + i
    return flat


def _base_seed(key: str, seed: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}/{key}".encode(), digest_size=8).digest(), "little")

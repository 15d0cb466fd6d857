"""The LORO factorisations of a BOOST model: one ``W = M·Nᵀ`` per low-rank projection.

LORO's authors write a low-rank layer as ``y = x·N·Mᵀ`` (``weight_in`` N, ``d_in × r``; ``weight_out`` M,
``d_out × r``). BOOST's ``Bottleneck`` computes ``y = B·(A·x)``, so ``M = B`` and ``N = Aᵀ``. With grouping,
one ``Bottleneck`` holds several members: q/k/v read one ``A_qkv`` (each member owns ``r`` of its rows)
and their up-projections may be one batched ``[G, d_out, r]`` weight (each member owns one slice).
Each member's ``(B_i, A_i)`` is one factorisation; a parameter may hold several.

Example::

    >>> from boost.training.model import ModelArgs, Transformer
    >>> model = Transformer(ModelArgs.from_flavor("debug", linear="svd", vocab_size=256, n_layers=1))
    >>> for p in factor_pairs(model)[:4]:
    ...     print(p.name, p.down_rows, p.up_index, tuple(p.up.shape))
    layers.0.attention.wqkv.q slice(0, 64, None) None (256, 64)
    layers.0.attention.wqkv.k slice(64, 128, None) 0 (2, 128, 64)
    layers.0.attention.wqkv.v slice(128, 192, None) 1 (2, 128, 64)
    layers.0.attention.wo.o slice(0, 64, None) None (256, 64)
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from boost.training.model.linears import BatchedUp, Bottleneck


@dataclass(frozen=True)
class FactorPair:
    """One low-rank projection's factors, as slices of the parameters that hold them."""

    name: str
    down: nn.Parameter
    """A's parameter ``[Σr, d_in]``; ``N = down[down_rows]ᵀ`` (rows ``d_in``, the input dim)."""
    down_rows: slice
    up: nn.Parameter
    """B's parameter: ``[d_out, r]``, or ``[G, d_out, r]`` batched; ``M = up`` or ``up[up_index]``."""
    up_index: int | None
    rank: int
    d_in: int
    d_out: int

    # The dim of each parameter that holds the factor's rows (LORO's ``n``): the dim BTP shards.
    @property
    def down_row_dim(self) -> int:
        return 1

    @property
    def up_row_dim(self) -> int:
        return 0 if self.up_index is None else 1


def factor_pairs(model: nn.Module) -> list[FactorPair]:
    """Every member of every ``Bottleneck`` in ``model``: modules in order, members in order (q, k, v)."""
    pairs = []
    for prefix, module in model.named_modules():
        if not isinstance(module, Bottleneck):
            continue
        offsets = [0]
        for r in module.ranks:
            offsets.append(offsets[-1] + r)
        holder = {}  # member index -> (up unit, position in a batched unit)
        for unit, group in zip(module.up, module.up_groups):
            for position, i in enumerate(group):
                holder[i] = (unit, position if isinstance(unit, BatchedUp) else None)
        for i, (name, rank, d_out) in enumerate(module.members):
            unit, index = holder[i]
            pairs.append(
                FactorPair(
                    name=f"{prefix}.{name}",
                    down=module.down.weight,
                    down_rows=slice(offsets[i], offsets[i + 1]),
                    up=unit.weight,
                    up_index=index,
                    rank=rank,
                    d_in=module.d_in,
                    d_out=d_out,
                )
            )
    return pairs

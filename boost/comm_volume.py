"""Closed-form tensor-parallel communication per transformer layer, per direction.

Counts and sizes are per rank and count each collective at its full (un-sharded) payload, the
convention of ``boost.CommCounter``; the tests check these formulas against the counter.
``tokens`` is b·s. For ``btp`` the norm statistics (one value per token per pre-norm) are listed
separately from the 7·r latent columns.

Example::

    >>> from boost.model import ModelArgs
    >>> args = ModelArgs.from_flavour("7B", linear="cola")
    >>> fwd = per_layer(args, "btp", tokens=4 * 4096)["forward"]
    >>> fwd["all_reduce"]
    (4, 117473280)
"""

from __future__ import annotations

from collections import defaultdict

Volume = dict[str, tuple[int, int]]  # collective kind -> (count, elements)


def per_layer(args, scheme: str, tokens: int, norm: str = "online", sequence_parallel: bool = False) -> dict[str, Volume]:
    """``{"forward": {kind: (count, elements)}, "backward": {...}}`` for one transformer layer."""
    d, f, r = args.dim, args.ffn_dim, args.rank
    kv = args.kv_heads * args.head_dim
    fwd: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    bwd: dict[str, list[int]] = defaultdict(lambda: [0, 0])

    def add(table, kind, count, width):
        table[kind][0] += count
        table[kind][1] += count * width * tokens

    if scheme == "btp":
        readers = [3 * r, 2 * r] if args.grouped else [r] * 5  # q/k/v and gate/up down-projections
        for width in readers + [r, r]:  # + o, down
            add(fwd, "all_reduce", 1, width)
            add(bwd, "all_reduce", 1, width)
        if norm == "online" and args.grouped:
            # the statistic rides in the reader's all-reduce: one more column, no more collectives
            fwd["all_reduce"][1] += 2 * tokens
        elif norm in ("online", "sync"):
            add(fwd, "all_reduce", 2, 1)  # Σx² of each pre-norm
            add(bwd, "all_reduce", 2, 1)  # Σ dy·γ·x of each pre-norm
    elif scheme == "vanilla":
        for width in (d, kv, kv, d, f, f, d):  # every B output, full width
            add(fwd, "all_reduce", 1, width)
        for width in (d, d, d, f):  # attention input, o's input, ffn input, down's input
            add(bwd, "all_reduce", 1, width)
    elif scheme == "megatron":
        if sequence_parallel:
            for table, gather, scatter in ((fwd, "all_gather", "reduce_scatter"), (bwd, "reduce_scatter", "all_gather")):
                add(table, gather, 2, d)
                add(table, scatter, 2, d)
        else:
            add(fwd, "all_reduce", 2, d)
            add(bwd, "all_reduce", 2, d)
    else:
        raise ValueError(f"unknown tp scheme {scheme!r}")
    return {"forward": {k: tuple(v) for k, v in fwd.items()}, "backward": {k: tuple(v) for k, v in bwd.items()}}


def total(volume: Volume) -> tuple[int, int]:
    """``(count, elements)`` summed over collective kinds."""
    return sum(c for c, _ in volume.values()), sum(e for _, e in volume.values())

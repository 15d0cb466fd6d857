"""The time of one LORO exact step (``boost.training.optim.loro_exact``) per rank, and its cost per training step.

Per factor pair, on a rank holding ``n_m`` rows of ``M = B`` and ``n_n`` rows of ``N = Aᵀ`` (``d/t`` under
btp, whole under vanilla after its gathers), all in float64:

==================  =============================================================================
component           time
==================  =============================================================================
GEMMs               ``27·(n_m + n_n)·r²`` flops: 4 QRs of 3 passes (Gram ``2nr²`` + solve ``nr²``), two
                    solves, two cross products, two projections, the two ``n × 2r · 2r × r`` products;
                    at ``peak_flops_fp64 · η_gemm``
factorisations      the ``2r × 2r`` SVD, ``22·(2r)³`` flops, and 12 Choleskys ``r³/3``, at
                    ``peak_flops_fp64 · eta_svd``: every rank runs every pair's (replicated)
collectives         ``boost.planning.comm_volume.loro_exact_step`` per layer, 8-byte elements for the all-reduced
                    sums (the gathered factors are fp32), at ``bus_bw`` (``collective_time``)
==================  =============================================================================

Spread over ``loro_freq`` steps, that is the exact step's share of a training step. ``eta_svd`` on the GPUs
is assumed, not measured (cuSOLVER's dense SVD is bound by its bidiagonalisation's matrix-vector work);
on this CPU it is measured (``hardware.CPU_GLOO``).

Example::

    >>> cost = loro_exact_step_time("7B", "btp", tp=4, hardware="a100")
    >>> sorted(cost), cost["svd"] > cost["gemm"]
    (['comm', 'gemm', 'per_step', 'svd', 'total'], True)
"""

from __future__ import annotations

import dataclasses

from boost.planning.comm_volume import loro_exact_step
from boost.planning.perf_model.hardware import Hardware, get_hardware
from boost.planning.perf_model.step_time import collective_time, model_args
from boost.training.rules import SCHEMES

FP64_BYTES = 8


def _pairs(args) -> list[tuple[int, int]]:
    """``(d_in, d_out)`` of the seven projections of a layer."""
    d, f = args.dim, args.ffn_dim
    kv = args.kv_heads * args.head_dim
    return [(d, d), (d, kv), (d, kv), (d, d), (d, f), (d, f), (f, d)]


def loro_exact_step_time(
    flavor: str, scheme: str, tp: int, *, hardware: str | Hardware, pp: int = 1, loro_freq: int = 500
) -> dict[str, float]:
    """Seconds of one exact step on a rank (``gemm``, ``svd``, ``comm``, ``total``) and ``per_step``,
    the total spread over ``loro_freq`` training steps."""
    hw = get_hardware(hardware)
    args = model_args(flavor, scheme, linear="svd")
    if SCHEMES[scheme].shards_rank:
        args = dataclasses.replace(args, group_linears=False)
    r = args.rank
    shard = 1 if SCHEMES[scheme].shards_rank else tp  # vanilla gathers its factors whole
    layers = -(-args.n_layers // pp)
    flops = sum(27 * (d_in + d_out) / shard * r * r for d_in, d_out in _pairs(args))
    gemm = layers * flops / (hw.peak_flops_fp64 * hw.eta_gemm)
    svd = layers * 7 * (22 * (2 * r) ** 3 + 12 * r**3 / 3) / (hw.peak_flops_fp64 * hw.eta_svd)
    volume = loro_exact_step(args, scheme) if tp > 1 else {}
    comm = layers * sum(
        collective_time({kind: v}, tp, hw, dtype_bytes=FP64_BYTES if kind == "all_reduce" else 4)
        for kind, v in volume.items()
    )
    total = gemm + svd + comm
    return {"gemm": gemm, "svd": svd, "comm": comm, "total": total, "per_step": total / loro_freq}

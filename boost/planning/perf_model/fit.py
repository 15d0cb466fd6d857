"""Fit ``A100``'s efficiencies to the reference paper's table. Run by hand when the model changes
(docs/perf_model.md, "Recalibrating"); the tests use the stored constants.

Example (``trials=0``: the communication least squares alone, a fraction of a second)::

    >>> hw = fit_a100(trials=0)
    >>> round(hw.bus_bw / 1e9, 1), round(hw.latency * 1e6, 1)
    (222.4, 69.9)
"""

from __future__ import annotations

import dataclasses
import math
import random

from boost.planning.comm_volume import per_layer
from boost.planning.perf_model.hardware import A100, Hardware
from boost.planning.perf_model.reference_table import PAPER_COMM_7B, paper_table
from boost.planning.perf_model.step_time import model_args


def fit_a100(trials: int = 3000, seed: int = 0) -> Hardware:
    """Refit A100's efficiencies to PAPER_STEP_TIMES: random search minimising the worst |log error|.

    ``bus_bw`` and ``latency`` come from PAPER_COMM_7B by least squares (two unknowns, three cells).
    Takes a few seconds; deterministic by ``seed``.
    """
    # comm row: ms = count·L + 1.5·bytes/bw, linear in (L, 1/bw)
    rows = []
    for scheme, (_, ms) in PAPER_COMM_7B.items():
        args = model_args("7B", scheme)
        vol = per_layer(args, scheme, 4 * 4096)["forward"]
        count = sum(c for c, _ in vol.values())
        rows.append((count, 1.5 * sum(e for _, e in vol.values()) * 2, ms * 1e-3))
    sxx = sum(a * a for a, _, _ in rows)
    sxy = sum(a * b for a, b, _ in rows)
    syy = sum(b * b for _, b, _ in rows)
    sx = sum(a * y for a, _, y in rows)
    sy = sum(b * y for _, b, y in rows)
    det = sxx * syy - sxy * sxy
    latency, inv_bw = (sx * syy - sy * sxy) / det, (sxx * sy - sxy * sx) / det
    base = dataclasses.replace(A100, latency=latency, bus_bw=1 / inv_bw)

    def worst(hw):  # minimax: the worst cell's |log(predicted / reported)|
        return max(
            abs(math.log(r["predicted"] / r["reported"]))
            for r in paper_table(hw)
            if "comm" not in r["scheme"]
        )

    # log-uniform random starts, then Gaussian steps in log space around the best: deterministic by seed
    keys = {
        "eta_gemm": (0.3, 0.95),
        "ai_half": (1.0, 1000.0),
        "eta_attn": (0.1, 0.9),
        "eta_mem": (0.1, 0.95),
        "t_kernel": (1e-7, 200e-6),
        "t_layer": (1e-7, 5e-3),
    }
    rng = random.Random(seed)
    best, best_err = base, worst(base)
    for i in range(trials):
        if i < trials // 2:
            cand = {k: math.exp(rng.uniform(math.log(lo), math.log(hi))) for k, (lo, hi) in keys.items()}
        else:
            cand = {
                k: min(hi, max(lo, getattr(best, k) * math.exp(rng.gauss(0, 0.1))))
                for k, (lo, hi) in keys.items()
            }
        hw = dataclasses.replace(base, **cand)
        err = worst(hw)
        if err < best_err:
            best, best_err = hw, err
    return best

"""A dense projection as two low-rank factors, and the factors multiplied back out.

Each projection ``W ≈ U_r S_r V_rᵀ`` (truncated SVD in float64) becomes ``A = √S_r V_rᵀ`` (``down``,
``[r, d_in]``) and ``B = U_r √S_r`` (``up``, ``[d_out, r]``). The relative Frobenius error
``‖W − BA‖ / ‖W‖`` of every layer and projection is logged and returned. The ``svd`` kind computes
``B·A·x`` and keeps SwiGLU, so it reproduces the dense model wherever the weights have rank ≤ r. The
``cola`` and ``lax`` kinds put σ between A and B and drop the gate's SiLU (``lax`` also crosses the
previous block's latent, its norms and gates starting as a new LaX model's: ``initial_crossings``): their
import is an approximation and a starting point for training, not the same function.

State dicts here use per-projection names (``layers.{i}.attention.wq.weight``, or its
``.down.weight`` / ``.up.0.weight`` factors): ``boost.training.model.grouped_state`` maps them to a grouped model.
"""

from __future__ import annotations

import torch

from boost.after_training.hf_folder import PROJECTIONS
from boost.training.model.args import ModelArgs
from boost.training.model.latent_crossing import LatentCrossing
from boost.training.rules import KINDS

# {layer: {"wq": ‖W − BA‖/‖W‖, ..., "w2": ...}}
Report = dict[int, dict[str, float]]


def factorize(w: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(A [rank, d_in], B [d_out, rank], ‖W − BA‖_F / ‖W‖_F)`` from a truncated SVD in float64.

    A rank above ``min(d_out, d_in)`` pads A and B with zeros (BA is then W itself).
    """
    u, s, vh = torch.linalg.svd(w.double(), full_matrices=False)
    k = min(rank, s.numel())
    root = s[:k].sqrt()
    a = w.new_zeros((rank, w.shape[1]), dtype=torch.float64)
    b = w.new_zeros((w.shape[0], rank), dtype=torch.float64)
    a[:k] = root[:, None] * vh[:k]
    b[:, :k] = u[:, :k] * root
    total = s.square().sum()
    err = (s[k:].square().sum() / total).sqrt().item() if total > 0 else 0.0
    return a, b, err


def factorize_projections(
    dense: dict[str, torch.Tensor], args: ModelArgs
) -> tuple[dict[str, torch.Tensor], Report]:
    """``dense`` with every projection replaced by its rank-``args.rank`` factors, and their errors."""
    projection_weights = tuple(f"{p}.weight" for p in PROJECTIONS)
    sd = {k: v for k, v in dense.items() if not k.endswith(projection_weights)}
    report: Report = {}
    for i in range(args.n_layers):
        report[i] = {}
        for name in PROJECTIONS:
            a, b, err = factorize(dense[f"layers.{i}.{name}.weight"], args.rank)
            sd[f"layers.{i}.{name}.down.weight"], sd[f"layers.{i}.{name}.up.0.weight"] = a, b
            report[i][name.split(".")[1]] = err
    return sd, report


# per-projection module -> the member name its seeded init is keyed by (``boost.training.model.model``)
MEMBERS = {
    "attention.wq": "attention.q",
    "attention.wk": "attention.k",
    "attention.wv": "attention.v",
    "attention.wo": "attention.o",
    "feed_forward.w1": "feed_forward.gate",
    "feed_forward.w3": "feed_forward.up",
    "feed_forward.w2": "feed_forward.down",
}


def initial_crossings(args: ModelArgs, seed: int) -> dict[str, torch.Tensor]:
    """LaX's norms and gates (blocks ≥ 1) as a new LaX model of ``args`` starts them under ``seed`` (the
    seeded init: norm at one and zero, the gate the authors' Kaiming draw): what a dense model imported as
    LaX has for them, its factors standing in for A and B. Per-projection names; empty for other kinds."""
    if not KINDS[args.linear].latent_crossing:
        return {}
    out = {}
    for i in range(1, args.n_layers):
        for fqn, member in MEMBERS.items():
            crossing = LatentCrossing(1, args.rank, args.lax_gate)
            crossing.reset_parameters(seed, [f"layers.{i}.{member}"])
            out.update({f"layers.{i}.{fqn}.latent.{k}": v for k, v in crossing.state_dict().items()})
    return out


def multiply_factors(sd: dict[str, torch.Tensor], args: ModelArgs) -> dict[str, torch.Tensor]:
    """``sd`` with every projection's factors replaced by ``W = B·A`` (multiplied in float64)."""
    sd = dict(sd)
    for i in range(args.n_layers):
        for name in PROJECTIONS:
            a = sd.pop(f"layers.{i}.{name}.down.weight")
            b = sd.pop(f"layers.{i}.{name}.up.0.weight")
            sd[f"layers.{i}.{name}.weight"] = (b.double() @ a.double()).to(a.dtype)
    return sd


def format_report(report: Report) -> str:
    """The per-layer, per-projection relative errors as a text table."""
    if not report:
        return "(no projection was factored)"
    names = list(next(iter(report.values())))
    lines = ["layer " + " ".join(f"{n:>8}" for n in names)]
    lines += [f"{i:>5} " + " ".join(f"{row[n]:8.4f}" for n in names) for i, row in report.items()]
    mean = sum(sum(row.values()) for row in report.values()) / (len(report) * len(names))
    lines.append(f"mean {mean:.4f}")
    return "\n".join(lines)

"""The linear kinds (what a projection is: dense, SVD-style, CoLA, LaX), LaX's gate choices, the bottleneck
rank and its checks (LORO's among them: they ask what a kind's factors are), and the models' name.

Example::

    >>> KINDS["lax"].latent_crossing, KINDS["cola"].latent_activation, KINDS["full"].tp_scheme
    (True, True, 'megatron')
    >>> resolve_rank(dim=4096, rank=0, rank_ratio=0.25)
    1024
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LinearKind:
    """What a projection kind is, as every part of BOOST needs to know it."""

    name: str
    low_rank: bool
    """``W ≈ B·A`` with a rank-r bottleneck, instead of one dense ``W``."""
    latent_activation: bool
    """σ on the r-wide latent (CoLA's ``B·σ(A·x)``); the MLP then drops SwiGLU's full-width SiLU."""
    latent_crossing: bool
    """LaX: each block's latents cross into the next block's, a carry from block to block
    (``boost.training.model.latent_crossing``: gated, layer-normalised, before σ)."""
    tp_scheme: str
    """The tensor-parallel scheme its configs use: BTP for low-rank kinds, Megatron for the dense baseline."""

    @property
    def factors_form_weight(self) -> bool:
        """``B·A`` is the layer's weight: low rank with nothing between the factors (no σ, no LaX carry),
        so the factors are a point ``W = B·A`` on the rank-r manifold, the point LORO's optimizer moves."""
        return self.low_rank and not self.latent_activation and not self.latent_crossing


KINDS: dict[str, LinearKind] = {
    kind.name: kind
    for kind in (
        LinearKind(
            "full", low_rank=False, latent_activation=False, latent_crossing=False, tp_scheme="megatron"
        ),
        LinearKind("svd", low_rank=True, latent_activation=False, latent_crossing=False, tp_scheme="btp"),
        LinearKind("cola", low_rank=True, latent_activation=True, latent_crossing=False, tp_scheme="btp"),
        LinearKind("lax", low_rank=True, latent_activation=True, latent_crossing=True, tp_scheme="btp"),
    )
}

LINEAR_KINDS = tuple(KINDS)

DENSE_KIND = next(kind.name for kind in KINDS.values() if not kind.low_rank)


def linear_kind(name: str) -> LinearKind:
    """The kind called ``name``; ``ValueError`` naming the choices otherwise."""
    if name not in KINDS:
        raise ValueError(f"boost.linear = {name!r} is unknown; choose one of {LINEAR_KINDS}")
    return KINDS[name]


DEFAULT_RANK_RATIO = 0.25  # the reference paper's r = d/4


def resolve_rank(dim: int, rank: int, rank_ratio: float) -> int:
    """The bottleneck rank: ``rank`` when set (> 0), else ``rank_ratio · dim`` rounded, at least 1."""
    return rank if rank else max(1, round(rank_ratio * dim))


def rank_problem(rank: int, dim: int, kv_dim: int, ffn_dim: int) -> str | None:
    """The rank factors every projection (q/o over ``dim``, k/v to ``kv_dim``, the MLP's to and from
    ``ffn_dim``), so it is positive and below the smallest dim it factors."""
    smallest = min(dim, kv_dim, ffn_dim)
    return (
        None
        if 0 < rank < smallest
        else f"must be below the smallest dim it factors ({smallest}) and positive"
    )


LAX_GATES = ("tensorized", "linear", "none")
"""LaX's gate on the carried latent (``boost.lax_gate``): tensorized (a Kronecker pair of small square
factors over r = a·b, the LaX authors' default), linear (r×r with a bias), none (the carry as it is)."""


def most_balanced_factor_pair(n: int) -> tuple[int, int]:
    """``(a, b)`` with ``a·b = n``, ``a ≤ b`` and ``b - a`` least: the tensorized LaX gate's factors over the
    rank (the LaX authors' ``most_balanced_factor_pair``).

    Example::

        >>> most_balanced_factor_pair(256), most_balanced_factor_pair(128), most_balanced_factor_pair(1024)
        ((16, 16), (8, 16), (32, 32))
    """
    if n < 1:
        raise ValueError(f"most_balanced_factor_pair: {n} is not a positive integer")
    a = math.isqrt(n)
    while n % a:
        a -= 1
    return a, n // a


def lax_gate(name: str) -> str:
    """``name`` if it is one of ``LAX_GATES``; ``ValueError`` naming the choices otherwise."""
    if name not in LAX_GATES:
        raise ValueError(f"boost.lax_gate = {name!r} is unknown; choose one of {LAX_GATES}")
    return name


LAX_GATE_FORMS = ("factored", "kron")
"""How the tensorized gate is computed (``boost.lax_gate_form``), one function either way: factored (its two
small contractions, ``r·(a + b)`` multiply-adds a token, as the LaX authors compute it) or kron (one
``[r, r]`` GEMM by ``kron(D, E)``, ``r²`` a token). On an H100 the factored form's contractions, K = a and
b, ran as small-tile GEMMs that took 50 ms of the 1B LaX step's 294 (``bench/results/gpu.md``)."""


def lax_gate_form_problem(gate: str, form: str) -> str | None:
    """Why ``boost.lax_gate_form = form`` cannot compute ``boost.lax_gate = gate``, or None.

    Example::

        >>> lax_gate_form_problem("linear", "kron")
        'kron computes the tensorized gate, not boost.lax_gate = "linear": use "factored"'
    """
    if form not in LAX_GATE_FORMS:
        return f"choose one of {LAX_GATE_FORMS}"
    if form == "kron" and gate != "tensorized":
        return f'kron computes the tensorized gate, not boost.lax_gate = "{gate}": use "factored"'
    return None


def lax_gate_form(gate: str, form: str) -> str:
    """``form`` if it computes ``boost.lax_gate = gate``; ``ValueError`` naming the field and the fix otherwise."""
    if (problem := lax_gate_form_problem(gate, form)) is not None:
        raise ValueError(f"boost.lax_gate_form = {form!r}: {problem}")
    return form


def loro_kind_problem(linear: str) -> str | None:
    """LORO (``optimizer.name = "LORO"``) moves ``W = B·A`` on the rank-r manifold: the kind's factors must
    form its weight (``LinearKind.factors_form_weight``)."""
    kind = KINDS[linear]
    if kind.factors_form_weight:
        return None
    svd = next(k.name for k in KINDS.values() if k.factors_form_weight)
    if not kind.low_rank:
        return f'LORO moves low-rank factors and the dense model has none: use boost.linear = "{svd}"'
    between = "σ and the LaX carry" if kind.latent_crossing else "σ"
    return (
        f"LORO moves W = B·A on the rank-r manifold, and under boost.linear = {linear!r} {between} between the "
        f'factors make B·A not the layer\'s weight: use boost.linear = "{svd}" (or optimizer.name = "AdamW")'
    )


def loro_rank_problem(rank: int, smallest_dim: int) -> str | None:
    """LORO's exact step adds up to r new directions to each factor's r columns (the tangent step leaves
    the column space), so every factor needs at least 2r rows: ``2·rank ≤`` the smallest factored dim."""
    if 2 * rank <= smallest_dim:
        return None
    return (
        f"LORO's exact step needs 2·rank ≤ the smallest factored dim ({smallest_dim}): "
        f"use a rank of at most {smallest_dim // 2}"
    )


MODEL_NAME = "boost_llama"
"""The name BOOST's models go by: torchtitan's train spec (``model.name``) and the Hugging Face ``model_type``."""

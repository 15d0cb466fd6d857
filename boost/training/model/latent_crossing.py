"""LaX's latent crossing, as its authors' code computes it (Zhang et al., NeurIPS 2025, arXiv 2505.21732).

The published module is ``TensorizedLinear`` (github K1seki221/Latent_Crossing at c892d2c,
``vits_pretraining/timm/models/lax_vit.py``) with two cores, A = ``cores[0]`` and B = ``cores[1]``, and its
switches ``InterRes``, ``InterResGate``, ``TenserizedGate`` and ``LatentAct`` on (their CoLA+LaX config).
Per projection (q, k, v, o, gate, up, down) of block l ≥ 1, with ``h_{l-1}`` the same projection's
latent in block l - 1::

    pre_l = A_l · x_l                              the down-projection, r wide
    h_l   = σ(LN_l(pre_l + G_l(h_{l-1})))          LayerNorm over r (eps 1e-6, affine), G the gate
    y_l   = B_l · h_l                              and h_l is carried on to block l + 1

and block 0 computes ``h_0 = σ(pre_0)``: no norm, no gate, nothing to cross. The carry is the crossed
latent, so it accumulates over depth. The gates (``boost.training.rules.LAX_GATES``):

- ``tensorized`` (the authors' default): r = a·b with a ≤ b the most balanced factor pair of r; the carry
  read as an a×b matrix R gives ``Dᵀ · R · E``, E ``[b, b]`` (the authors' encoder) and D ``[a, a]``
  (their decoder), both Kaiming-uniform;
  ``boost.lax_gate_form`` chooses how it is computed, one function either way: ``factored``, the two
  small contractions as the authors write them (``r·(a + b)`` multiply-adds a token), or ``kron``, one
  ``[r, r]`` GEMM a member by ``kron(D, E)`` (``r²`` a token, in a GEMM's efficient shape: on an H100 the
  factored contractions, K = a and b, ran as small-tile GEMMs far below the memory roofline);
- ``linear``: ``W·h + c``, W ``[r, r]`` and c as ``nn.Linear(r, r)`` initialises them;
- ``none``: the carry itself.

A ``LatentCrossing`` serves all the members of one BOOST bottleneck at once (``[Σr]`` = ``G`` members
of rank ``r``, grouped q/k/v or gate/up): each member has its own norm and gate, stored along a leading
``G`` dim, so grouped and per-projection models compute the same function. Where BOOST differs from the
authors' module: no biases on A and B (BOOST's LLaMA has none), A and B keep BOOST's (CoLA's) seeded
initialisation, and the gate and norm draw theirs from BOOST's seeded, layout-independent init
(``boost.training.model.seeded_init``) rather than the global generator. And the latent leaves in the
pre-activation's dtype: under autocast (the trainer without FSDP: float32 parameters, bf16 compute) the
LayerNorm computes in float32, as autocast asks, but its result is rounded to bf16 before σ, as
torchtitan's RMSNorm hands back its input's dtype. Left in float32, σ, the carry handed to the next block
and the tensors saved for backward were float32 too: twice the bytes of every pass over the latent
(``bench.compiled_cost``: the 1B trainer's LaX block modeled at 1.50× a CoLA block's device time, 1.38×
with the rounding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from boost.training.model.seeded_init import SeededPart, fill_seeded
from boost.training.rules import lax_gate, lax_gate_form, most_balanced_factor_pair

LAX_NORM_EPS = 1e-6  # the authors' LayerNorm(r, eps=1e-6)


class LatentActivation(nn.Module):
    """The latent of a bottleneck that crosses nothing: ``σ(pre)`` (CoLA, LaX's block 0) or ``pre`` (svd)."""

    def __init__(self, activation: str):
        super().__init__()
        self.act = nn.SiLU() if activation == "silu" else nn.Identity()

    def forward(self, pre: torch.Tensor, carry: torch.Tensor | None = None) -> torch.Tensor:
        return self.act(pre)


class LatentCrossing(nn.Module):
    """``h = σ(LN(pre + G(carry)))`` for ``members`` bottleneck members of rank ``rank`` side by side.

    Args:
        members: how many projections share the bottleneck (3 for grouped q/k/v, 1 ungrouped).
        rank: each member's r.
        gate: one of ``boost.training.rules.LAX_GATES``.
        form: how the tensorized gate is computed, ``boost.training.rules.LAX_GATE_FORMS``.

    Example::

        >>> cross = LatentCrossing(members=2, rank=8, gate="tensorized")
        >>> cross.reset_parameters(seed=0, keys=["layers.1.feed_forward.gate", "layers.1.feed_forward.up"])
        >>> cross(torch.randn(4, 16), torch.randn(4, 16)).shape
        torch.Size([4, 16])
    """

    def __init__(self, members: int, rank: int, gate: str = "tensorized", form: str = "factored"):
        super().__init__()
        self.members, self.rank, self.gate = members, rank, lax_gate(gate)
        self.form = lax_gate_form(gate, form)
        self.act = nn.SiLU()
        self.norm_weight = nn.Parameter(torch.empty(members, rank))
        self.norm_bias = nn.Parameter(torch.empty(members, rank))
        self.factors = most_balanced_factor_pair(rank)
        a, b = self.factors
        if gate == "tensorized":
            self.gate_encoder = nn.Parameter(torch.empty(members, b, b))
            self.gate_decoder = nn.Parameter(torch.empty(members, a, a))
        elif gate == "linear":
            self.gate_weight = nn.Parameter(torch.empty(members, rank, rank))
            self.gate_bias = nn.Parameter(torch.empty(members, rank))

    def crossing_parameters(self) -> dict[str, torch.Tensor]:
        """The norm's and the gate's parameters by name: what ``crossed`` reads (a plan may hand it other
        views of them). Read as attributes, which SimpleFSDP's parametrization gathers on access."""
        return {name: getattr(self, name) for name in self._parameters}

    def gated(self, carry: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """``G(carry)`` per member: ``[..., members, rank]`` in and out."""
        if self.form == "kron":  # the tensorized gate's (lax_gate_form refuses it with another)
            # kron(D_g, E_g)[(c, d), (f, e)] = D_g[c, f]·E_g[d, e]: the contraction below as one [r, r]
            # matrix a member. Each member's GEMM reads its columns of the carry in place (row stride G·r).
            w = torch.einsum("gcf,gde->gcdfe", params["gate_decoder"], params["gate_encoder"])
            w = w.reshape(self.members, self.rank, self.rank)
            return torch.stack([carry[..., g, :] @ w[g] for g in range(self.members)], dim=-2)
        if self.gate == "tensorized":
            a, b = self.factors
            # the authors' contract('abcd,de,cf->abfe', R, E, D) with R the a×b carry, per member g
            out = torch.einsum(
                "...gcd,gde,gcf->...gfe",
                carry.unflatten(-1, (a, b)),
                params["gate_encoder"],
                params["gate_decoder"],
            )
            return out.flatten(-2)
        if self.gate == "linear":
            return torch.einsum("...gi,goi->...go", carry, params["gate_weight"]) + params["gate_bias"]
        return carry

    def crossed(
        self, pre: torch.Tensor, carry: torch.Tensor | None, params: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``σ(LN(pre + G(carry)))`` with the norm and gate read from ``params`` (``crossing_parameters``)."""
        if carry is None:
            raise ValueError(
                "LaX: a crossing bottleneck needs the previous block's latent of the same projection (block 0 "
                "crosses nothing: it is built with a LatentActivation)"
            )
        shape = (self.members, self.rank)
        t = pre.unflatten(-1, shape) + self.gated(carry.unflatten(-1, shape), params)
        normed = F.layer_norm(t, (self.rank,), eps=LAX_NORM_EPS) * params["norm_weight"] + params["norm_bias"]
        return self.act(normed.flatten(-2).to(pre.dtype))  # the latent in the pre-activation's dtype

    def forward(self, pre: torch.Tensor, carry: torch.Tensor | None = None) -> torch.Tensor:
        return self.crossed(pre, carry, self.crossing_parameters())

    @torch.no_grad()
    def reset_parameters(self, seed: int, keys: list[str]) -> None:
        """The authors' initialisation through BOOST's seeded init: the norm at ones and zeros, the
        gate's factors Kaiming-uniform (``nn.init.kaiming_uniform_``: std √(2/fan_in)), the linear gate
        as ``nn.Linear`` (weight and bias of std 1/√(3r)); ``keys`` name the members (e.g.
        ``layers.3.attention.q``), so each member draws the same values grouped or not."""
        if len(keys) != self.members:
            raise ValueError(f"LatentCrossing: {len(keys)} member names for {self.members} members")
        self.norm_weight.fill_(1.0)
        self.norm_bias.zero_()
        a, b = self.factors
        r = self.rank
        if self.gate == "tensorized":
            fill_seeded(
                self.gate_encoder,
                [SeededPart(f"{k}.lax.gate_encoder", (b, b), (2 / b) ** 0.5, True) for k in keys],
                seed,
            )
            fill_seeded(
                self.gate_decoder,
                [SeededPart(f"{k}.lax.gate_decoder", (a, a), (2 / a) ** 0.5, True) for k in keys],
                seed,
            )
        elif self.gate == "linear":
            std = (3 * r) ** -0.5
            fill_seeded(
                self.gate_weight, [SeededPart(f"{k}.lax.gate_weight", (r, r), std, True) for k in keys], seed
            )
            fill_seeded(
                self.gate_bias, [SeededPart(f"{k}.lax.gate_bias", (r,), std, True) for k in keys], seed
            )

    def extra_repr(self) -> str:
        return f"members={self.members}, rank={self.rank}, gate={self.gate!r}, form={self.form!r}"

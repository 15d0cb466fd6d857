"""The projection factory: dense ``nn.Linear`` or a low-rank ``Bottleneck`` (svd / cola / lax).

A ``Bottleneck`` computes, for ``G`` member projections that read the same input,

    pre = A · norm(x)             A: [Σ r_g, d_in]   one GEMM for all members
    h   = latent(pre, carry)      σ(pre) (cola), pre (svd), or LaX's σ(LN(pre + G(carry))) per member
    y_g = B_g · h_g               B: one batched GEMM per group of equally shaped members

and a LaX bottleneck also returns ``h``, the next block's carry (``boost.training.model.latent_crossing``).
The module knows nothing of parallelism: tensor-parallel plans (``boost.training.parallel``) attach to its
named parts — ``norm``, ``down``, ``latent``, ``up_input`` (the latent as the up-projections read it, apart
from the carry), ``up`` — from outside.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from boost.training.model.latent_crossing import LatentActivation, LatentCrossing
from boost.training.model.seeded_init import SeededPart, fill_seeded
from boost.training.rules import KINDS


class RMSNorm(nn.Module):
    """RMSNorm over the last dim. A plain module so that plans can re-implement it when it is sharded."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


class _BatchedUpGEMM(torch.autograd.Function):
    """``y = u · Bᵀ`` per member, whose weight gradient comes out in the weight's own layout.

    Autograd's ``bmm`` backward computes the gradient of ``Bᵀ`` (``uᵀ · dy``, ``[G, r, d_out]``) and
    hands ``B`` its transpose: a ``[G, d_out, r]`` view with the wrong strides, which ``AccumulateGrad``
    then copies into a fresh tensor laid out like ``B`` (a copy, and on a host a few dispatches, per
    batched weight and step). ``dyᵀ · u`` is the same product, already ``[G, d_out, r]``.
    """

    @staticmethod
    def forward(ctx, u: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(u, weight)
        return torch.bmm(u, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        u, weight = ctx.saved_tensors
        du = torch.bmm(dy, weight) if ctx.needs_input_grad[0] else None
        dw = torch.bmm(dy.transpose(1, 2), u) if ctx.needs_input_grad[1] else None
        return du, dw


class BatchedUp(nn.Module):
    """``G`` up-projections of equal shape as one batched GEMM: weight ``[G, d_out, r]``."""

    def __init__(self, groups: int, rank: int, d_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(groups, d_out, rank))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.project(u, self.weight)

    def project(self, u: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``u · weightᵀ`` per member (``weight``: this module's, or a view a plan hands in, e.g. its local shard)."""
        # u: (G, ..., r) -> (G, ..., d_out). Members first: each member's output is a contiguous
        # slice of one bmm, and unbinding it costs nothing in backward (selecting members out of
        # a (..., G, d_out) result would zero-fill a full-size gradient per member).
        g, r = u.shape[0], u.shape[-1]
        if torch.is_autocast_enabled(u.device.type):
            # Autocast casts inside the forward of a custom Function but never enters its backward, which
            # would meet the float32 weight it saved with a bfloat16 gradient. Cast here, in autograd's
            # view: the Function sees one dtype both ways, and autograd casts the weight's gradient back.
            dtype = torch.get_autocast_dtype(u.device.type)
            u, weight = u.to(dtype), weight.to(dtype)
        y = _BatchedUpGEMM.apply(u.reshape(g, -1, r), weight)  # (G, tokens, d_out)
        return y.view(*u.shape[:-1], y.shape[-1])


class Bottleneck(nn.Module):
    """Low-rank projection(s) ``x -> B σ(A x)`` sharing one down-projection GEMM.

    Args:
        d_in: input width.
        members: ``(name, rank, d_out)`` per projection, e.g. ``[("q", 64, 256), ("k", 64, 128), ...]``.
        activation: ``"silu"`` (cola, lax) or ``"identity"`` (svd).
        norm: an ``RMSNorm`` applied to the input first (the pre-norm belongs to its only reader
            when the q/k/v or gate/up down-projections are grouped), or ``None``.
        lax_gate: LaX's gate (``boost.training.rules.LAX_GATES``) where this bottleneck crosses the previous
            block's latent (LaX, blocks ≥ 1); ``None`` where it crosses nothing.
        lax_gate_form: how the gate is computed (``boost.training.rules.LAX_GATE_FORMS``).
        returns_latent: also return the latent ``h`` (LaX hands it to the next block's bottleneck).

    Example::

        >>> m = Bottleneck(16, [("q", 4, 16), ("k", 4, 8), ("v", 4, 8)], "silu")
        >>> [tuple(y.shape) for y in m(torch.randn(2, 3, 16))]
        [(2, 3, 16), (2, 3, 8), (2, 3, 8)]
    """

    def __init__(
        self,
        d_in: int,
        members: Sequence[tuple[str, int, int]],
        activation: str = "silu",
        norm: RMSNorm | None = None,
        lax_gate: str | None = None,
        returns_latent: bool = False,
        lax_gate_form: str = "factored",
    ):
        super().__init__()
        self.members = [(str(n), int(r), int(o)) for n, r, o in members]
        self.d_in = d_in
        self.returns_latent = returns_latent
        self.norm = norm
        self.down = nn.Linear(d_in, sum(r for _, r, _ in self.members), bias=False)
        if lax_gate is None:
            self.latent: nn.Module = LatentActivation(activation)
        else:
            if activation != "silu" or len({r for _, r, _ in self.members}) != 1:
                raise ValueError(
                    "LaX crosses σ-latents of one rank per bottleneck (silu, equal member ranks)"
                )
            self.latent = LatentCrossing(len(self.members), self.members[0][1], lax_gate, lax_gate_form)
        # The latent as the up-projections read it: a plan's hook point on that branch alone (BTP sums B's
        # partial input-gradient here), apart from the carry, whose gradient arrives whole from the next block.
        self.up_input = nn.Identity()
        # Members with equal (rank, d_out) share one batched GEMM; with GQA, q stands apart from k/v.
        self.up_groups: list[list[int]] = []
        for i, (_, r, o) in enumerate(self.members):
            for group in self.up_groups:
                if self.members[group[0]][1:] == (r, o):
                    group.append(i)
                    break
            else:
                self.up_groups.append([i])
        self.up = nn.ModuleList(
            nn.Linear(self.members[g[0]][1], self.members[g[0]][2], bias=False)
            if len(g) == 1
            else BatchedUp(len(g), self.members[g[0]][1], self.members[g[0]][2])
            for g in self.up_groups
        )

    @property
    def ranks(self) -> list[int]:
        return [r for _, r, _ in self.members]

    def forward(self, x: torch.Tensor, carry: torch.Tensor | None = None):
        h = self.latent(self.down(self.norm(x) if self.norm is not None else x), carry)  # (bs, seqlen, Σr)
        u = self.up_input(h)
        # One member reads the whole latent (whose width a plan may have sharded).
        latents = u.split(self.ranks, dim=-1) if len(self.members) > 1 else (u,)
        outs: list[torch.Tensor | None] = [None] * len(self.members)
        for unit, group in zip(self.up, self.up_groups):
            if isinstance(unit, BatchedUp):
                y = unit(self._batched_latents(u, latents, group))  # (G, bs, seqlen, d_out)
                for i, y_i in zip(group, y.unbind(0)):
                    outs[i] = y_i
            else:
                outs[group[0]] = unit(latents[group[0]])
        y = outs[0] if len(outs) == 1 else tuple(outs)
        return (y, h) if self.returns_latent else y

    def _batched_latents(
        self, u: torch.Tensor, latents: Sequence[torch.Tensor], group: list[int]
    ) -> torch.Tensor:
        """The latents of one batched group as ``(G, ..., r)``. Adjacent members (gate and up; k and v) are
        read in place, as a strided view of ``u``: a stack would copy them in the forward and its backward
        would concatenate their gradients again. Others are stacked."""
        if group != list(range(group[0], group[0] + len(group))):
            return torch.stack([latents[i] for i in group])
        start, r = sum(self.ranks[: group[0]]), self.ranks[group[0]]
        return u[..., start : start + len(group) * r].unflatten(-1, (len(group), r)).movedim(-2, 0)


def make_projection(
    args, d_in: int, d_out: int, name: str, norm: RMSNorm | None = None, crossing: bool = False
) -> nn.Module:
    """One of the seven block projections, as the config's ``linear`` kind asks; ``crossing``: it crosses the
    previous block's latent (LaX, blocks ≥ 1)."""
    if not args.low_rank:
        return nn.Linear(d_in, d_out, bias=False)
    return make_grouped(args, d_in, [(name, d_out)], norm, crossing)


def make_grouped(
    args, d_in: int, outs: Sequence[tuple[str, int]], norm: RMSNorm | None = None, crossing: bool = False
) -> Bottleneck:
    kind = KINDS[args.linear]
    return Bottleneck(
        d_in,
        [(n, args.rank, o) for n, o in outs],
        "silu" if kind.latent_activation else "identity",
        norm=norm,
        lax_gate=args.lax_gate if kind.latent_crossing and crossing else None,
        returns_latent=kind.latent_crossing,
        lax_gate_form=args.lax_gate_form,
    )


def cola_std(d_in: int, d_out: int, rank: int) -> float:
    # CoLA's init: std = r^-1/4 · (d_in + d_out)^-1/4 for both factors, so B·A starts with
    # the variance of a dense layer initialised at (d_in + d_out)^-1/2.
    return rank**-0.25 * (d_in + d_out) ** -0.25


def init_projection(module: nn.Module, prefix: str, name: str, seed: int, dense_std: float = 0.02) -> None:
    """Fill a projection's weights (this rank's shard of them), seeded by ``prefix + name`` (dense) or
    ``prefix + member`` (low-rank): the same model for every layout, grouped or not (``seeded_init``)."""
    if isinstance(module, nn.Linear):
        fill_seeded(module.weight, SeededPart(prefix + name, tuple(module.weight.shape), dense_std), seed)
        return
    assert isinstance(module, Bottleneck)
    a_parts, b_parts = [], {}
    for name, r, d_out in module.members:
        std = cola_std(module.d_in, d_out, r)
        a_parts.append(SeededPart(f"{prefix}{name}.A", (r, module.d_in), std))
        b_parts[name] = SeededPart(f"{prefix}{name}.B", (d_out, r), std)
    fill_seeded(module.down.weight, a_parts, seed)  # [A_q; A_k; A_v] along dim 0
    for unit, group in zip(module.up, module.up_groups):
        fill_seeded(unit.weight, [b_parts[module.members[i][0]] for i in group], seed)  # stacked if batched
    if isinstance(module.latent, LatentCrossing):
        module.latent.reset_parameters(seed, [f"{prefix}{name}" for name, _, _ in module.members])
    if module.norm is not None:
        module.norm.reset_parameters()

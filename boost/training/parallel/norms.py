"""RMSNorm over a hidden dim that is sharded across tensor-parallel ranks.

Three ways, all custom autograd Functions on local shards (``F.rms_norm`` on a ``Shard(-1)``
DTensor is rejected by DTensor):

``OnlineRMSNormDown`` — norm fused into the following row-parallel down-projection::

    x_i   [T, d/t]   this rank's slice of the residual stream
    γ_i   [d/t]      its slice of the norm weight
    A_i   [R, d/t]   down-projection, sharded on its input dim
    s_i   Σ x_i²  (fp32)                                        c_i = sqrt(s_i/(d/t) + ε)
    fwd   [H | M] = all_reduce([ ((γ_i·x_i)/c_i) A_iᵀ · c_i , s_i/d ])   one collective, R+1 columns
          Y = H / sqrt(M + ε)                                   = A (γ·x) / RMS(x), exactly
          (the GEMM in the activation dtype on the well-scaled input; the statistic accumulated in
          fp32, sent as the mean square M in the activation dtype beside H: one dtype per collective,
          as NCCL requires; M keeps the latent's precision, and Y = H/√M takes half M's relative
          error; fp16 sends fp32, as its range holds M only up to an RMS of 256)
    bwd   no collective: dY is already full (B's input-grad all-reduce made it so), and
          Σ_R dY·Y, the only reduction the chain rule needs, is over the replicated r-dim.

    With the latent sharded on its tokens (``rows``) the forward all-reduce is a reduce-scatter: each
    rank normalises its ``T/t`` rows, and the backward, whose dY then covers those rows only, gathers
    ``[dH | d·dS]`` (R+1 columns, the activation dtype; dS scaled by d into the latent's range) before
    the GEMMs: the same R+1 columns each way as the all-reduce, in its two halves.

``SyncRMSNorm`` — the statistic in its own all-reduce (forward) and Σ dy·γ·x in another (backward).
``shard_rms_norm`` — each shard normalised by its own statistic (``norm = "local"``): no collective,
NOT the dense model.
"""

from __future__ import annotations

import torch
from torch import nn

from boost.training.model.linears import RMSNorm
from boost.training.parallel.collectives import (
    TPGroup,
    all_gather_rows,
    all_reduce_partial,
    all_reduce_sum,
    reduce_scatter_rows,
)
from boost.training.parallel.latent_replay import replayed_or_recorded


def _stat_dtype(dtype: torch.dtype) -> torch.dtype:
    # The sum of squares stays in fp32 (or wider) whatever the activation dtype.
    return torch.promote_types(dtype, torch.float32)


def _wire_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype ``[H | M]`` travels in: the activation dtype, except fp16, whose range (65504) would hold the
    mean square only up to an RMS of 256 (the whole row then normalised to zeros); fp16 sends fp32."""
    return torch.float32 if dtype == torch.float16 else dtype


def sharded_norm_problem(norm: nn.Module) -> str | None:
    """Why ``norm`` cannot run as a norm over a sharded dim, or ``None``. The styles run RMSNorm's maths (no
    mean, no bias) on the module's ``weight``, sharded with the dim: any other norm would silently compute
    something else, and a norm without a weight leaves nothing to shard."""
    if not isinstance(norm, (nn.RMSNorm, RMSNorm)):
        return (
            f"{type(norm).__name__} is not an RMSNorm (nn.RMSNorm or boost's): the style runs RMSNorm's maths"
        )
    if getattr(norm, "weight", None) is None or norm.weight.dim() != 1:
        return "an RMSNorm without a 1-D weight (elementwise_affine=False, or over several dims): give it one"
    return None


def norm_eps(norm: nn.Module, dtype: torch.dtype) -> float:
    """The module's ε, or, where it is ``None`` (``nn.RMSNorm``'s default), ``F.rms_norm``'s: the dtype's eps."""
    return torch.finfo(dtype).eps if norm.eps is None else norm.eps


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)``, with no op at all where ``t`` is ``dtype`` already (eager's ``.to`` returns ``t``
    itself then). torch 2.11's torch.compile traces such a no-op ``.to`` inside an autograd Function's
    forward into a backward that returns zero gradients (fp32 BTP blocks trained with their online
    norms' γ and A frozen); torch 2.13 does not (tests/multiprocess/test_compile.py)."""
    return t if t.dtype == dtype else t.to(dtype)


class OnlineRMSNormDown(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, weight, eps: float, dim: int, group: TPGroup, rows: bool = False):
        acc = _stat_dtype(x.dtype)

        def partial_sums_reduced() -> torch.Tensor:
            s = _as(x, acc).pow(2).sum(-1, keepdim=True)  # (..., 1)
            # The GEMM runs in the activation dtype on a well-scaled input (the shard's own RMS
            # taken out, put back in fp32 after): bf16 tensor-core speed without an fp32 GEMM.
            scale = torch.sqrt(s / x.shape[-1] + eps)  # (..., 1)
            # it cancels exactly, so any positive value serves: 1 where this shard of the row is all zeros and
            # ε is 0 (0/0 would make the whole row NaN, though the row itself is not zero)
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            xs = _as(_as(x, acc) * _as(gamma, acc) / scale, x.dtype)
            h = _as(torch.matmul(xs, weight.t()), acc) * scale  # (..., R) partial sum
            reduce = reduce_scatter_rows if rows else all_reduce_sum
            # each part cast before the cat (the same values): an fp32 [h | M] would be written whole and
            # read back to cast it, two passes of the widest tensor a block sends (inductor fuses neither)
            wire = _wire_dtype(x.dtype)
            return reduce(torch.cat([_as(h, wire), _as(s / dim, wire)], dim=-1), group)

        # low-rank AC's recompute: the kept result, no GEMM, no collective
        hm = replayed_or_recorded(partial_sums_reduced)
        inv_rms = torch.rsqrt(_as(hm[..., -1:], acc) + eps)
        y = _as(_as(hm[..., :-1], acc) * inv_rms, x.dtype)
        ctx.save_for_backward(x, gamma, weight, y, inv_rms)
        ctx.dim, ctx.group, ctx.rows = dim, group, rows
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gamma, weight, y, inv_rms = ctx.saved_tensors
        acc = inv_rms.dtype
        dh = dy.to(acc) * inv_rms  # (..., R), identical on every rank
        # dL/dS through inv_rms = (S/d + ε)^-1/2; S = Σ_ranks s_i, so ds_i = dS on every rank.
        ds = -0.5 * (dy.to(acc) * y.to(acc)).sum(-1, keepdim=True) * inv_rms.pow(2) / ctx.dim
        if ctx.rows:  # dy covers this rank's rows: every token's dH and dS gathered, in the GEMMs' dtype
            wire = _wire_dtype(x.dtype)
            both = all_gather_rows(torch.cat([_as(dh, wire), _as(ds * ctx.dim, wire)], dim=-1), ctx.group)
            dh_act, ds = _as(both[..., :-1], x.dtype), _as(both[..., -1:], acc) / ctx.dim
        else:
            dh_act = dh.to(x.dtype)  # both GEMMs in the activation dtype, as in the forward
        g = torch.matmul(dh_act, weight).to(acc)  # (..., d/t) = dL/d(γ·x)
        dx = g * gamma.to(acc) + 2.0 * x.to(acc) * ds
        dgamma = (g * x.to(acc)).reshape(-1, x.shape[-1]).sum(0)
        dweight = dh_act.reshape(-1, dh_act.shape[-1]).t() @ (x * gamma).reshape(-1, x.shape[-1])
        return dx.to(x.dtype), dgamma.to(gamma.dtype), dweight.to(weight.dtype), None, None, None, None


class SyncRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, eps: float, dim: int, group: TPGroup):
        acc = _stat_dtype(x.dtype)
        s = all_reduce_partial(_as(x, acc).pow(2).sum(-1, keepdim=True), group)
        inv_rms = torch.rsqrt(s / dim + eps)
        ctx.save_for_backward(x, gamma, inv_rms)
        ctx.dim, ctx.group = dim, group
        return _as(_as(x, acc) * inv_rms, x.dtype) * gamma

    @staticmethod
    def backward(ctx, dy):
        x, gamma, inv_rms = ctx.saved_tensors
        acc = inv_rms.dtype
        xa, g = x.to(acc), (dy * gamma).to(acc)
        # Σ over the full d; a backward result, never recorded or replayed (all_reduce_partial's are the forward's)
        dot = all_reduce_sum((g * xa).sum(-1, keepdim=True), ctx.group)
        dx = g * inv_rms - xa * dot * inv_rms.pow(3) / ctx.dim
        dgamma = (dy.to(acc) * xa * inv_rms).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dgamma.to(gamma.dtype), None, None, None


def shard_rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """Normalise the shard by its own statistic (``norm = "local"``): differs from the dense model."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), gamma, eps)

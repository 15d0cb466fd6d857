"""LORO's exact step: a Riemannian step of ``W = M·Nᵀ`` on the rank-r manifold, on row-sharded factors.

The authors' ``loro_update_fn`` (github mzf666/LORO-main, ``loro_torch/loro_optim.py``, exact branch),
with ``dM``, ``dN`` the factors' Adam-normalised gradients and ``lr`` the bias-corrected step size:

    M = U·Rm, N = V·Rn                        QR (here: shifted CholeskyQR3, positive diagonals)
    G·V  = dM·Rn⁻¹         (n_out × r)        UᵀG = Rm⁻ᵀ·dNᵀ  (r × n_in)
    K0 = UᵀG·V             (r × r)
    Y1 = (UᵀG − UᵀG·V·Vᵀ)ᵀ (n_in × r)         Y2 = G·V − U·Uᵀ·G·V  (n_out × r)
    Q1·K1 = Y1, Q2·K2 = Y2                    QR
    C = [[Rm·Rnᵀ, 0], [0, 0]] − lr·[[K0, K1ᵀ], [K2, 0]]      (2r × 2r)
    C = Uc·S·Vcᵀ                              SVD
    M' = [U, Q2]·Uc[:, :r]·√S_r,  N' = [V, Q1]·Vc[:, :r]·√S_r

``M'·N'ᵀ`` is the best rank-r approximation of ``W − lr·(U·UᵀG + (I − U·Uᵀ)·G·V·Vᵀ)``, the tangent-space
step, balanced by ``√S``. It does not depend on which orthonormal bases the QRs pick: ``M'·N'ᵀ`` is the
same for Householder's and Cholesky's signs, and the factors agree up to the sign of each column pair
(the SVD's own ambiguity).

Sharded (rows of M over ``m_groups``, rows of N over ``n_groups``; everything ``r × r`` or ``2r × 2r``
is the same on every rank, because it is computed from all-reduced sums):

    rank i   M_i, dM_i [n_out_i, r]   N_i, dN_i [n_in_i, r]       its rows
    QR       U_i, Rm; V_i, Rn          3 rounds: all-reduced Grams, r(r+1)/2 each (tall_skinny_qr)
    local    GV_i = dM_i·Rn⁻¹,  GU_i = dN_i·Rm⁻¹  (= (UᵀG)ᵀ rows)
    sums     K0 = Σ GU_iᵀ V_i,  UᵀGV = Σ U_iᵀ GV_i                1 round: all-reduce [r, r] each
    local    Y1_i = GU_i − V_i·K0ᵀ,  Y2_i = GV_i − U_i·UᵀGV
    QR       Q1_i, K1; Q2_i, K2        3 rounds
    every    C, its SVD                no communication
    local    M'_i = [U_i, Q2_i]·Uc[:, :r]·√S_r,  N'_i = [V_i, Q1_i]·Vc[:, :r]·√S_r

7 rounds, one all-reduce each where M and N share their row groups: ``8r² + 6r`` values per pair (six
rounds of two Gram triangles, one of two cross products).

Precision: float64, whatever the parameters' dtype (the result is cast back). The authors run this step
in fp32 (``.float()``) with Householder QRs, which are stable at any condition number. A QR of row-sharded
factors goes through Gram matrices, which square it: in fp32, shifted CholeskyQR3 breaks down on
128 × 64 blocks with log-spaced spectra from ``κ = 10⁵`` on, and erratically (the last pivot rounding to
zero) with one small singular value near ``κ = 10⁴``; the debug model's tangent block ``Y2`` of k reaches
``κ = 3.5·10⁴`` by its second exact step. In float64 the same algorithm holds to ``κ = 10¹³`` and equals
Householder's R at ``κ = 10⁵`` and ``10⁸`` (``tests/unit/test_loro.py``): beyond what an fp32 factor can
resolve (the mixed-precision CholeskyQR of Yamazaki, Tomov and Dongarra, SIAM J. Sci. Comput. 2015). The
cost: float64 GEMMs of ``O(n·r²)`` once every ``loro_freq`` steps, and 8-byte all-reduces.

Example (one process)::

    >>> g = torch.Generator().manual_seed(0)
    >>> m, n = torch.randn(12, 3, generator=g), torch.randn(10, 3, generator=g)
    >>> ((m2, n2),), info = exact_step([ExactInput(m, n, m.sin(), n.cos(), 0.1, (), (), 12, 10)])
    >>> m2.shape, n2.shape, int(info.abs().sum())
    (torch.Size([12, 3]), torch.Size([10, 3]), 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from boost.training.optim.factor_rows import Groups, sum_over_rows
from boost.training.optim.tall_skinny_qr import tall_skinny_qr

COMPUTE_DTYPE = torch.float64


@dataclass
class ExactInput:
    """One factorisation's rows on this rank, its Adam directions and its step size."""

    m: torch.Tensor
    n: torch.Tensor
    dm: torch.Tensor
    dn: torch.Tensor
    lr: float
    m_groups: Groups
    n_groups: Groups
    m_rows: int
    n_rows: int


def _right_solve(upper: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``x · upper⁻¹``."""
    return torch.linalg.solve_triangular(upper, x, upper=True, left=False)


def exact_step(pairs: list[ExactInput]) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The new ``(M', N')`` rows of every pair (in their own dtype), and the Cholesky ``info`` of all QRs
    (non-zero where a factor or a tangent block is rank-deficient: then no rows, ``[]``). The pairs travel
    together: each round is one all-reduce per row group for all of them."""
    m = [p.m.to(COMPUTE_DTYPE) for p in pairs]
    n = [p.n.to(COMPUTE_DTYPE) for p in pairs]
    dm = [p.dm.to(COMPUTE_DTYPE) for p in pairs]
    dn = [p.dn.to(COMPUTE_DTYPE) for p in pairs]

    blocks = []
    for p, mi, ni in zip(pairs, m, n):
        blocks += [(mi, p.m_groups, p.m_rows), (ni, p.n_groups, p.n_rows)]
    factors, info_factors = tall_skinny_qr(blocks)
    u, rm = zip(*factors[0::2])
    v, rn = zip(*factors[1::2])

    g_v = [_right_solve(r, d) for r, d in zip(rn, dm)]  # G·V = dM·Rn⁻¹, rows of M
    g_u = [_right_solve(r, d) for r, d in zip(rm, dn)]  # (UᵀG)ᵀ = dN·Rm⁻¹, rows of N
    parts = []
    for p, gu, vi, ui, gv in zip(pairs, g_u, v, u, g_v):
        parts += [(gu.mT @ vi, p.n_groups), (ui.mT @ gv, p.m_groups)]
    sums = sum_over_rows(parts)
    k0, ut_g_v = sums[0::2], sums[1::2]
    y1 = [gu - vi @ k.mT for gu, vi, k in zip(g_u, v, k0)]
    y2 = [gv - ui @ s for gv, ui, s in zip(g_v, u, ut_g_v)]

    blocks = []
    for p, a, b in zip(pairs, y1, y2):
        blocks += [(a, p.n_groups, p.n_rows), (b, p.m_groups, p.m_rows)]
    tangents, info_tangents = tall_skinny_qr(blocks)
    q1, k1 = zip(*tangents[0::2])
    q2, k2 = zip(*tangents[1::2])
    info = torch.cat([info_factors, info_tangents])
    if bool(info.any()):
        # a rank-deficient block: its Q and R are not finite, and the SVD would stop on them before the
        # caller could say which factor it was (a host sync, on exact steps only)
        return [], info

    out = []
    for i, p in enumerate(pairs):
        r = rm[i].shape[0]
        zeros = torch.zeros_like(rm[i])
        core = torch.cat(
            [torch.cat([rm[i] @ rn[i].mT, zeros], 1), torch.cat([zeros, zeros], 1)], 0
        ) - p.lr * torch.cat([torch.cat([k0[i], k1[i].mT], 1), torch.cat([k2[i], zeros], 1)], 0)
        uc, s, vch = torch.linalg.svd(core)
        root = s[:r].sqrt()
        m_new = torch.cat([u[i], q2[i]], 1) @ uc[:, :r] * root
        n_new = torch.cat([v[i], q1[i]], 1) @ vch[:r].mT * root
        out.append((m_new.to(p.m.dtype), n_new.to(p.n.dtype)))
    return out, info

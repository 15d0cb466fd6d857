"""QR of tall-skinny matrices whose rows are split over ranks: shifted CholeskyQR3.

For ``Y`` (``n × r``, ``n ≫ r``, rows split over a process group) the Gram matrix ``YᵀY`` is a sum over
the row shards, one ``r × r`` all-reduce; its Cholesky factor is ``R`` and ``Q = Y·R⁻¹`` stays row-local.
One pass (CholeskyQR) loses orthogonality as ``u·κ(Y)²`` and breaks down once ``κ(Y)² ≳ 1/u``
(``κ ≈ 4·10³`` in fp32). So three passes (Fukaya, Kannan, Nakatsukasa, Zhang, Yamamoto, "Shifted
Cholesky QR for computing the QR factorization of ill-conditioned matrices", SIAM J. Sci. Comput. 2020):
the first on ``YᵀY + s·I`` with ``s = 11·(n·r + r·(r+1))·u·‖Y‖²_F``, which cannot break down for
``κ(Y) ≲ 1/u`` and leaves ``κ(Q₁) ≲ u^{-1/2}``; then two plain passes (CholeskyQR2), which restore
orthogonality and residual to ``O(u)``. ``R = R₃·R₂·R₁``: upper triangular with a positive diagonal,
so ``Q, R`` is *the* QR of ``Y`` (Householder's differs by the signs of ``R``'s diagonal).

Per call: 3 all-reduces of a Gram's upper triangle, ``r(r+1)/2`` values per block (blocks over the same
groups share each one), ``O(n·r²)`` flops per rank on its rows. A rank-deficient ``Y`` (``κ = ∞``) has no
such QR: its Cholesky factor does not exist and ``info`` says so.

    rank i   Y_i [n_i, r]              its rows
    pass     G = Σ_i Y_iᵀ Y_i          all-reduce of its upper triangle, r(r+1)/2
             R = chol(G (+ s·I))ᵀ      every rank, the same
             Y_i ← Y_i · R⁻¹           triangular solve, local

Example::

    >>> y = torch.randn(50, 4, dtype=torch.float64)
    >>> (q, r), = tall_skinny_qr([(y, (), 50)])[0]
    >>> torch.allclose(q @ r, y), torch.allclose(q.T @ q, torch.eye(4, dtype=torch.float64))
    (True, True)
"""

from __future__ import annotations

import torch

from boost.training.optim.factor_rows import Groups, sum_over_rows

Block = tuple[torch.Tensor, Groups, int]  # this rank's rows, the groups they are split over, global rows
PASSES = 3


def _upper(gram: torch.Tensor) -> torch.Tensor:
    """The upper triangle of a symmetric ``r × r`` matrix, row by row: ``r(r+1)/2`` values travel, not ``r²``."""
    rows, cols = torch.triu_indices(*gram.shape, device=gram.device)
    return gram[rows, cols]


def _symmetric(upper: torch.Tensor, r: int) -> torch.Tensor:
    rows, cols = torch.triu_indices(r, r, device=upper.device)
    gram = torch.zeros(r, r, dtype=upper.dtype, device=upper.device)
    gram[rows, cols] = upper
    return gram + gram.mT - gram.diagonal().diag()


def tall_skinny_qr(blocks: list[Block]) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """``[(Q_i, R)]`` of every block (``Q_i`` this rank's rows of ``Q``), and the Cholesky ``info`` of
    every pass and block (all zero when every QR exists)."""
    qs = [y for y, _, _ in blocks]
    rs: list[torch.Tensor | None] = [None] * len(blocks)
    infos = []
    for k in range(PASSES):
        packed = sum_over_rows([(_upper(q.mT @ q), groups) for q, (_, groups, _) in zip(qs, blocks)])
        for i, (upper_sum, (_, _, n)) in enumerate(zip(packed, blocks)):
            r = qs[i].shape[1]
            gram = _symmetric(upper_sum, r)
            if k == 0:
                u = torch.finfo(gram.dtype).eps / 2
                shift = 11 * (n * r + r * (r + 1)) * u * gram.diagonal().sum()
                gram = gram + shift * torch.eye(r, dtype=gram.dtype, device=gram.device)
            lower, info = torch.linalg.cholesky_ex(gram)
            infos.append(info)
            upper = lower.mT
            qs[i] = torch.linalg.solve_triangular(upper, qs[i], upper=True, left=False)
            rs[i] = upper if rs[i] is None else upper @ rs[i]
    return list(zip(qs, rs)), torch.stack(infos)  # type: ignore[arg-type]

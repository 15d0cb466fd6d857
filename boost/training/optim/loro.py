"""LORO, the low-rank Riemannian optimizer (Mo et al., ICLR 2025), for BOOST models, sharded or not.

What the authors' ``LOROAdamW.step`` + ``_loro_step`` + ``refresh_states`` do, step ``t`` (1-based, their
``update_step + 1``), as their ``run_c4.py`` drives them (github mzf666/LORO-main, ``loro_torch/``):

- Every parameter's Adam moments: ``m ← β1·m + (1−β1)·g``, ``v ← β2·v + (1−β2)·g²``, ``d = m / (√v + ε)``,
  step size ``α = lr·√(1−β2^k)/(1−β1^k)`` (``k`` the moments' own step count, which a refresh restarts).
- Other parameters (embedding, norms, head): AdamW as Hugging Face's: ``p ← p − α·d``, then
  ``p ← p − lr·λ·p`` (decay after the update, with the un-corrected ``lr``).
- Low-rank factors ``M = B``, ``N = Aᵀ`` (``boost.training.optim.factor_pairs``), on a lazy step (``t`` not a multiple
  of ``loro_freq``): ``M ← M − α·s·dM``, then ``M ← M − α·λ·M``; ``s = lr_scaler``, ``−1`` meaning
  ``r / dim``. Elementwise: each rank updates its own shard, no communication.
- On an exact step (``t`` a multiple of ``loro_freq``): ``boost.training.optim.loro_exact`` with step size ``α``
  (no ``s``, no decay); the moments are kept.
- After the step, if ``t`` is a multiple of ``refresh_freq`` (> 0): every moment is zeroed and its step
  count restarted (their ``refresh_states("all")``; their recipes refresh at every exact step).

The cycle: an exact step fixes the new factors up to the sign of each column pair, and BOOST's signs
need not be the authors' (their QR and SVD are LAPACK's). With a refresh after every exact step
(``refresh_freq`` dividing ``loro_freq``: the default and their recipes) the rest of the run is blind to
those signs and follows theirs. With moments kept across an exact step (``refresh_freq`` 0, or one that
does not divide ``loro_freq``) the moments are of the old basis, do not follow a flipped sign, and the
run parts from theirs after it; both are LORO, and BOOST's preflight says so in one line.

State, all of it in ``state_dict()`` and so in a DCP checkpoint: per parameter ``step`` (an int),
``exp_avg`` and ``exp_avg_sq`` (laid out like the parameter, DTensors under FSDP2/TP, so they reshard);
the position in the exact/refresh cycle is every group's ``updates``. The state exists from construction,
so DCP's loader never runs a warm-up step of its own (``_init_optim_state``) before loading it.

Example::

    >>> from boost.training.model import ModelArgs, Transformer
    >>> _ = torch.manual_seed(0)
    >>> model = Transformer(ModelArgs.from_flavor("debug", linear="svd", vocab_size=256, n_layers=1))
    >>> opt = LORO(model, lr=1e-2, loro_freq=2, refresh_freq=2)
    >>> tokens = torch.randint(0, 256, (2, 9))
    >>> for _ in range(2):
    ...     loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    ...     loss.backward(); opt.step(); opt.zero_grad()
    >>> opt.param_groups[0]["updates"], opt.last_step_exact
    (2, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from boost.training.optim.factor_pairs import FactorPair, factor_pairs
from boost.training.optim.factor_rows import factor_rows
from boost.training.optim.loro_exact import ExactInput, exact_step
from boost.training.rules import loro_kind_problem, loro_rank_problem


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _grad(param: torch.Tensor) -> torch.Tensor:
    """``param``'s gradient as ``param``'s own shard. DTensor may return a gradient in another layout than
    its parameter's (vanilla TP's embedding: ``Replicate`` for a ``Shard(0)`` table); to the parameter's
    layout it goes, which from ``Replicate`` is a local slice."""
    grad = param.grad
    if isinstance(grad, DTensor) and grad.placements != param.placements:
        grad = grad.redistribute(param.device_mesh, param.placements)
    return _local(grad)


def _like(param: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """``local`` (laid out like ``param``'s shard) as a tensor laid out like ``param``."""
    if not isinstance(param, DTensor):
        return local
    return DTensor.from_local(
        local, param.device_mesh, param.placements, shape=param.shape, stride=param.stride()
    )


class LORO(torch.optim.Optimizer):
    """LORO on the low-rank factors of ``model`` (``boost.linear = "svd"``), AdamW on its other parameters.

    Args:
        model: a BOOST ``Transformer`` (or a pipeline stage of one), parallelised or not.
        lr, betas, eps, weight_decay: as the authors' ``LOROAdamW`` (their defaults).
        loro_freq: an exact step every this many steps, lazy steps between.
        refresh_freq: zero every Adam moment every this many steps (0: never); a divisor of
            ``loro_freq`` refreshes after every exact step, as the authors' recipes do.
        lr_scaler: the lazy step's learning-rate factor; negative means ``r / dim``.
    """

    def __init__(
        self,
        model: nn.Module,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        loro_freq: int = 500,
        refresh_freq: int = 500,
        lr_scaler: float = -1.0,
    ):
        args = model.model_args
        problem = loro_kind_problem(args.linear)
        if problem:
            raise ValueError(f"LORO: {problem}")
        if loro_freq < 1 or refresh_freq < 0:
            raise ValueError(f"LORO: loro_freq ≥ 1 and refresh_freq ≥ 0, got {loro_freq}, {refresh_freq}")
        self.pairs: list[FactorPair] = factor_pairs(model)
        for pair in self.pairs:
            problem = loro_rank_problem(pair.rank, min(pair.d_in, pair.d_out))
            if problem:
                raise ValueError(f"LORO: {pair.name}: {problem}")
        self.loro_freq, self.refresh_freq = loro_freq, refresh_freq
        self.last_step_exact = False
        factors = {id(p): p for pair in self.pairs for p in (pair.down, pair.up)}
        self._scaler: dict[int, float] = {}
        for pair in self.pairs:
            scaler = lr_scaler if lr_scaler >= 0 else pair.rank / args.dim
            for p in (pair.down, pair.up):
                assert self._scaler.setdefault(id(p), scaler) == scaler, "one rank per factor parameter"
        regular = [p for p in model.parameters() if p.requires_grad and id(p) not in factors]
        groups = [
            {"params": params, "factors": is_factor}
            for params, is_factor in ((regular, False), (list(factors.values()), True))
            if params
        ]
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "updates": 0}
        super().__init__(groups, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p] = {
                    "step": 0,
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        t = self.param_groups[0]["updates"] + 1
        exact = t % self.loro_freq == 0
        directions: dict[int, tuple[torch.Tensor, float]] = {}  # the factors', held for the exact step
        for group in self.param_groups:
            decay = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                direction, alpha = self._adam(p, group)
                w = _local(p)
                if not group["factors"]:
                    w.add_(direction, alpha=-alpha)
                    if decay > 0:
                        w.add_(w, alpha=-group["lr"] * decay)
                elif exact:
                    directions[id(p)] = (direction, alpha)
                else:  # lazy: elementwise on this rank's shard
                    w.sub_(alpha * self._scaler[id(p)] * direction)
                    if decay > 0:
                        w.sub_(alpha * decay * w)
        if exact:
            self._exact(directions)
        if self.refresh_freq and t % self.refresh_freq == 0:
            self.refresh()
        for group in self.param_groups:
            group["updates"] = t
        self.last_step_exact = exact
        return loss

    def _adam(self, p: torch.Tensor, group: dict) -> tuple[torch.Tensor, float]:
        """Update ``p``'s moments; its direction ``m / (√v + ε)`` (this rank's shard) and step size α."""
        state = self.state[p]
        state["step"] += 1
        beta1, beta2 = group["betas"]
        grad, m, v = _grad(p), _local(state["exp_avg"]), _local(state["exp_avg_sq"])
        m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = v.sqrt().add_(group["eps"])
        k = state["step"]
        alpha = group["lr"] * math.sqrt(1.0 - beta2**k) / (1.0 - beta1**k)
        return m / denom, alpha

    def _exact(self, directions: dict[int, tuple[torch.Tensor, float]]) -> None:
        """The exact step, one bottleneck (the pairs sharing a ``down``) at a time: its factors gathered
        to full rank where sharded on it, their ``r × r`` sums all-reduced together, written back."""
        by_down: dict[int, list[FactorPair]] = {}
        for pair in self.pairs:
            if id(pair.down) in directions and id(pair.up) in directions:
                by_down.setdefault(id(pair.down), []).append(pair)
        for pairs in by_down.values():
            rows, new = {}, {}
            for pair in pairs:
                for p, dim in ((pair.down, pair.down_row_dim), (pair.up, pair.up_row_dim)):
                    if id(p) not in rows:
                        rows[id(p)] = (factor_rows(p, dim), factor_rows(_like(p, directions[id(p)][0]), dim))
                        new[id(p)] = rows[id(p)][0].local.clone()
            inputs = []
            for pair in pairs:
                (down, d_down), (up, d_up) = rows[id(pair.down)], rows[id(pair.up)]
                m_index = pair.up_index if pair.up_index is not None else slice(None)
                inputs.append(
                    ExactInput(
                        m=up.local[m_index],
                        n=down.local[pair.down_rows].mT,
                        dm=d_up.local[m_index],
                        dn=d_down.local[pair.down_rows].mT,
                        lr=directions[id(pair.up)][1],
                        m_groups=up.groups,
                        n_groups=down.groups,
                        m_rows=up.rows,
                        n_rows=down.rows,
                    )
                )
            results, info = exact_step(inputs)
            # a rank-deficient QR must not reach the weights (exact_step synced on it: no rows came back)
            if not results:
                names = ", ".join(p.name for p in pairs)
                # said apart on the failure path only (the success path pays no host sync for it)
                if not all(bool(directions[i][0].isfinite().all()) for i in rows):
                    raise FloatingPointError(
                        f"LORO exact step: the Adam direction of a factor of {names} is not finite (a "
                        "non-finite gradient reached the optimizer)"
                    )
                raise FloatingPointError(
                    f"LORO exact step: a factor of {names} or its tangent block is rank-deficient (its Gram "
                    "matrix has no Cholesky factor)"
                )
            for pair, (m_new, n_new) in zip(pairs, results):
                new[id(pair.up)][pair.up_index if pair.up_index is not None else slice(None)] = m_new
                new[id(pair.down)][pair.down_rows] = n_new.mT
            for key, (factor, _) in rows.items():
                factor.write_back(new[key])

    def refresh(self) -> None:
        """Zero every Adam moment and restart its step count (the authors' ``refresh_states("all")``)."""
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = 0
                state["exp_avg"].zero_()
                state["exp_avg_sq"].zero_()

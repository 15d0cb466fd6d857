"""LORO's parts on one process: the row-sharded QR against Householder's, the kinds and shapes it refuses,
its state across a save and load, and its independence of how the model is cut into pipeline stages.
(Against the authors' optimizer: test_loro_golden.py; sharded layouts: tests/multiprocess/test_loro_sharded.py.)
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F

from boost import ModelArgs, Transformer
from boost.training.optim import LORO
from boost.training.optim.tall_skinny_qr import tall_skinny_qr


def _block(kappa: float, spectrum: str, dtype: torch.dtype) -> torch.Tensor:
    """A 128 × 64 block of condition number ``kappa``: one small singular value, or log-spaced ones (where
    fp32 CholeskyQR breaks down reliably; with one small one it does erratically, as the last pivot rounds)."""
    g = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(128, 64, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(64, 64, generator=g, dtype=torch.float64))
    if spectrum == "one small":
        s = torch.ones(64, dtype=torch.float64)
        s[-1] = 1 / kappa
    else:
        s = torch.logspace(0, -torch.log10(torch.tensor(kappa)).item(), 64, dtype=torch.float64)
    return ((u * s) @ v.T).to(dtype)


@pytest.mark.parametrize("kappa", [1e5, 1e8])
def test_float64_cholesky_qr_of_fp32_factors_equals_householder_where_fp32_breaks_down(kappa):
    y = _block(kappa, "log-spaced", torch.float32)
    # the exact step's precision (boost.training.optim.loro_exact): float64, on fp32 factors
    [(q, r)], info = tall_skinny_qr([(y.double(), (), 128)])
    assert not info.any()
    q_ref, r_ref = torch.linalg.qr(y.double())  # Householder; its R's diagonal has either sign
    signs = torch.sign(r_ref.diagonal())
    # both in float64: R agrees to rounding once Householder's signs are taken (seen: 2e-16)
    torch.testing.assert_close(r, signs[:, None] * r_ref, rtol=0, atol=1e-13)
    torch.testing.assert_close(q.T @ q, torch.eye(64, dtype=torch.float64), rtol=0, atol=1e-13)
    torch.testing.assert_close(q @ r, y.double(), rtol=0, atol=1e-14)
    # negative control: the same algorithm in fp32 breaks down on this block
    _, info32 = tall_skinny_qr([(y, (), 128)])
    assert info32.any()


def _tiny(linear: str = "svd", **overrides) -> ModelArgs:
    fields = dict(
        dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, ffn_dim=64, rank=8, max_seq_len=16
    )
    return ModelArgs(**(fields | overrides), linear=linear, init_seed=1)


@pytest.mark.parametrize(
    ("linear", "message"),
    [
        ("cola", "σ between the factors make B·A not the layer's weight"),
        ("lax", "σ and the LaX carry between the factors"),
        ("full", "the dense model has none"),
    ],
)
def test_loro_is_refused_where_b_times_a_is_not_the_weight(linear, message):
    with pytest.raises(ValueError, match=message):
        LORO(Transformer(_tiny(linear)))


def test_loro_is_refused_where_a_factor_has_fewer_than_2r_rows():
    # k and v are n_kv_heads · head_dim = 16 wide: at rank 10 their tangent blocks cannot be full rank
    with pytest.raises(
        ValueError, match=r"wqkv.k: LORO's exact step needs 2·rank ≤ the smallest factored dim \(16\)"
    ):
        LORO(Transformer(_tiny(rank=10)))


def _loss(parts, tokens) -> torch.Tensor:
    h = tokens[:, :-1]
    for part in parts:
        h = part(h)
    return F.cross_entropy(h.flatten(0, 1), tokens[:, 1:].flatten())


def _train(parts, optimizers, batches) -> list[float]:
    losses = []
    for tokens in batches:
        loss = _loss(parts, tokens)
        loss.backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return losses


SETTINGS = dict(lr=1e-2, weight_decay=0.1, loro_freq=2, refresh_freq=4)


def test_loro_per_pipeline_stage_equals_loro_on_the_whole_model():
    # torchtitan builds one optimizer per model part; LORO's math is per factor pair, and every part
    # counts the same steps: cutting the model changes nothing, to the bit
    torch.set_default_dtype(torch.float64)
    try:
        whole = Transformer(_tiny())
        first, second = copy.deepcopy(whole), copy.deepcopy(whole)
        del first.layers["1"]
        first.norm = first.output = None
        del second.layers["0"]
        second.tok_embeddings = None
        g = torch.Generator().manual_seed(0)
        batches = [torch.randint(0, 64, (2, 17), generator=g) for _ in range(5)]
        want = _train([whole], [LORO(whole, **SETTINGS)], batches)
        got = _train([first, second], [LORO(first, **SETTINGS), LORO(second, **SETTINGS)], batches)
        assert got == want
        for name, p in whole.named_parameters():
            part = first if name.startswith(("tok_embeddings", "layers.0.")) else second
            assert torch.equal(part.get_parameter(name), p), name
    finally:
        torch.set_default_dtype(torch.float32)


def test_loro_state_dict_resumes_the_cycle_and_the_moments():
    torch.manual_seed(0)
    model = Transformer(_tiny())
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 64, (2, 17), generator=g) for _ in range(5)]
    optimizer = LORO(model, **SETTINGS)
    _train([model], [optimizer], batches[:1])
    saved_model, saved_optimizer = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    want = _train([model], [optimizer], batches[1:])  # steps 2 (exact), 3, 4 (exact + refresh), 5

    resumed = Transformer(_tiny())
    resumed.load_state_dict(saved_model)
    optimizer = LORO(resumed, **SETTINGS)
    optimizer.load_state_dict(saved_optimizer)
    assert optimizer.param_groups[0]["updates"] == 1
    assert _train([resumed], [optimizer], batches[1:]) == want


@pytest.mark.parametrize(("loro_freq", "refresh_freq"), [(0, 500), (500, -1)])
def test_loro_refuses_a_cycle_without_exact_steps_or_a_negative_refresh(loro_freq, refresh_freq):
    # loro_freq = 0 divides by zero at the first step; refresh_freq = -1 refreshes at every step (t % -1 == 0)
    with pytest.raises(
        ValueError,
        match=re.escape(f"LORO: loro_freq ≥ 1 and refresh_freq ≥ 0, got {loro_freq}, {refresh_freq}"),
    ):
        LORO(Transformer(_tiny()), loro_freq=loro_freq, refresh_freq=refresh_freq)


def test_an_exact_step_on_a_rank_deficient_factor_stops_before_the_weights():
    # a zero column in an up-projection's factor: its Gram matrix has no Cholesky factor, so the exact step's
    # QR is not finite; the step stops naming the bottleneck, and no factor moves (the run stops there: the
    # other parameters' AdamW step, taken before, is in no checkpoint)
    model = Transformer(_tiny())
    with torch.no_grad():
        model.layers["0"].attention.wqkv.up[0].weight[..., 0] = 0
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = LORO(model, lr=1e-2, loro_freq=1, refresh_freq=4)
    _loss([model], torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))).backward()
    with pytest.raises(FloatingPointError, match=r"LORO exact step: a factor of .*wqkv.* is rank-deficient"):
        optimizer.step()
    factors = [name for name, _ in model.named_parameters() if ".down." in name or ".up." in name]
    assert len(factors) == 2 * 9  # a layer: 4 downs, 5 ups (wqkv's q and its batched k|v under GQA)
    for name in factors:
        assert torch.equal(model.get_parameter(name), before[name]), name


def test_an_exact_step_on_a_non_finite_gradient_says_so():
    # not "rank-deficient": a NaN that reached the optimizer is named as what it is, and no factor moves
    model = Transformer(_tiny())
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = LORO(model, lr=1e-2, loro_freq=1, refresh_freq=4)
    _loss([model], torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))).backward()
    model.layers["0"].attention.wqkv.up[0].weight.grad[0, 0] = float("nan")
    with pytest.raises(
        FloatingPointError, match=r"LORO exact step: the Adam direction of a factor of .*wqkv.* is not finite"
    ):
        optimizer.step()
    for name, p in model.named_parameters():
        if ".up." in name or ".down." in name:
            assert torch.equal(p, before[name]), name


@pytest.mark.parametrize(
    ("lr_scaler", "scale"), [(0.5, 0.5), (0.0, 0.0), (-1.0, 8 / 32)], ids=["0.5", "0", "r/dim"]
)
def test_a_lazy_step_scales_the_factors_adam_step_by_lr_scaler(lr_scaler, scale):
    # the first step from zero moments is Adam's by definition: m = (1−β1)·g, v = (1−β2)·g², the factor moving
    # by −α·s·m/(√v + ε) with α = lr·√(1−β2)/(1−β1); s = lr_scaler, a negative one meaning rank / dim (8 / 32)
    torch.manual_seed(0)
    model = Transformer(_tiny())
    lr, (beta1, beta2), eps = 1e-2, (0.9, 0.999), 1e-6
    optimizer = LORO(
        model, lr=lr, betas=(beta1, beta2), eps=eps, loro_freq=4, refresh_freq=4, lr_scaler=lr_scaler
    )
    tokens = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(0))
    _loss([model], tokens).backward()
    factors = {id(p): p for pair in optimizer.pairs for p in (pair.down, pair.up)}.values()
    before = {id(p): (p.detach().clone(), p.grad.clone()) for p in factors}
    optimizer.step()
    assert not optimizer.last_step_exact
    alpha = lr * (1 - beta2) ** 0.5 / (1 - beta1)
    for p in factors:
        w, g = before[id(p)]
        direction = (1 - beta1) * g / (((1 - beta2) * g * g).sqrt() + eps)
        torch.testing.assert_close(p.detach(), w - alpha * scale * direction)

"""The initial model's weight scales, against the inits BOOST documents and the authors publish.

Each expectation is written out from its definition here (not read back from the library's helpers, which
a wrong exponent would change too). A sample standard deviation of N draws is within ~1/√(2N) of the true
one (relative; a little less for a uniform), and every tensor checked holds at least ~1000 elements, so a
tolerance of 5-8% is several of those widths while a wrong scale (a factor ≥ 1.2) lies far outside it.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from boost import ModelArgs, Transformer
from boost.training.model.latent_crossing import LatentCrossing
from boost.training.model.linears import BatchedUp, Bottleneck


def _assert_std(w: torch.Tensor, want: float, what: str, rel: float = 0.05) -> None:
    got = w.detach().float().std().item()
    assert abs(got - want) <= rel * want, f"{what}: std {got:.5f}, want {want:.5f} (±{rel:.0%})"


def _member_factors(m: Bottleneck):
    """``(name, r, d_out, A, B)`` of each member: its rows of the (grouped) down-projection and its
    up-projection (its slice of a batched one)."""
    start = 0
    b_of = {}
    for unit, group in zip(m.up, m.up_groups):
        for j, i in enumerate(group):
            b_of[i] = unit.weight[j] if isinstance(unit, BatchedUp) else unit.weight
    for i, (name, r, d_out) in enumerate(m.members):
        yield name, r, d_out, m.down.weight[start : start + r], b_of[i]
        start += r


@pytest.mark.parametrize("kind", ["cola", "svd", "lax"])
def test_low_rank_factors_start_at_colas_init(kind):
    # CoLA (Liu et al. 2025): A and B both N(0, σ²) with σ = r^(-1/4) · (d_in + d_out)^(-1/4), so B·A starts
    # with the variance of a dense layer drawn at (d_in + d_out)^(-1/2). debug: d 256, ffn 704, r 64, GQA.
    torch.manual_seed(0)
    model = Transformer(ModelArgs.from_flavor("debug", linear=kind, vocab_size=512, n_layers=2))
    seen = 0
    for path, m in model.named_modules():
        if not isinstance(m, Bottleneck):
            continue
        for name, r, d_out, a, b in _member_factors(m):
            want = r**-0.25 * (m.d_in + d_out) ** -0.25
            assert tuple(a.shape) == (r, m.d_in) and tuple(b.shape) == (d_out, r), (path, name)
            _assert_std(a, want, f"{path}.{name}.A")
            _assert_std(b, want, f"{path}.{name}.B")
            seen += 1
    assert seen == 2 * 7  # q, k, v, o, gate, up, down in each block
    # the embedding N(0, 1) and the head N(0, 1/d), as torchtitan's llama initialises them
    _assert_std(model.tok_embeddings.weight, 1.0, "tok_embeddings")
    _assert_std(model.output.weight, 256**-0.5, "output")


def test_dense_projections_start_at_0_02():
    torch.manual_seed(0)
    model = Transformer(ModelArgs.from_flavor("debug", linear="full", vocab_size=512, n_layers=1))
    dense = [(p, m) for p, m in model.layers.named_modules() if isinstance(m, nn.Linear)]
    assert len(dense) == 7
    for path, m in dense:
        _assert_std(m.weight, 0.02, path)


def test_laxs_tensorized_gate_starts_kaiming_uniform():
    # The LaX authors' factors are nn.init.kaiming_uniform_ at its defaults (a = 0: gain √2): U(-bound, bound)
    # with bound = √2 · √(3 / fan_in), std = bound / √3 = √(2 / fan_in); fan_in is a square factor's side.
    # rank 32 = 4 × 8: the encoder E [8, 8] and the decoder D [4, 4] differ. 128 members: 8192 and 2048 values.
    members = 128
    cross = LatentCrossing(members=members, rank=32, gate="tensorized")
    cross.reset_parameters(seed=0, keys=[f"layers.1.attention.m{i}" for i in range(members)])
    a, b = cross.factors
    assert (a, b) == (4, 8)
    for w, side in ((cross.gate_encoder, b), (cross.gate_decoder, a)):
        assert tuple(w.shape) == (members, side, side)
        bound = math.sqrt(2.0) * math.sqrt(3.0 / side)
        _assert_std(w, math.sqrt(2.0 / side), f"gate [{side}, {side}]")
        # a uniform over the whole interval: within the bound, and reaching near it
        assert 0.97 * bound <= w.abs().max().item() <= bound * (1 + 1e-6), (side, w.abs().max().item(), bound)


def test_laxs_linear_gate_starts_as_nn_linear():
    # nn.Linear(r, r): weight kaiming_uniform_(a = √5), i.e. U(-1/√r, 1/√r), and bias U(-1/√r, 1/√r) (fan_in r);
    # both of std 1/√(3r). rank 16, 64 members: 16384 weights, 1024 biases.
    members, r = 64, 16
    cross = LatentCrossing(members=members, rank=r, gate="linear")
    cross.reset_parameters(seed=0, keys=[f"layers.1.feed_forward.m{i}" for i in range(members)])
    bound = 1 / math.sqrt(r)
    for w, what in ((cross.gate_weight, "gate_weight"), (cross.gate_bias, "gate_bias")):
        _assert_std(w, bound / math.sqrt(3.0), what, rel=0.08)
        assert 0.95 * bound <= w.abs().max().item() <= bound * (1 + 1e-6), (what, w.abs().max().item(), bound)

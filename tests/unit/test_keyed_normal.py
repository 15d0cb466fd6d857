"""The counter-based normals of ``boost.training.model.keyed_normal``: the documented formula, computed
independently in Python integers and float64, and the statistics of large draws (bounds at ~5σ of
the estimator; every draw is a fixed function of its key, so the test is deterministic)."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch

import boost.training.model.keyed_normal as keyed_normal
from boost.training.model.keyed_normal import fill_keyed_normal, key_words, mix32_

N = 2048  # draws of N × N: 4.2M values


def _lowbias32(x: int) -> int:
    # C. Wellons' published constants, in Python's unbounded integers
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def _reference(name: str, seed: int, i: int, j: int) -> float:
    k0, k1, k2, k3 = key_words(name, seed)
    c = _lowbias32(_lowbias32(j ^ k0) ^ k1)
    b = _lowbias32(_lowbias32(i ^ k2) ^ k3)
    h = _lowbias32((b + c) & 0xFFFFFFFF)
    x = (2 * (h >> 8) + 1) / 2**24 - 1
    return NormalDist().inv_cdf((x + 1) / 2)  # √2 · erfinv(x)


def _draw(name: str, seed: int = 0, rows: range = range(N), cols: range = range(N)) -> torch.Tensor:
    out = torch.empty(len(rows), len(cols))
    fill_keyed_normal(out, key_words(name, seed), rows, cols, 1.0)
    return out.double()


def test_mix_is_lowbias32():
    xs = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0x846CA68B, 0xFFFFFFFF, 0x12345678]
    x = torch.tensor(xs, dtype=torch.int64)
    assert mix32_(x, torch.empty_like(x)).tolist() == [_lowbias32(v) for v in xs]


def test_values_are_the_documented_formula():
    rows, cols = range(2**31 - 3, 2**31 + 2), range(2**32 - 4, 2**32)  # coordinates up to 32 bits
    got = _draw("layers.3.attention.q.A", 5, rows, cols)
    for a, i in enumerate(rows):
        for b, j in enumerate(cols):
            want = _reference("layers.3.attention.q.A", 5, i, j)
            assert got[a, b].item() == pytest.approx(want, rel=1e-5, abs=1e-6), (i, j)
    with pytest.raises(ValueError, match="does not fit 32 bits"):
        _draw("x", 0, range(1), range(2**32 - 1, 2**32 + 1))


def test_a_box_in_any_chunks_is_the_whole_draws_box(monkeypatch):
    whole = _draw("w", rows=range(300), cols=range(520))
    for chunk in (7, 100, 1000):
        monkeypatch.setattr(keyed_normal, "CHUNK", chunk)
        assert torch.equal(_draw("w", rows=range(37, 290), cols=range(255, 513)), whole[37:290, 255:513])


def test_a_large_draw_is_standard_normal():
    z = _draw("layers.0.feed_forward.gate.A").flatten()
    n = z.numel()
    assert abs(z.mean().item()) < 5 / math.sqrt(n)
    assert abs(z.std().item() - 1) < 5 / math.sqrt(2 * n)
    assert abs((z**4).mean().item() - 3) < 5 * math.sqrt(96 / n)
    assert abs((z**3).mean().item()) < 5 * math.sqrt(15 / n)
    # the tails: P(|z| > 3) = 0.0027, and the 24-bit uniform bounds |z| by 5.42
    tail = (z.abs() > 3).double().mean().item()
    assert abs(tail - 0.0026998) < 5 * math.sqrt(0.0027 / n)
    assert z.abs().max().item() < 5.42
    # the histogram of Φ(z) is flat: 256 bins, chi-square of 255 degrees within 5σ
    counts = torch.histc(torch.special.ndtr(z), 256, 0, 1)
    chi2 = (((counts - n / 256) ** 2) / (n / 256)).sum().item()
    assert abs(chi2 - 255) < 5 * math.sqrt(2 * 255)


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a * b).mean().item() * math.sqrt(a.numel())  # ~N(0, 1) for independent draws


def test_neighbours_keys_and_seeds_are_independent():
    z = _draw("layers.0.attention.q.A")
    assert abs(_corr(z[1:], z[:-1])) < 5  # neighbouring rows
    assert abs(_corr(z[:, 1:], z[:, :-1])) < 5  # neighbouring columns
    assert abs(_corr(z[1:, 1:], z[:-1, :-1])) < 5  # diagonal
    assert abs(_corr(z[256:], z[:-256])) < 5  # rows a power of two apart
    # the four corners of 2x2 blocks: each value mixes one row word with one column word
    blocks = z.view(N // 2, 2, N // 2, 2)
    corners = blocks[:, 0, :, 0] * blocks[:, 0, :, 1] * blocks[:, 1, :, 0] * blocks[:, 1, :, 1]
    assert abs(corners.mean().item() * math.sqrt(corners.numel())) < 5
    for other in (
        _draw("layers.1.attention.q.A"),
        _draw("layers.0.attention.k.A"),
        _draw("layers.0.attention.q.A", 1),
    ):
        assert abs(_corr(z, other)) < 5
        assert abs(_corr(z[1:], other[:-1])) < 5
    # the transpose of a square part is not its own draw (rows and columns have their own keys)
    assert abs(_corr(z, z.t())) < 5

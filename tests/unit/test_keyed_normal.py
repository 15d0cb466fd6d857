"""The counter-based normals of ``boost.training.model.keyed_normal``: the documented formula, computed
independently in Python integers and float64, and the statistics of large draws (bounds at ~5σ of
the estimator; every draw is a fixed function of its key, so the test is deterministic).

Two boxes of 4.2M values each: a square one (2048 × 2048) and a tall one, every row of a 128k-token
embedding (131072 × 32): real parameters reach such coordinates, where a structure of the row words
would show first."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch

import boost.training.model.keyed_normal as keyed_normal
from boost.training.model.keyed_normal import fill_keyed_normal, key_words, mix32_

N = 2048  # draws of N × N: 4.2M values
TALL = 1 << 17  # rows of the tall box, by 32 columns: 4.2M values too
BOXES = {"square": (range(N), range(N)), "tall": (range(TALL), range(32))}


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


@pytest.mark.parametrize("box", BOXES)
def test_a_large_draw_is_standard_normal(box):
    z = _draw("layers.0.feed_forward.gate.A", 0, *BOXES[box]).flatten()
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
    tall = _draw("tok_embeddings.weight", 0, *BOXES["tall"])
    for shift in (1 << 10, 1 << 14, 1 << 16):  # far rows a power of two apart: row words' high bits
        assert abs(_corr(tall[shift:], tall[:-shift])) < 5, shift
    for other in (
        _draw("layers.1.attention.q.A"),
        _draw("layers.0.attention.k.A"),
        _draw("layers.0.attention.q.A", 1),
    ):
        assert abs(_corr(z, other)) < 5
        assert abs(_corr(z[1:], other[:-1])) < 5
    # the transpose of a square part is not its own draw (rows and columns have their own keys)
    assert abs(_corr(z, z.t())) < 5


def _corner_products(z: torch.Tensor) -> tuple[float, float]:
    """Every value mixes one row word with one column word, so the inputs at the four corners of a rectangle
    (rows i, i', columns j, j') are related: x_ij − x_ij' − x_i'j + x_i'j' = 0 (mod 2^32), a structure the
    element mix must hide. Standardised means of the corners' product, each ~N(0, 1) for independent draws:
    over the 2×2 blocks (neighbouring coordinates), and over every rectangle, RC/2 times as many, from
    the Gram matrices (Σ over rectangles = ¼ Σ_{j≠j'} [(Σ_i z_ij z_ij')² − Σ_i z_ij² z_ij'²]; the products
    of distinct rectangles are uncorrelated, so the sum's variance is their count)."""
    rows, cols = z.shape
    blocks = z.view(rows // 2, 2, cols // 2, 2)
    corners = blocks[:, 0, :, 0] * blocks[:, 0, :, 1] * blocks[:, 1, :, 0] * blocks[:, 1, :, 1]
    neighbours = corners.mean().item() * math.sqrt(corners.numel())
    gram, squares = z.t() @ z, (z * z).t() @ (z * z)
    off = ~torch.eye(cols, dtype=torch.bool)
    total = (gram[off] ** 2 - squares[off]).sum().item() / 4
    count = rows * (rows - 1) / 2 * cols * (cols - 1) / 2
    return neighbours, total / math.sqrt(count)


@pytest.mark.parametrize("box", BOXES)
def test_the_corners_of_every_rectangle_are_independent(box):
    # (row and column words meeting with no element mix, h = b + c, give ~2·10⁵σ over every rectangle)
    neighbours, every = _corner_products(_draw("tok_embeddings.weight", 0, *BOXES[box]))
    assert abs(neighbours) < 5 and abs(every) < 5, (neighbours, every)

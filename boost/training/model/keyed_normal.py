"""Counter-based normals: each value a pure function of ``(key, row, col)``, drawn on any device.

A value depends on nothing but its key and its two coordinates, so any box of a matrix can be drawn
alone, in any chunks, on any device, and agree with the whole:

    column word   c_j = mix(mix(j ^ k0) ^ k1)      over the box's columns (a vector)
    row word      b_i = mix(mix(i ^ k2) ^ k3)      over the box's rows (a vector)
    element       h_ij = mix(b_i + c_j mod 2^32)   32 random bits, one mix an element
    uniform       x = (2·(h >> 8) + 1) / 2^24 - 1  odd multiples of 2^-24 in (-1, 1), exact in float32
    normal        √2 · erfinv(x)                   |z| ≤ 5.4   (or √3 · x: unit variance, uniform)

``mix`` is lowbias32 (C. Wellons' 32-bit integer hash: xorshift-multiply, bias 0.17). Row and
column words meet by a sum, so the inputs at the four corners of any rectangle are related
(``x_ij − x_ij' − x_i'j + x_i'j' = 0 mod 2^32``), and the element's own mix is what hides it: the
product of a rectangle's four values averages zero over neighbouring and over all rectangles, to 2^17
rows (without that mix it is ~2·10⁵σ off). A xor in the sum's place measures the same (2×2 blocks'
corner product over 3.4·10⁹ blocks, 800 keys at 4096²: 0.75σ).

Everything up to the uniform is integer arithmetic, the same bits on every device; the normal
differs between devices only by the rounding of their float32 ``erfinv``. Integers live in int64
below 2^32 and every product stays below 2^63 (a multiplier ≥ 2^31 is applied as its negative twin
mod 2^32), so no operation relies on overflow. The work runs in chunks of ``CHUNK`` elements through
three reused buffers: a 30B embedding shard needs no temporary of its size.
"""

from __future__ import annotations

import hashlib
import math

import torch

# Elements a chunk: its buffers (20 bytes an element, 5 MiB) stay in a CPU's cache, which halves the
# CPU time against 2^20 (measured); a GPU still gets kernels of 2^18 elements, ~40k launches for a 1B.
# (Each op is also one intra-op barrier of a CPU's threads: costly where the cores are oversubscribed.)
CHUNK = 1 << 18

MASK32 = 0xFFFFFFFF
_M1 = 0x7FEB352D  # lowbias32's multipliers; the second (0x846CA68B ≥ 2^31) as its negative twin mod 2^32
_M2 = 0x846CA68B - (1 << 32)


def key_words(name: str, seed: int) -> tuple[int, int, int, int]:
    """The four 32-bit key words of a named matrix under ``seed``: 128 bits of blake2b."""
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


def mix32_(x: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """lowbias32 of every element of ``x`` (int64 in ``[0, 2^32)``), in place; ``scratch`` is
    ``x``'s shape and is overwritten."""
    torch.bitwise_right_shift(x, 16, out=scratch)
    x.bitwise_xor_(scratch).mul_(_M1).bitwise_and_(MASK32)
    torch.bitwise_right_shift(x, 15, out=scratch)
    x.bitwise_xor_(scratch).mul_(_M2).bitwise_and_(MASK32)
    torch.bitwise_right_shift(x, 16, out=scratch)
    return x.bitwise_xor_(scratch)


def _coordinate_words(index: range, k: int, k_next: int, device: torch.device) -> torch.Tensor:
    if index.stop > 1 << 32:
        raise ValueError(f"keyed normal: coordinate {index.stop - 1} does not fit 32 bits")
    x = torch.arange(index.start, index.stop, dtype=torch.int64, device=device).bitwise_xor_(k)
    scratch = torch.empty_like(x)
    return mix32_(mix32_(x, scratch).bitwise_xor_(k_next), scratch)


@torch.no_grad()
def fill_keyed_normal(
    out: torch.Tensor,
    key: tuple[int, int, int, int],
    rows: range,
    cols: range,
    std: float,
    uniform: bool = False,
) -> None:
    """``out[i, j] = std · z(key, rows[i], cols[j])``: ``out`` a 2-D ``[len(rows), len(cols)]`` view of any
    dtype, layout and device; the values are drawn on ``out``'s device. ``uniform``: the element's
    uniform instead of its normal, scaled to the same ``std`` (``U(-√3·std, √3·std)``: Kaiming-uniform
    initialisations), one float32 multiply of an exact uniform, so the same bits on every device."""
    if tuple(out.shape) != (len(rows), len(cols)):
        raise ValueError(f"keyed normal: out {tuple(out.shape)} is not rows × cols {len(rows)} × {len(cols)}")
    if out.numel() == 0:
        return
    device = out.device
    col_words = _coordinate_words(cols, key[0], key[1], device)
    row_words = _coordinate_words(rows, key[2], key[3], device).unsqueeze(1)
    width = min(len(cols), CHUNK)
    height = max(1, CHUNK // width)
    size = min(height, len(rows)) * width
    h = torch.empty(size, dtype=torch.int64, device=device)
    scratch = torch.empty_like(h)
    x = torch.empty(size, dtype=torch.float32, device=device)
    offset = torch.full((), 2.0**-24 - 1.0, dtype=torch.float32, device=device)
    # √2 · std (√3 · std for the uniform) rounds once to float32 (the multiply runs in float32 everywhere)
    scale = (math.sqrt(3.0) if uniform else math.sqrt(2.0)) * std
    for i0 in range(0, len(rows), height):
        i1 = min(i0 + height, len(rows))
        for j0 in range(0, len(cols), width):
            j1 = min(j0 + width, len(cols))
            shape = (i1 - i0, j1 - j0)
            n = shape[0] * shape[1]
            hv, sv, xv = h[:n].view(shape), scratch[:n].view(shape), x[:n].view(shape)
            torch.add(row_words[i0:i1], col_words[j0:j1], out=hv).bitwise_and_(MASK32)
            mix32_(hv, sv)
            # (2·(h >> 8) + 1) / 2^24 - 1 = (h >> 8) / 2^23 + (2^-24 - 1): every step exact in float32
            xv.copy_(torch.bitwise_right_shift(hv, 8, out=sv))
            torch.add(offset, xv, alpha=2.0**-23, out=xv)
            if not uniform:
                xv.erfinv_()
            torch.mul(xv, scale, out=out[i0:i1, j0:j1])

"""Closed-form tensor-parallel communication per transformer layer, per direction.

Counts and sizes are per rank and count each collective at its full (un-sharded) payload, the
convention of ``boost.CommCounter``; the tests check these formulas against the counter.
``tokens`` is b·s. For ``btp`` the norm statistics (one value per token per pre-norm) are listed
separately from the 7·r latent columns.

Example::

    >>> from boost.training.model import ModelArgs
    >>> args = ModelArgs.from_flavor("7B", linear="cola")
    >>> fwd = per_layer(args, "btp", tokens=4 * 4096)["forward"]
    >>> fwd["all_reduce"]
    (4, 117473280)
"""

from __future__ import annotations

from boost.training.model.args import lax_gate_params
from boost.training.rules import ATTENTION_KINDS, KINDS, SCHEMES, context_parallel_path

Volume = dict[str, tuple[int, int]]  # collective kind -> (count, elements)
# torch's ring attention accumulates and rotates dK|dV in float32 whatever the compute dtype (its
# _cp_options.convert_to_f32, on by default: _templated_ring_attention_backward)
RING_GRADIENT_BYTES = 4
# one entry per collective: (kind, columns per token) or (kind, columns per token, elements besides)
Collectives = list[tuple]


def _bottleneck(args, norm: str, sequence_parallel: bool) -> tuple[Collectives, Collectives]:
    """btp: one all-reduce of each r-wide latent each way, and the pre-norms' statistics of the sharded
    residual (one column per token). Under sequence parallelism each of the latents' all-reduces is a
    reduce-scatter and an all-gather of the same columns (forward: scatter then gather; backward: the
    up-projection's gradient scattered, the down-projection's gathered), and LaX's crossings, which then
    see a rank's tokens only, all-reduce their norm's and gate's gradients, one collective a bottleneck."""
    r = args.rank
    readers = [3 * r, 2 * r] if args.grouped else [r] * 5  # the q/k/v and gate/up down-projections
    online = norm == "online" and args.grouped  # the statistic rides in its reader's collective: one column
    downs = [width + 1 if online else width for width in readers] + [r, r]  # + o, down
    ups = [*readers, r, r]
    # each pre-norm's statistic not carried by a reader: Σx² forward, Σ dy·γ·x backward
    stats = [] if online or norm not in ("online", "sync") else [("all_reduce", 1)] * 2
    if not sequence_parallel:
        return [("all_reduce", w) for w in downs] + stats, [("all_reduce", w) for w in ups] + stats
    forward = [("reduce_scatter", w) for w in downs] + [("all_gather", w) for w in ups] + stats
    backward = [("reduce_scatter", w) for w in ups] + [("all_gather", w) for w in downs] + stats
    if KINDS[args.linear].latent_crossing:
        members = [3, 2] if args.grouped else [1] * 5
        per_member = r * 2 + lax_gate_params(r, args.lax_gate)
        backward += [("all_reduce", 0, m * per_member) for m in [*members, 1, 1]]
    return forward, backward


def _rank_sharded(args, norm: str, sequence_parallel: bool) -> tuple[Collectives, Collectives]:
    """vanilla: every B's partial output all-reduced at full width going forward; coming back, the input
    gradient of each column-parallel A (attention's, o's, the MLP's and down's inputs). LaX adds an
    r-wide all-gather per bottleneck each way (its norm and gate read the whole latent)."""
    d, f = args.dim, args.ffn_dim
    kv = args.kv_heads * args.head_dim
    b_outputs, a_inputs = (d, kv, kv, d, f, f, d), (d, d, d, f)
    forward, backward = [("all_reduce", w) for w in b_outputs], [("all_reduce", w) for w in a_inputs]
    if KINDS[args.linear].latent_crossing:
        # LaX's norm and gate read the whole latent: each of the 7 is gathered going forward (r/t -> r), and
        # coming back the up-projection's r/t input-gradient is gathered into the whole latent's
        # (``boost.training.parallel.tp_plans.rank_sharded_crossing_plan``; every block, the first too)
        forward += [("all_gather", args.rank)] * 7
        backward += [("all_gather", args.rank)] * 7
    return forward, backward


def _dense(args, norm: str, sequence_parallel: bool) -> tuple[Collectives, Collectives]:
    """megatron: attention's and the MLP's outputs all-reduced each way; under sequence parallel each
    all-reduce is a reduce-scatter and an all-gather (the block's two inputs), the other way round back."""
    d = args.dim
    if sequence_parallel:
        there = [("all_gather", d)] * 2 + [("reduce_scatter", d)] * 2
        return there, [("reduce_scatter", d)] * 2 + [("all_gather", d)] * 2
    return [("all_reduce", d)] * 2, [("all_reduce", d)] * 2


# the collectives of one layer, forward and backward, of each scheme (``boost.training.rules.SCHEMES``)
COLLECTIVES = {"btp": _bottleneck, "vanilla": _rank_sharded, "megatron": _dense}


def _tally(collectives: Collectives, tokens: int) -> Volume:
    volume: Volume = {}
    for kind, width, *besides in collectives:
        count, elements = volume.get(kind, (0, 0))
        volume[kind] = (count + 1, elements + width * tokens + sum(besides))
    return volume


def per_layer(
    args, scheme: str, tokens: int, norm: str = "online", sequence_parallel: bool = False
) -> dict[str, Volume]:
    """``{"forward": {kind: (count, elements)}, "backward": {...}}`` for one transformer layer."""
    if scheme not in COLLECTIVES:
        raise ValueError(f"unknown tp scheme {scheme!r}")
    forward, backward = COLLECTIVES[scheme](args, norm, sequence_parallel)
    return {"forward": _tally(forward, tokens), "backward": _tally(backward, tokens)}


def attention_kv_width(args, scheme: str, tp: int, attn_type: str = "sdpa") -> int:
    """The width of the keys (and of the values) a rank's attention kernel reads, per token: the rank's KV
    heads where the kernel takes GQA as it is (FlexAttention), else its query heads (SDPA and varlen read
    keys repeated to them, ``boost.training.model.attention.attend``)."""
    heads = args.kv_heads if ATTENTION_KINDS[attn_type].gqa else args.n_heads
    return SCHEMES[scheme].local(heads, tp) * args.head_dim


def context_parallel_layer(
    args,
    scheme: str,
    tp: int,
    micro_batch: int,
    seq_len: int,
    cp: int,
    attn_type: str = "sdpa",
    mask_type: str = "causal",
    rotate: str = "allgather",
    dtype_bytes: int | None = None,
) -> dict[str, Volume]:
    """``{"forward": ..., "backward": ...}``: one layer's context-parallel collectives on one rank (the
    attention's; every other collective of a block is per token, ``per_layer`` at ``b·s/cp`` tokens).

    ``K|V`` below is a rank's keys and values, ``2·b·(s/cp)·kv`` elements (``kv``: ``attention_kv_width``):

    =============================  =======================================  ===============================
    path (``context_parallel_path``) forward                                  backward
    =============================  =======================================  ===============================
    ring, rotate ``allgather``     1 all-gather of K|V (``cp·|K|V|``)       the same all-gather again; ``cp``
                                                                            all-to-alls of dK|dV (``|K|V|``
                                                                            each, float32 accumulators)
    ring, rotate ``alltoall``      ``cp - 1`` all-to-alls of K|V            ``cp - 1`` of K|V, ``cp`` of dK|dV
    all_gather (masks, flex)       2 all-gathers (K, V: ``b·s·kv`` each)    2 reduce-scatters (dK, dV)
    =============================  =======================================  ===============================

    Elements as ``per_layer`` counts them (each collective at its full payload: a gather's output, a
    reduce-scatter's input, an all-to-all's input); with ``dtype_bytes`` (the compute dtype's) their bytes
    instead, the ring's dK|dV at ``RING_GRADIENT_BYTES``.

    Example::

        >>> from boost.training.model import ModelArgs
        >>> args = ModelArgs.from_flavor("7B", linear="cola")
        >>> context_parallel_layer(args, "btp", tp=4, micro_batch=1, seq_len=32768, cp=4)["forward"]
        {'all_gather': (1, 67108864)}
        >>> in_bytes = context_parallel_layer(args, "btp", 4, 1, 32768, cp=4, dtype_bytes=2)
        >>> in_bytes["backward"]  # the all-gather's bf16 K|V, the ring's float32 dK|dV
        {'all_gather': (1, 134217728), 'all_to_all': (4, 268435456)}
    """
    if cp == 1:
        return {"forward": {}, "backward": {}}
    window = 2 * micro_batch * seq_len * attention_kv_width(args, scheme, tp, attn_type)  # its K|V
    kv, dkv = (dtype_bytes, RING_GRADIENT_BYTES) if dtype_bytes else (1, 1)  # what an element counts
    full, shard = window * kv, window // cp * kv
    if context_parallel_path(attn_type, mask_type) == "all_gather":
        return {"forward": {"all_gather": (2, full)}, "backward": {"reduce_scatter": (2, full)}}
    gradients = cp * (window // cp) * dkv  # cp rotations of a rank's dK|dV
    if rotate == "allgather":
        return {
            "forward": {"all_gather": (1, full)},
            "backward": {"all_gather": (1, full), "all_to_all": (cp, gradients)},
        }
    return {
        "forward": {"all_to_all": (cp - 1, (cp - 1) * shard)},
        "backward": {"all_to_all": (2 * cp - 1, (cp - 1) * shard + gradients)},
    }


def total(volume: Volume) -> tuple[int, int]:
    """``(count, elements)`` summed over collective kinds."""
    return sum(c for c, _ in volume.values()), sum(e for _, e in volume.values())


def loro_exact_step(args, scheme: str) -> Volume:
    """The collectives of one LORO exact step (``boost.training.optim.loro_exact``) for one layer, per rank, at a
    TP degree > 1 (``args.grouped`` says which bottlenecks share a down-projection).

    A scheme that keeps the factors' rows sharded (btp: ``A`` on ``d_in``, ``B`` on ``d_out``) sums
    ``r × r`` products over the rows: 7 rounds per bottleneck (3 QR passes of the factors, the tangent
    cross products, 3 QR passes of the tangent blocks), each one all-reduce, of two Gram triangles
    ``r(r+1)/2`` per projection (the QR rounds) or two ``r²`` cross products: ``8r² + 6r`` per projection.
    A scheme that shards the rank dim (vanilla) all-gathers each factor and its Adam direction once
    (``2·r·(d_in + d_out)`` per projection) and then computes on whole factors, with no all-reduce.
    The all-reduced sums are float64 (the exact step's precision); the gathered factors are the
    parameters' dtype. Elements, as ``per_layer``.

    Example::

        >>> import dataclasses
        >>> from boost.training.model import ModelArgs
        >>> args = ModelArgs.from_flavor("7B", linear="svd")
        >>> loro_exact_step(args, "btp")  # 7·(8r² + 6r) elements, r = 1024
        {'all_reduce': (28, 58763264)}
        >>> loro_exact_step(dataclasses.replace(args, group_linears=False), "vanilla")
        {'all_gather': (28, 159907840)}
    """
    if not SCHEMES[scheme].low_rank:
        raise ValueError(f"LORO runs on low-rank kinds; {scheme} is the dense baseline")
    r, d, f = args.rank, args.dim, args.ffn_dim
    kv = args.kv_heads * args.head_dim
    shapes = {
        "q": (d, d),
        "k": (d, kv),
        "v": (d, kv),
        "o": (d, d),
        "gate": (d, f),
        "up": (d, f),
        "down": (f, d),
    }
    names = [["q", "k", "v"], ["o"], ["gate", "up"], ["down"]] if args.grouped else [[n] for n in shapes]
    volume: Volume = {}
    for bottleneck in names:
        if SCHEMES[scheme].shards_rank:
            elements = sum(2 * r * (shapes[n][0] + shapes[n][1]) for n in bottleneck)
            count, total_elements = volume.get("all_gather", (0, 0))
            volume["all_gather"] = (count + 4, total_elements + elements)
        else:
            count, total_elements = volume.get("all_reduce", (0, 0))
            volume["all_reduce"] = (count + 7, total_elements + (8 * r * r + 6 * r) * len(bottleneck))
    return volume

"""The attention kernels (``boost.attn_type``) and masks, what each composes with, and context parallelism:
how a window splits over the ``cp`` ranks and how their queries reach the other ranks' keys.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionKind:
    """An attention kernel as torchtitan's LLaMA names it (``attn_type``; BOOST's ``boost.attn_type``), and
    what it composes with. Which device trains it is torch's to say (``torchtitan_ext.infra.attention``
    asks torch, on the device); these are the rules that hold on every device."""

    name: str
    masks: tuple[str, ...]
    """The ``attn_mask_type`` values it computes: causal, and block_causal (a token attends only within its
    own document of a packed window)."""
    context_parallel: bool
    """It runs with the sequence sharded over a ``cp`` mesh dim (torch's ring SDPA, FlexAttention with
    all-gathered keys and values); torchtitan has no context-parallel varlen."""
    pipelines: bool
    """Its masks split into pipeline micro-batches along the batch dim (a ``[b, ...]`` tensor, a
    ``BlockMask``); varlen's cumulative document offsets run over the whole local batch."""
    gqa: bool
    """It reads keys and values at their own head count (GQA, FlexAttention's ``enable_gqa``); else they are
    repeated to the query heads first (what context parallelism then moves, ``boost.planning.comm_volume``)."""
    counts_collectives: bool = True
    """It runs under the Python dispatch mode that counts a step's collectives (``boost.log_comm``).
    FlexAttention's kernel is ``torch.compile``d where it is called, and torch refuses to compile under such
    a mode (on the H100, the 1B flex row stopped at the counted step: no rule for the ``flex_attention``
    operator, and with one, "non-infra torch dispatch mode present")."""


MASK_TYPES = ("causal", "block_causal")
"""causal (every window one sequence); block_causal (each document of a packed window attends only within
itself: its boundaries are the tokenizer's EOS, the token after one opens the next document)."""

ATTENTION_KINDS: dict[str, AttentionKind] = {
    kind.name: kind
    for kind in (
        # SDPA: causal through is_causal (flash kernels, torch's ring under CP); block_causal through a
        # boolean [b, 1, s, s] mask (BOOST's: torchtitan's SDPA ignores the mask type)
        AttentionKind("sdpa", masks=MASK_TYPES, context_parallel=True, pipelines=True, gqa=False),
        AttentionKind(
            "flex",
            masks=MASK_TYPES,
            context_parallel=True,
            pipelines=True,
            gqa=True,
            counts_collectives=False,
        ),
        # torch's varlen_attn over the packed documents: block_causal only, as torchtitan's
        AttentionKind("varlen", masks=("block_causal",), context_parallel=False, pipelines=False, gqa=False),
    )
}

ATTENTION_TYPES = tuple(ATTENTION_KINDS)


def attention_kind(name: str) -> AttentionKind:
    """The kind called ``name``; ``ValueError`` naming the choices otherwise."""
    if name not in ATTENTION_KINDS:
        raise ValueError(f"boost.attn_type = {name!r} is unknown; choose one of {ATTENTION_TYPES}")
    return ATTENTION_KINDS[name]


def context_parallel_path(attn_type: str, mask_type: str) -> str:
    """How a rank's queries reach the other ranks' keys under CP: ``"ring"`` (torch's ring attention, SDPA's
    causal kernel passing keys and values on) or ``"all_gather"`` (all of them gathered first: a mask, which
    torch's ring takes none of, or FlexAttention, whose CP torch builds so).

    Example::

        >>> context_parallel_path("sdpa", "causal"), context_parallel_path("sdpa", "block_causal")
        ('ring', 'all_gather')
    """
    return "ring" if attn_type == "sdpa" and mask_type == "causal" else "all_gather"


def comm_count_problem(attn_type: str, log_comm: bool) -> str | None:
    """The step's collectives are counted (``boost.log_comm``) only around kernels that run under the counter.

    Example::

        >>> comm_count_problem("flex", log_comm=True)[:43]
        "FlexAttention's kernel is compiled where it"
    """
    if not log_comm or ATTENTION_KINDS[attn_type].counts_collectives:
        return None
    return (
        "FlexAttention's kernel is compiled where it is called, which torch refuses under the dispatch mode "
        'that counts a step\'s collectives: pass --boost.no-log-comm (or boost.attn_type = "sdpa")'
    )


def attention_mask_problem(attn_type: str, mask_type: str) -> str | None:
    """The mask type is one the attention kernel computes.

    Example::

        >>> attention_mask_problem("varlen", "causal")
        'varlen attends within each document of a packed window: use "block_causal", or boost.attn_type = "sdpa"'
    """
    if mask_type not in MASK_TYPES:
        return f"choose one of {MASK_TYPES}"
    kind = ATTENTION_KINDS[attn_type]
    if mask_type in kind.masks:
        return None
    offers = next(k.name for k in ATTENTION_KINDS.values() if mask_type in k.masks)
    return (
        f'{attn_type} attends within each document of a packed window: use "{kind.masks[0]}", '
        f'or boost.attn_type = "{offers}"'
    )


def attention_layout_problem(attn_type: str, cp: int, pp: int) -> str | None:
    """The attention kernel composes with the layout's context and pipeline parallelism."""
    kind = ATTENTION_KINDS[attn_type]
    others = " or ".join(
        f'"{k.name}"' for k in ATTENTION_KINDS.values() if k.context_parallel and k.pipelines
    )
    if cp > 1 and not kind.context_parallel:
        return f"{attn_type} has no context-parallel path (torch's nor torchtitan's): use {others}"
    if pp > 1 and not kind.pipelines:
        return (
            f"{attn_type}'s document offsets run over the whole local batch, which a pipeline splits into "
            f"micro-batches: use {others}"
        )
    return None


CP_LOAD_BALANCERS = ("headtail", "ptrr", None)
"""torchtitan's ``parallelism.context_parallel_load_balancer``: headtail (rank ``i`` holds chunks ``i`` and
``2·cp - 1 - i`` of a window, an equal share of the causal triangle), ptrr (FlexAttention's, read from its
block mask), None (contiguous chunks)."""

FLEX_BLOCK = 128
"""FlexAttention's block of queries and keys (torch's default sparse block size): its context-parallel mask
shards whole blocks."""


def context_parallel_problem(
    cp: int, seq_len: int, attn_type: str, load_balancer: str | None, tp: int, sequence_parallel: bool
) -> str | None:
    """What a window of ``seq_len`` tokens needs to split over ``cp`` ranks: equal shares (two chunks each
    under a load balancer), each split again over TP under sequence parallelism; whole flex blocks.

    Example::

        >>> context_parallel_problem(4, 100, "sdpa", "headtail", tp=1, sequence_parallel=False)
        'must be divisible by 8 (cp 4 × 2 chunks a rank under the headtail balancer)'
    """
    if cp == 1:
        return None
    parts, why = cp, [f"cp {cp}"]
    if load_balancer is not None:
        parts, why = parts * 2, [*why, f"2 chunks a rank under the {load_balancer} balancer"]
    if sequence_parallel and tp > 1:
        parts, why = parts * tp, [*why, f"tp {tp} of the sequence parallelism"]
    if seq_len % parts:
        return f"must be divisible by {parts} ({' × '.join(why)})"
    if attn_type == "flex" and seq_len % (cp * FLEX_BLOCK):
        return f"must be divisible by cp × {FLEX_BLOCK} = {cp * FLEX_BLOCK}: FlexAttention's CP mask shards blocks"
    return None


def load_balancer_problem(load_balancer: str | None, attn_type: str, cp: int) -> str | None:
    """torchtitan's balancers: ptrr reads FlexAttention's block mask (torchtitan's ``cp_shard`` refuses it
    without one)."""
    if load_balancer not in CP_LOAD_BALANCERS:
        return f"choose one of {CP_LOAD_BALANCERS}"
    if cp > 1 and load_balancer == "ptrr" and attn_type != "flex":
        return 'ptrr balances by a FlexAttention block mask: use "headtail" (or None), or boost.attn_type = "flex"'
    return None

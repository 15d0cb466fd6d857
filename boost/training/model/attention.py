"""Attention of the BOOST decoder, for one device: the kernels torchtitan's LLaMA offers (``attn_type``: SDPA,
FlexAttention, varlen) and the masks of a packed window (``attn_mask_type``: causal, block_causal).

A training window packs documents, each framed ``[BOS] ids [EOS]`` by every BOOST dataset (the ``tokens``
folders and the text datasets alike). Under ``block_causal`` a token attends only to the earlier tokens of
its own document (torchtitan's document mask: the token after an EOS opens the next document), so a
window's loss is the sum of its documents' losses, each computed alone; RoPE is relative, so a document
scores the same wherever the window places it (``tests/unit/test_attention.py``, float64).

    attn_type  attn_mask_type  attention_masks (built once a batch, ``KERNELS[t].masks``)
    sdpa       causal          None: SDPA's ``is_causal``
    sdpa       block_causal    ``[b, 1, s, s]`` bool, True where a query may attend (SDPA's ``attn_mask``)
    flex       either          a ``BlockMask``: causal, and the same document under block_causal
    varlen     block_causal    ``VarlenMetadata``: the documents' offsets in the flattened batch

Each kernel is a module, ``Attention.inner_attention``, taking ``(q, k, v)`` first as
``(bs, n_heads, seqlen, head_dim)`` and the mask by keyword: the form torch's context-parallel style
wraps (torchtitan's ``apply_cp_to_attention_module``). Keys and values may have fewer heads (GQA).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, and_masks, create_block_mask, flex_attention

from boost.training.rules import ATTENTION_KINDS, attention_kind, attention_mask_problem


def document_ids(tokens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """``[b, s]`` token ids -> ``[b, s]`` the document of each position within its window: the count of
    EOS tokens before it (an EOS ends its document; the token after it opens the next).

    Example::

        >>> document_ids(torch.tensor([[5, 1, 2, 9, 5, 3, 9, 5]]), eos_id=9).tolist()
        [[0, 0, 0, 0, 1, 1, 1, 2]]
    """
    ends = (tokens == eos_id).to(torch.int32)
    return torch.cumsum(ends, dim=1, dtype=torch.int32) - ends


def block_causal_mask(tokens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """``[b, 1, s, s]`` bool: query ``i`` may attend key ``j`` where ``j ≤ i`` in the same document."""
    doc = document_ids(tokens, eos_id)
    s = tokens.shape[1]
    causal = torch.ones(s, s, dtype=torch.bool, device=tokens.device).tril()
    return (doc[:, None, :, None] == doc[:, None, None, :]) & causal


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _same_document(doc: torch.Tensor):
    def same_document(b, h, q_idx, kv_idx):
        return doc[b, q_idx] == doc[b, kv_idx]

    return same_document


class VarlenMetadata(NamedTuple):
    """The documents of a flattened ``[b·s]`` batch for ``varlen_attn`` (torchtitan's record, its field names)."""

    cu_seq_q: torch.Tensor
    cu_seq_k: torch.Tensor
    max_q: int
    max_k: int


class ScaledDotProductAttention(nn.Module):
    """``attn_type = "sdpa"``: torch's ``scaled_dot_product_attention``, causal by ``is_causal`` or masked
    by a boolean ``[b, 1, s, s]`` (block_causal: BOOST's; torchtitan's SDPA ignores the mask type)."""

    takes_gqa: ClassVar[bool] = ATTENTION_KINDS["sdpa"].gqa  # keys and values repeated to the query heads

    @staticmethod
    def masks(tokens: torch.Tensor, mask_type: str, eos_id: int, **_) -> torch.Tensor | None:
        return None if mask_type == "causal" else block_causal_mask(tokens, eos_id)

    def forward(self, q, k, v, *, attention_masks: torch.Tensor | None = None) -> torch.Tensor:
        # (bs, n_heads, seqlen, head_dim); k/v may be longer than q (cached past positions): the queries
        # are then the last ones.
        if attention_masks is not None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_masks)
        q_len, k_len = q.shape[2], k.shape[2]
        mask, causal = None, q_len == k_len
        if 1 < q_len < k_len:
            # SDPA's is_causal aligns the triangle top-left; queries after a cached past need it bottom-right.
            mask = torch.ones(q_len, k_len, dtype=torch.bool, device=q.device).tril(k_len - q_len)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


class FlexAttention(nn.Module):
    """``attn_type = "flex"``: torch's FlexAttention over a ``BlockMask``. ``kernel`` is torch's
    ``flex_attention``: fused where the block is compiled; a trainer running eager blocks sets it to a
    compiled one, as torchtitan's ``FlexAttentionWrapper`` holds it (``torchtitan_ext.infra.attention``)."""

    kernel: ClassVar[Callable] = staticmethod(flex_attention)
    takes_gqa: ClassVar[bool] = ATTENTION_KINDS["flex"].gqa  # fewer key/value heads, as they are (enable_gqa)

    @staticmethod
    def masks(
        tokens: torch.Tensor, mask_type: str, eos_id: int, block_mask_fn: Callable = create_block_mask
    ) -> BlockMask:
        b, s = tokens.shape
        if mask_type == "causal":
            return block_mask_fn(_causal, 1, None, s, s, device=tokens.device)
        mask_mod = and_masks(_causal, _same_document(document_ids(tokens, eos_id)))
        return block_mask_fn(mask_mod, b, None, s, s, device=tokens.device)

    def forward(self, q, k, v, *, attention_masks: BlockMask) -> torch.Tensor:
        if attention_masks is None:  # flex_attention without a block mask attends every key, the future's too
            raise ValueError(
                "attn_type = 'flex' needs its BlockMask (FlexAttention.masks, or the model's "
                "get_attention_masks): without one every token would attend the future; the after-training "
                "tools build attn_type = 'sdpa'"
            )
        gqa = q.shape[1] != k.shape[1]
        return type(self).kernel(q, k, v, block_mask=attention_masks, enable_gqa=gqa)


class VarlenAttention(nn.Module):
    """``attn_type = "varlen"``: torch's ``varlen_attn`` over the packed documents (block_causal only),
    called as torchtitan's ``VarlenAttentionWrapper`` calls it."""

    takes_gqa: ClassVar[bool] = ATTENTION_KINDS["varlen"].gqa

    @staticmethod
    def masks(tokens: torch.Tensor, mask_type: str, eos_id: int, **_) -> VarlenMetadata:
        ends = tokens == eos_id
        ends[:, -1] = True  # a window's end closes its last document: none crosses into the next row
        cu = torch.cat(
            [ends.new_zeros(1, dtype=torch.int32), ends.flatten().nonzero()[:, 0].to(torch.int32) + 1]
        )
        longest = int(torch.diff(cu).max())  # one host sync a batch, as torchtitan's
        return VarlenMetadata(cu, cu, longest, longest)

    def forward(self, q, k, v, *, attention_masks: VarlenMetadata) -> torch.Tensor:
        from torch.nn.attention.varlen import varlen_attn

        if attention_masks is None:  # the documents' offsets are what the kernel runs on
            raise ValueError(
                "attn_type = 'varlen' needs its documents' offsets (VarlenAttention.masks, or the model's "
                "get_attention_masks); the after-training tools build attn_type = 'sdpa'"
            )

        b, _, s, _ = q.shape
        packed = [t.transpose(1, 2).flatten(0, 1) for t in (q, k, v)]  # (bs * seqlen, n_heads, head_dim)
        m = attention_masks
        # window_size (-1, 0): every earlier position of the document and none after (is_causal)
        out = varlen_attn(*packed, m.cu_seq_q, m.cu_seq_k, m.max_q, m.max_k, window_size=(-1, 0))
        return out.unflatten(0, (b, s)).transpose(1, 2)


KERNELS: dict[str, type[nn.Module]] = {
    "sdpa": ScaledDotProductAttention,
    "flex": FlexAttention,
    "varlen": VarlenAttention,
}


def make_attention(attn_type: str, attn_mask_type: str) -> nn.Module:
    """The kernel module of ``attn_type``; ``ValueError`` naming the field for a kind or mask it lacks."""
    attention_kind(attn_type)
    problem = attention_mask_problem(attn_type, attn_mask_type)
    if problem is not None:
        raise ValueError(f"boost.attn_mask_type = {attn_mask_type!r}: {problem}")
    return KERNELS[attn_type]()


def attend(inner: nn.Module, q, k, v, attention_masks=None) -> torch.Tensor:
    """``inner`` (a ``KERNELS`` module) on ``(bs, seqlen, n_local_heads, head_dim)`` queries, keys and values;
    ``(bs, seqlen, n_local_heads * head_dim)`` out. Keys and values are repeated to the query heads for the
    kernels that take no fewer (GQA), before the kernel's module: under context parallelism its inputs
    are the sequence's shards."""
    n_rep = q.shape[2] // k.shape[2]
    if n_rep > 1 and not inner.takes_gqa:
        k, v = k.repeat_interleave(n_rep, dim=2), v.repeat_interleave(n_rep, dim=2)
    out = inner(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attention_masks=attention_masks)
    return out.transpose(1, 2).flatten(2)

"""The BOOST decoder: LLaMA-style (pre-RMSNorm, RoPE, SwiGLU, GQA), written for one device.

Tensor-parallel plans in ``boost.training.parallel`` are applied to a built model; nothing here knows of
them. Views use ``-1`` for head counts because a plan may have sharded the heads.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from boost.training.model.args import ModelArgs
from boost.training.model.attention import attend, make_attention
from boost.training.model.kv_cache import KVCache
from boost.training.model.linears import RMSNorm, init_projection, make_grouped, make_projection
from boost.training.model.seeded_init import SeededPart, fill_seeded
from boost.training.rules import KINDS


def rope_cache(head_dim: int, seq_len: int, theta: float) -> torch.Tensor:
    """``[seq_len, head_dim // 2, 2]`` (cos, sin) for rotary embeddings on interleaved pairs
    (the Meta/torchtitan convention; ``boost.after_training.interop`` converts Hugging Face's half-split one)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), freqs)
    # float32, or float64 where that is the default dtype (a float64 model rotates with float64 angles)
    return torch.stack([angles.cos(), angles.sin()], dim=-1).to(
        torch.promote_types(torch.get_default_dtype(), torch.float32)
    )


def apply_rope(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    # x: (bs, seqlen, n_local_heads, head_dim); cache: the table from x's first position, or
    # (bs, seqlen, head_dim // 2, 2) the table at each token's own position
    seqlen = x.shape[1]
    pairs = x.unflatten(-1, (-1, 2))
    # rotated in the wider of x's and the table's dtype (float32 at least) and rounded once, as torchtitan does:
    # a bf16 rotation rounds the angles and each product (1.6x the error at head_dim 128, 4096 positions)
    wide = torch.promote_types(x.dtype, cache.dtype)
    cos, sin = cache[..., :seqlen, None, :, 0].to(wide), cache[..., :seqlen, None, :, 1].to(wide)
    even, odd = pairs[..., 0].to(wide), pairs[..., 1].to(wide)
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, crossing: bool = False):
        super().__init__()
        self.head_dim = args.head_dim
        self.inner_attention = make_attention(args.attn_type, args.attn_mask_type)  # the kernel, no weights
        q_dim, kv_dim = args.n_heads * args.head_dim, args.kv_heads * args.head_dim
        if args.grouped:
            outs = [("q", q_dim), ("k", kv_dim), ("v", kv_dim)]
            self.wqkv = make_grouped(args, args.dim, outs, RMSNorm(args.dim, args.norm_eps), crossing)
        else:
            self.wq = make_projection(args, args.dim, q_dim, "q", crossing=crossing)
            self.wk = make_projection(args, args.dim, kv_dim, "k", crossing=crossing)
            self.wv = make_projection(args, args.dim, kv_dim, "v", crossing=crossing)
        self.wo = make_projection(args, q_dim, args.dim, "o", crossing=crossing)

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor,
        carry: dict,
        cache: KVCache | None = None,
        layer_id: int = 0,
        attention_masks=None,
    ) -> torch.Tensor:
        # rope starts at this call's first position (the Transformer slices it past a cache).
        if hasattr(self, "wqkv"):
            q, k, v = _call(self.wqkv, x, carry, "qkv")
        else:
            q, k, v = (_call(m, x, carry, n) for m, n in ((self.wq, "q"), (self.wk, "k"), (self.wv, "v")))
        q = apply_rope(q.unflatten(-1, (-1, self.head_dim)), rope)
        k = apply_rope(k.unflatten(-1, (-1, self.head_dim)), rope)
        v = v.unflatten(-1, (-1, self.head_dim))
        if cache is not None:
            k, v = cache.append(layer_id, k, v)
        return _call(self.wo, attend(self.inner_attention, q, k, v, attention_masks), carry, "o")


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs, crossing: bool = False):
        super().__init__()
        # SwiGLU's SiLU is dropped only where gate's latent already went through σ (CoLA/LaX).
        self.gate_act = not (KINDS[args.linear].latent_activation and args.only_lr_act)
        if args.grouped:
            outs = [("gate", args.ffn_dim), ("up", args.ffn_dim)]
            self.w13 = make_grouped(args, args.dim, outs, RMSNorm(args.dim, args.norm_eps), crossing)
        else:
            self.w1 = make_projection(args, args.dim, args.ffn_dim, "gate", crossing=crossing)
            self.w3 = make_projection(args, args.dim, args.ffn_dim, "up", crossing=crossing)
        self.w2 = make_projection(args, args.ffn_dim, args.dim, "down", crossing=crossing)

    def forward(self, x: torch.Tensor, carry: dict) -> torch.Tensor:
        if hasattr(self, "w13"):
            gate, up = _call(self.w13, x, carry, "gate_up")
        else:
            gate, up = _call(self.w1, x, carry, "gate"), _call(self.w3, x, carry, "up")
        if self.gate_act:
            gate = F.silu(gate)
        return _call(self.w2, gate * up, carry, "down")


def _call(module: nn.Module, x: torch.Tensor, carry: dict, key: str):
    """Run a projection; for LaX bottlenecks, feed in and take out the crossing latent."""
    if not getattr(module, "returns_latent", False):
        return module(x)
    y, carry[key] = module(x, carry.get(key))
    return y


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        # LaX: every block but the first crosses the previous block's latents (block 0 has none to cross)
        self.attention = Attention(args, crossing=layer_id > 0)
        self.feed_forward = FeedForward(args, crossing=layer_id > 0)
        # With grouped down-projections the pre-norms live inside their only reader (wqkv / w13),
        # where a tensor-parallel plan can fuse the norm statistic into that reader's collective.
        self.attention_norm = None if args.grouped else RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = None if args.grouped else RMSNorm(args.dim, args.norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor,
        carry: dict | None = None,
        cache: KVCache | None = None,
        attention_masks=None,
    ):
        lax = carry is not None
        carry = dict(carry or {})
        # The cache goes by keyword: tensor-parallel plans prepare the positional inputs (x, rope, carry).
        h = x + self.attention(
            self.attention_norm(x) if self.attention_norm else x,
            rope,
            carry,
            cache=cache,
            layer_id=self.layer_id,
            attention_masks=attention_masks,
        )
        out = h + self.feed_forward(self.ffn_norm(h) if self.ffn_norm else h, carry)
        return (out, carry) if lax else out


class Transformer(nn.Module):
    """Token ids ``[b, s]`` -> logits ``[b, s, vocab]``.

    Built off the ``meta`` device, the weights are initialised at once from ``torch.initial_seed()``
    and each parameter's canonical name, so ``torch.manual_seed(k)`` before construction gives the
    same model on every process and for every parallel layout.

    Example::

        >>> _ = torch.manual_seed(0)
        >>> model = Transformer(ModelArgs.from_flavor("debug", linear="cola", vocab_size=512, n_layers=2))
        >>> model(torch.randint(0, 512, (2, 16))).shape
        torch.Size([2, 16, 512])
    """

    def __init__(self, model_args: ModelArgs):
        super().__init__()
        model_args.check()
        self.model_args = model_args
        self.tok_embeddings = nn.Embedding(model_args.vocab_size, model_args.dim)
        self.register_buffer(
            "rope",
            rope_cache(model_args.head_dim, model_args.max_seq_len, model_args.rope_theta),
            persistent=False,
        )
        # ModuleDict keyed by str(i): names survive pipeline-stage splitting.
        self.layers = nn.ModuleDict(
            {str(i): TransformerBlock(i, model_args) for i in range(model_args.n_layers)}
        )
        self.norm = RMSNorm(model_args.dim, model_args.norm_eps)
        self.output = nn.Linear(model_args.dim, model_args.vocab_size, bias=False)
        if model_args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        if self.tok_embeddings.weight.device.type != "meta":
            self.init_weights()

    @torch.no_grad()
    def init_weights(self, buffer_device: torch.device | None = None, seed: int | None = None) -> None:
        if seed is None:
            seed = torch.initial_seed() if self.model_args.init_seed is None else self.model_args.init_seed
        args = self.model_args
        device = buffer_device or (self.rope.device if self.rope.device.type != "meta" else None)
        device = device or next(p.device for p in self.parameters())
        self.rope = rope_cache(args.head_dim, args.max_seq_len, args.rope_theta).to(device)
        if self.tok_embeddings is not None:
            w = self.tok_embeddings.weight
            fill_seeded(w, SeededPart("tok_embeddings", tuple(w.shape), 1.0), seed)
        for layer in self.layers.values():
            prefix = f"layers.{layer.layer_id}."
            for sub in ("attention", "feed_forward"):
                for name, module in getattr(layer, sub).named_children():
                    if name != "inner_attention":  # the attention kernel holds no weights
                        init_projection(module, f"{prefix}{sub}.", name, seed)
            for norm in (layer.attention_norm, layer.ffn_norm):
                if norm is not None:
                    norm.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()
        if self.output is not None and not args.tie_embeddings:
            w = self.output.weight
            fill_seeded(w, SeededPart("output", tuple(w.shape), args.dim**-0.5), seed)

    def forward(
        self,
        tokens: torch.Tensor,
        *carried: torch.Tensor,
        cache: KVCache | None = None,
        attention_masks=None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Logits of ``tokens``; with a ``KVCache``, ``tokens`` continue the cached positions
        (incremental decoding: only the new positions are computed). ``attention_masks``: what the
        attention kernel takes (``boost.training.model.attention``; ``None`` for causal SDPA, which a
        ``block_causal`` model runs too: right for one document, as generation's, not for a packed window).
        ``positions`` ``[bs, seqlen]``: each token's position in its window, where the tokens are not
        the window in order (a context-parallel shard, torchtitan's ``positions``).

        A part of the model (a pipeline stage: the embedding or the head ``None``) takes and returns the
        residual stream instead; under LaX it also takes the latents the blocks before it carried
        (``carried``, in ``carry_keys`` order) and, where a later part holds a block, returns them after
        the residual stream: ``(h, *latents)``."""
        if cache is None and positions is None and tokens.shape[1] > self.rope.shape[0]:
            raise ValueError(
                f"{tokens.shape[1]} positions: past the model's max_seq_len = {self.rope.shape[0]} (its RoPE "
                "table); build the model with a larger max_seq_len"
            )
        # Pipeline stages may have dropped the embedding / head: pass through what arrives.
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        rope = self.rope if cache is None else self.rope[cache.begin(tokens.shape[1]) :]
        rope = rope if positions is None else self.rope[positions]
        # LaX's crossing latent is per position, so it runs on the new positions alone: no cache.
        lax = KINDS[self.model_args.linear].latent_crossing
        carry = dict(zip(carry_keys(self.model_args), carried, strict=True)) if lax and carried else {}
        for layer in self.layers.values():
            if not lax:
                h = layer(h, rope, cache=cache, attention_masks=attention_masks)
            else:
                h, carry = layer(h, rope, carry, cache=cache, attention_masks=attention_masks)
        if cache is not None:
            cache.end(tokens.shape[1])
        if lax and hands_carries_on((int(name) for name in self.layers), self.model_args.n_layers):
            return (h, *(carry[key] for key in carry_keys(self.model_args)))
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def hands_carries_on(layer_ids: Iterable[int], n_layers: int) -> bool:
    """Whether a part of a LaX model holding blocks ``layer_ids`` (their model-wide ids) returns its carries
    beside the residual stream: it holds a block, and a later part holds more. Not an embedding alone (no
    block has made them yet), nor a part ending at the last block (nothing after it reads them)."""
    held = list(layer_ids)
    return bool(held) and max(held) < n_layers - 1


def carry_keys(args: ModelArgs) -> tuple[str, ...]:
    """The latents a LaX block hands the next one, in the order a model part passes them on: one per
    bottleneck (grouped q/k/v and gate/up are one latent each)."""
    if args.grouped:
        return ("qkv", "o", "gate_up", "down")
    return ("q", "k", "v", "o", "gate", "up", "down")

"""BOOST low-rank LLaMA models for transformers: ``BoostForCausalLM``.

transformers' LLaMA with each of the seven block projections ``x -> W x`` replaced by a bottleneck

    svd   y = B (A x)
    cola  y = B σ(A x)                          σ = SiLU on the r-wide latent
    lax   y = B h,  h = σ(LN(A x + G(h_prev)))  h_prev = h of the same projection in the previous block
                                               (block 0: h = σ(A x)); LN over r, eps 1e-6; G the gate

with ``A = <proj>.down`` (``[r, d_in]``), ``B = <proj>.up`` (``[d_out, r]``) and LaX's norm and gate in
``<proj>.lax`` (the LaX authors' crossing: ``lax.gate_encoder`` ``[b, b]`` and ``lax.gate_decoder``
``[a, a]`` for the tensorized gate over r = a·b, ``lax.gate`` an ``nn.Linear(r, r)`` for the linear one).
CoLA/LaX with ``only_lr_act`` compute the MLP as ``down(gate(x) * up(x))`` (no full-width SiLU); svd keeps
SwiGLU. Everything else — attention, the KV cache, ``generate``, pipelines — is transformers' LLaMA code.

Numerics follow BOOST: the RoPE angles are computed in float64 and rounded once (transformers'
LLaMA multiplies positions by float32 frequencies), so the logits match BOOST's to float32 rounding.
q/k rows are stored in transformers' half-split RoPE order (BOOST's export permutes B's rows).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import LlamaForCausalLM

from .configuration_boost import BoostConfig


class CarriedLatents:
    """LaX's state during one forward: each block's latent h per projection, read by the next block.

    A plain object shared by every projection of the model (not a module: it holds no weights), keyed by
    ``(block, projection name)``. Keyed by block, not "the latest": activation checkpointing recomputes
    block i in backward after every later block ran, and the recompute must read block i-1's latent.
    ``BoostForCausalLM.forward`` empties it first; the crossing is per position, so a cached decoding
    step (only the new positions) gets the same latents as a full pass.
    """

    def __init__(self):
        self.latents: dict[tuple[int, str], torch.Tensor] = {}


class LaxCrossing(nn.Module):
    """``σ(LN(pre + G(h_prev)))``: LaX's crossing of one projection in a block after the first."""

    def __init__(self, rank: int, gate: str):
        super().__init__()
        self.norm = nn.LayerNorm(rank, eps=1e-6)
        self.gate_kind = gate
        a = math.isqrt(rank)
        while rank % a:
            a -= 1
        self.factors = (a, rank // a)  # the most balanced a·b = r, a ≤ b
        if gate == "tensorized":
            self.gate_encoder = nn.Parameter(torch.empty(rank // a, rank // a))
            self.gate_decoder = nn.Parameter(torch.empty(a, a))
        elif gate == "linear":
            self.gate = nn.Linear(rank, rank)

    def forward(self, pre: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        if self.gate_kind == "tensorized":
            a, b = self.factors
            carry = torch.einsum(
                "...cd,de,cf->...fe", previous.unflatten(-1, (a, b)), self.gate_encoder, self.gate_decoder
            )
            carry = carry.flatten(-2)
        elif self.gate_kind == "linear":
            carry = self.gate(previous)
        else:
            carry = previous
        return F.silu(self.norm(pre + carry).to(pre.dtype))  # autocast's float32 norm, rounded as BOOST does


class LowRankLinear(nn.Module):
    """``B h`` with ``down`` = A, ``up`` = B and ``h = σ(A x)`` (or ``A x``; LaX: ``lax`` crosses ``h_prev``)."""

    def __init__(
        self,
        d_in: int,
        d_out: int,
        rank: int,
        activation: bool,
        block: int,
        name: str,
        carried: CarriedLatents | None,
        lax_gate: str | None,
    ):
        super().__init__()
        self.down = nn.Linear(d_in, rank, bias=False)
        self.up = nn.Linear(rank, d_out, bias=False)
        self.act = nn.SiLU() if activation else nn.Identity()
        if lax_gate is not None:
            self.lax = LaxCrossing(rank, lax_gate)
        self.block, self.name, self._carried = block, name, carried

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.down(x)
        if hasattr(self, "lax"):
            # .to: a model split over devices (device_map) has the previous block elsewhere
            h = self.lax(pre, self._carried.latents[self.block - 1, self.name].to(pre.device))
        else:
            h = self.act(pre)
        if self._carried is not None:
            self._carried.latents[self.block, self.name] = h
        return self.up(h)


class Float64RotaryEmbedding(nn.Module):
    """``(cos, sin)`` of shape ``(bs, seqlen, head_dim)`` from float64 angles, as BOOST's RoPE table."""

    def __init__(self, config: BoostConfig):
        super().__init__()
        self.head_dim = config.head_dim
        rope = getattr(config, "rope_parameters", None) or {}
        self.theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        # Computed per call (not a buffer): casting the model to another dtype must not round the frequencies.
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float64, device=x.device) / self.head_dim
        inv_freq = 1.0 / (self.theta**exponents)
        angles = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().float().to(x.dtype), emb.sin().float().to(x.dtype)


PROJECTIONS = {
    "self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}


class BoostForCausalLM(LlamaForCausalLM):
    """transformers' ``LlamaForCausalLM`` with BOOST's low-rank projections (see the module docstring).

    Example::

        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> model = AutoModelForCausalLM.from_pretrained("exported_folder", trust_remote_code=True)
        >>> tok = AutoTokenizer.from_pretrained("exported_folder")
        >>> out = model.generate(**tok("def main(", return_tensors="pt"), max_new_tokens=20, do_sample=False)
    """

    config_class = BoostConfig
    config: BoostConfig
    _tp_plan = {}

    def __init__(self, config: BoostConfig):
        super().__init__(config)
        self.carried = CarriedLatents() if config.linear == "lax" else None
        activation = config.linear in ("cola", "lax")
        for i, layer in enumerate(self.model.layers):
            gate = config.lax_gate if config.linear == "lax" and i > 0 else None  # block 0 crosses nothing
            for part, names in PROJECTIONS.items():
                owner = getattr(layer, part)
                for name in names:
                    dense = getattr(owner, name)
                    setattr(owner, name, LowRankLinear(
                        dense.in_features, dense.out_features, config.rank, activation, i, name, self.carried, gate
                    ))  # fmt: skip
            if activation and config.only_lr_act:
                layer.mlp.act_fn = nn.Identity()  # the gate's latent already went through σ
        self.model.rotary_emb = Float64RotaryEmbedding(config)
        self.post_init()

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func=None, **kwargs):
        # LaX's latent goes from block to block outside the blocks' inputs. Reentrant checkpointing runs a
        # block's forward without autograd, so the carry's gradient would be lost without an error.
        keywords = getattr(gradient_checkpointing_func, "keywords", {})
        if enable and self.carried is not None and keywords.get("use_reentrant") is not False:
            raise ValueError(
                "a LaX model's blocks carry latents outside their inputs, which reentrant checkpointing "
                "cuts from the gradient: pass gradient_checkpointing_kwargs={'use_reentrant': False}"
            )
        if gradient_checkpointing_func is not None:
            kwargs["gradient_checkpointing_func"] = gradient_checkpointing_func
        super()._set_gradient_checkpointing(enable, **kwargs)

    def forward(self, *args, **kwargs):
        if self.carried is not None:
            self.carried.latents.clear()  # block 0 crosses nothing
        return super().forward(*args, **kwargs)


__all__ = ["BoostForCausalLM"]

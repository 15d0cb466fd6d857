"""BOOST low-rank LLaMA models for transformers: ``BoostForCausalLM``.

transformers' LLaMA with each of the seven block projections ``x -> W x`` replaced by a bottleneck

    svd   y = B (A x)
    cola  y = B σ(A x)                 σ = SiLU on the r-wide latent
    lax   y = B (σ(A x) + z_prev)      z_prev = σ(A x) of the same projection in the previous block

with ``A = <proj>.down`` (``[r, d_in]``) and ``B = <proj>.up`` (``[d_out, r]``). CoLA/LaX with
``only_lr_act`` compute the MLP as ``down(gate(x) * up(x))`` (no full-width SiLU); svd keeps SwiGLU.
Everything else — attention, the KV cache, ``generate``, pipelines — is transformers' LLaMA code.

Numerics follow BOOST: the RoPE angles are computed in float64 and rounded once (transformers'
LLaMA multiplies positions by float32 frequencies), so the logits match BOOST's to float32 rounding.
q/k rows are stored in transformers' half-split RoPE order (BOOST's export permutes B's rows).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.llama.modeling_llama import LlamaForCausalLM

from .configuration_boost import BoostConfig


class LatentCrossing:
    """LaX's state during one forward: the latest σ(A x) per projection name, read by the next block.

    A plain object shared by every projection of the model (not a module: it holds no weights).
    ``BoostForCausalLM.forward`` empties it first; the crossing is per position, so a cached decoding
    step (only the new positions) gets the same latents as a full pass.
    """

    def __init__(self):
        self.latents: dict[str, torch.Tensor] = {}

    def cross(self, name: str, z: torch.Tensor) -> torch.Tensor:
        previous = self.latents.get(name)
        self.latents[name] = z
        return z if previous is None else z + previous


class LowRankLinear(nn.Module):
    """``B (σ(A x) [+ z_prev])`` with ``down`` = A and ``up`` = B."""

    def __init__(
        self, d_in: int, d_out: int, rank: int, activation: bool, name: str, crossing: LatentCrossing | None
    ):
        super().__init__()
        self.down = nn.Linear(d_in, rank, bias=False)
        self.up = nn.Linear(rank, d_out, bias=False)
        self.act = nn.SiLU() if activation else nn.Identity()
        self.name, self._crossing = name, crossing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.act(self.down(x))
        if self._crossing is not None:
            z = self._crossing.cross(self.name, z)
        return self.up(z)


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
        self.crossing = LatentCrossing() if config.linear == "lax" else None
        activation = config.linear in ("cola", "lax")
        for layer in self.model.layers:
            for part, names in PROJECTIONS.items():
                owner = getattr(layer, part)
                for name in names:
                    dense = getattr(owner, name)
                    setattr(owner, name, LowRankLinear(
                        dense.in_features, dense.out_features, config.rank, activation, name, self.crossing
                    ))  # fmt: skip
            if activation and config.only_lr_act:
                layer.mlp.act_fn = nn.Identity()  # the gate's latent already went through σ
        self.model.rotary_emb = Float64RotaryEmbedding(config)
        self.post_init()

    def forward(self, *args, **kwargs):
        if self.crossing is not None:
            self.crossing.latents.clear()  # block 0 adds nothing
        return super().forward(*args, **kwargs)


__all__ = ["BoostForCausalLM"]

"""BOOST's attention kernels (``boost.attn_type``) as torchtitan runs its LLaMA's: whether this machine's torch
trains a kernel on its device, and FlexAttention compiled as torchtitan's ``FlexAttentionWrapper`` compiles it.

Which kernel trains on which device is torch's to say, and it changes with torch releases: torch 2.13
trains SDPA everywhere, FlexAttention where its backward is built (not on the CPU: its frontend refuses
inputs that need a gradient there), and ``varlen_attn`` where flash attention's varlen kernel is (CUDA).
So the preflight asks torch, on the device the ranks will use, with one tiny forward and backward
(``kernel_problem``), and refuses in one line where it fails: no rule here names a device.
"""

from __future__ import annotations

import functools
import warnings

import torch

from boost.training.model.attention import KERNELS, FlexAttention
from boost.training.rules import ATTENTION_KINDS


def probe_device() -> torch.device:
    """The device the ranks train on: the accelerator torch sees, else the CPU."""
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return accelerator or torch.device("cpu")


@functools.cache
def kernel_problem(attn_type: str, device: torch.device | None = None) -> str | None:
    """``None`` where torch trains ``attn_type`` on ``device`` (default: ``probe_device()``), else what to
    change: a forward and backward of a tiny causal batch through BOOST's own kernel module."""
    device = device or probe_device()
    kernel = KERNELS[attn_type]()
    s, heads, head_dim = 128, 2, 16
    # flash attention's varlen kernel computes in half precision; the others in any float
    dtype = torch.bfloat16 if attn_type == "varlen" else torch.float32
    tokens = torch.zeros(1, s, dtype=torch.long, device=device)
    mask_type = ATTENTION_KINDS[attn_type].masks[0]
    try:
        with warnings.catch_warnings():
            # FlexAttention's eager warning: this probe is not a training step
            warnings.simplefilter("ignore")
            masks = KERNELS[attn_type].masks(tokens, mask_type, eos_id=1)
            q, k, v = (
                torch.randn(1, heads, s, head_dim, dtype=dtype, device=device, requires_grad=True)
                for _ in range(3)
            )
            kernel(q, k, v, attention_masks=masks).sum().backward()
    except (NotImplementedError, RuntimeError) as e:
        said = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]
        return (
            f"torch {torch.__version__} does not train it on {device.type} ({said[:160]}): use "
            'boost.attn_type = "sdpa" (it takes attn_mask_type causal and block_causal)'
        )
    return None


def compile_flex_attention() -> None:
    """FlexAttention's kernel compiled once, as torchtitan's LLaMA holds it (``FlexAttentionWrapper``): fused
    in eager blocks too, where plain ``flex_attention`` would materialise every score."""
    from torchtitan.models.attention import FlexAttentionWrapper

    FlexAttention.kernel = staticmethod(FlexAttentionWrapper._compiled_flex_attn)

"""BOOST: bottleneck-aware tensor parallelism for low-rank LLM pre-training, on torchtitan."""

from boost.model import FLAVOURS, ModelArgs, Transformer, flops_per_token

__all__ = ["FLAVOURS", "ModelArgs", "Transformer", "flops_per_token"]

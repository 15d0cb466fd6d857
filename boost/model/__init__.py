"""The BOOST decoder and its parts, written for one device: parallel plans are applied to a built model."""

from boost.model.args import FLAVORS, ModelArgs, flops_per_token, matmul_params
from boost.model.kv_cache import KVCache
from boost.model.linears import BatchedUp, Bottleneck, LatentCrossing, RMSNorm
from boost.model.model import Transformer, TransformerBlock

__all__ = [
    "FLAVORS",
    "ModelArgs",
    "flops_per_token",
    "matmul_params",
    "BatchedUp",
    "Bottleneck",
    "KVCache",
    "LatentCrossing",
    "RMSNorm",
    "Transformer",
    "TransformerBlock",
]

from boost.model.kv_cache import KVCache
from boost.model.args import FLAVOURS, LINEAR_KINDS, ModelArgs, flops_per_token, matmul_params
from boost.model.linears import BatchedUp, Bottleneck, LatentCrossing, RMSNorm
from boost.model.model import Transformer, TransformerBlock

__all__ = [
    "FLAVOURS", "LINEAR_KINDS", "ModelArgs", "flops_per_token", "matmul_params",
    "BatchedUp", "Bottleneck", "KVCache", "LatentCrossing", "RMSNorm", "Transformer", "TransformerBlock",
]

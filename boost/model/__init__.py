"""The BOOST decoder and its parts, written for one device: parallel plans are applied to a built model."""

from boost.lazy_exports import lazy_exports
from boost.model.args import FLAVORS, ModelArgs, flops_per_token, matmul_params

# The modules that need torch load on first use: ModelArgs and the flavor table (torch-free) are what
# the preflight's rules read before torch loads.
_TORCH_EXPORTS = {
    "BatchedUp": "boost.model.linears",
    "Bottleneck": "boost.model.linears",
    "KVCache": "boost.model.kv_cache",
    "LatentCrossing": "boost.model.linears",
    "RMSNorm": "boost.model.linears",
    "Transformer": "boost.model.model",
    "TransformerBlock": "boost.model.model",
}

__all__ = ["FLAVORS", "ModelArgs", "flops_per_token", "matmul_params", *_TORCH_EXPORTS]


__getattr__, __dir__ = lazy_exports(__name__, _TORCH_EXPORTS)

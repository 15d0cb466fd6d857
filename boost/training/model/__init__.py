"""The BOOST decoder and its parts, written for one device: parallel plans are applied to a built model."""

from boost.runtime.lazy_exports import lazy_exports
from boost.training.model.args import FLAVORS, ModelArgs, flops_per_token, matmul_params

# The modules that need torch load on first use: ModelArgs and the flavor table (torch-free) are what
# the preflight's rules read before torch loads.
_TORCH_EXPORTS = {
    "BatchedUp": "boost.training.model.linears",
    "Bottleneck": "boost.training.model.linears",
    "KVCache": "boost.training.model.kv_cache",
    "LatentCrossing": "boost.training.model.latent_crossing",
    "RMSNorm": "boost.training.model.linears",
    "Transformer": "boost.training.model.model",
    "TransformerBlock": "boost.training.model.model",
}

__all__ = ["FLAVORS", "ModelArgs", "flops_per_token", "matmul_params", *_TORCH_EXPORTS]


__getattr__, __dir__ = lazy_exports(__name__, _TORCH_EXPORTS)

"""BOOST: bottleneck-aware tensor parallelism for low-rank LLM pre-training, on torchtitan.

Example::

    >>> import torch, boost
    >>> _ = torch.manual_seed(0)
    >>> model = boost.Transformer(boost.ModelArgs.from_flavor("debug", linear="cola", vocab_size=512))
    >>> boost.flops_per_token(model.model_args, seq_len=256) > 0
    True
"""

from boost.lazy_exports import lazy_exports

# Loaded on first use, not at ``import boost``: the launcher reads a job with the torch-free parts of
# the library (rules, options, ConfigError) and refuses a bad one before torch loads.
_EXPORTS = {
    "FLAVORS": "boost.model",
    "ModelArgs": "boost.model",
    "Transformer": "boost.model",
    "flops_per_token": "boost.model",
    "CommCounter": "boost.comm_counter",
    "BoostParallelStyle": "boost.parallel",
    "apply_tp": "boost.parallel",
    "apply_lowrank_ac": "boost.parallel",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

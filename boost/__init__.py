"""BOOST: bottleneck-aware tensor parallelism for low-rank LLM pre-training, on torchtitan.

Four groups, by what a user does; each opens with its map, and an import runs down, never up or across:

- ``training``: the library a run is made of: model, tensor parallelism, LORO, data, rules, options;
- ``planning``: before a run: the performance model, the layout planner, communication volumes;
- ``after_training``: a finished run read back, sampled, scored, exported to Hugging Face;
- ``runtime``: the few helpers any process uses (``training`` and the tools above it import them).

Example::

    >>> import torch, boost
    >>> _ = torch.manual_seed(0)
    >>> model = boost.Transformer(boost.ModelArgs.from_flavor("debug", linear="cola", vocab_size=512))
    >>> boost.flops_per_token(model.model_args, seq_len=256) > 0
    True
"""

from boost.runtime.lazy_exports import lazy_exports

# Loaded on first use, not at ``import boost``: the launcher reads a job with the torch-free parts of
# the library (rules, options, ConfigError) and refuses a bad one before torch loads.
_EXPORTS = {
    "FLAVORS": "boost.training.model",
    "ModelArgs": "boost.training.model",
    "Transformer": "boost.training.model",
    "flops_per_token": "boost.training.model",
    "CommCounter": "boost.runtime.comm_counter",
    "BoostParallelStyle": "boost.training.parallel",
    "apply_tp": "boost.training.parallel",
    "apply_lowrank_ac": "boost.training.parallel",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

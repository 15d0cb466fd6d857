"""BOOST: bottleneck-aware tensor parallelism for low-rank LLM pre-training, on torchtitan.

Example::

    >>> import torch, boost
    >>> _ = torch.manual_seed(0)
    >>> model = boost.Transformer(boost.ModelArgs.from_flavor("debug", linear="cola", vocab_size=512))
    >>> boost.flops_per_token(model.model_args, seq_len=256) > 0
    True
"""

from boost.comm_counter import CommCounter
from boost.model import FLAVORS, ModelArgs, Transformer, flops_per_token
from boost.parallel import BoostParallelStyle, apply_lowrank_ac, apply_tp

__all__ = [
    "FLAVORS",
    "ModelArgs",
    "Transformer",
    "flops_per_token",
    "CommCounter",
    "BoostParallelStyle",
    "apply_tp",
    "apply_lowrank_ac",
]

"""Configuration of BOOST low-rank LLaMA models (``model_type = "boost_llama"``) for transformers.

A ``LlamaConfig`` plus three fields: ``linear`` (``svd`` | ``cola`` | ``lax``: the projection kind),
``rank`` (bottleneck width r of every projection) and ``only_lr_act`` (CoLA/LaX drop SwiGLU's SiLU
because the gate's latent already went through one).
"""

from transformers import LlamaConfig


class BoostConfig(LlamaConfig):
    # boost.training.rules.MODEL_NAME, spelled out: this file is loaded from an exported folder without BOOST
    # installed (tests/unit/test_start_once.py holds the two equal)
    model_type = "boost_llama"
    # transformers' tensor-parallel plan shards dense q/k/v/o...; these projections are two factors each.
    base_model_tp_plan = {}

    def __init__(self, linear: str = "cola", rank: int = 64, only_lr_act: bool = True, **kwargs):
        if linear not in ("svd", "cola", "lax"):
            raise ValueError(
                f"config.json: linear = {linear!r} must be svd, cola or lax (full models are LlamaForCausalLM)"
            )
        self.linear, self.rank, self.only_lr_act = linear, rank, only_lr_act
        super().__init__(**kwargs)

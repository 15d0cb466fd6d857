"""Configuration of BOOST low-rank LLaMA models (``model_type = "boost_llama"``) for transformers.

A ``LlamaConfig`` plus four fields: ``linear`` (``svd`` | ``cola`` | ``lax``: the projection kind),
``rank`` (bottleneck width r of every projection), ``only_lr_act`` (CoLA/LaX drop SwiGLU's SiLU
because the gate's latent already went through one) and ``lax_gate`` (LaX's gate on the carried latent:
``tensorized`` | ``linear`` | ``none``).
"""

from transformers import LlamaConfig


class BoostConfig(LlamaConfig):
    # boost.training.rules.MODEL_NAME, spelled out: this file is loaded from an exported folder without BOOST
    # installed (tests/unit/test_start_once.py holds the two equal)
    model_type = "boost_llama"
    # transformers' tensor-parallel plan shards dense q/k/v/o...; these projections are two factors each.
    base_model_tp_plan = {}

    def __init__(
        self,
        linear: str = "cola",
        rank: int = 64,
        only_lr_act: bool = True,
        lax_gate: str = "tensorized",
        **kwargs,
    ):
        if linear not in ("svd", "cola", "lax"):
            raise ValueError(
                f"config.json: linear = {linear!r} must be svd, cola or lax (full models are LlamaForCausalLM)"
            )
        if lax_gate not in ("tensorized", "linear", "none"):
            raise ValueError(f"config.json: lax_gate = {lax_gate!r} must be tensorized, linear or none")
        self.linear, self.rank, self.only_lr_act, self.lax_gate = linear, rank, only_lr_act, lax_gate
        super().__init__(**kwargs)

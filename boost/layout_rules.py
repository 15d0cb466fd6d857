"""Which parallel layouts BOOST runs: the rules the planner (``boost.plan``) and the config
validation (``torchtitan_ext.config_rules``) share, stated once here."""

from __future__ import annotations


def splits_into_pipeline_stages(linear: str) -> bool:
    """Whether a model of this kind can be cut into pipeline stages: LaX adds each block's latent to
    the next block's, a carry that a stage boundary would cut."""
    return linear != "lax"


def lowrank_ac_applies(tp: int, tp_scheme: str) -> bool:
    """Whether low-rank activation checkpointing has anything to keep: BTP's r-wide all-reduced
    latents exist only under BTP with TP > 1 (at TP = 1, and under the vanilla/megatron plans whose
    all-reduces are d wide, there is nothing r-wide to keep)."""
    return tp > 1 and tp_scheme == "btp"

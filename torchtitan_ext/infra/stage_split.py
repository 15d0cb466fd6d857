"""The modules of each pipeline stage, as torchtitan 0.2.2's ``pipeline_llm`` splits BOOST's model.

The parts ``parallelism.module_fqns_per_model_part`` names, or else torchtitan's own split of the stage
count (``generate_llm_fqn_per_model_part``, the embedding and the head weighing
``pipeline_parallel_first_stage_less_layers`` and ``pipeline_parallel_last_stage_less_layers`` layers). The
preflight (``torchtitan_ext.preflight.job_rules``) refuses what this raises on, and the parts named by hand
that ``rules.module_split_problem`` refuses; ``infra.pipeline.pipeline_boost`` builds the stages from it.
"""

from __future__ import annotations

from typing import Any

from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part

from boost.training.rules import pipeline_stage_count


def stage_module_names(parallelism: Any, multi_stage: bool, pp: int, n_layers: int) -> list[list[str]]:
    """Each stage's module names. ``parallelism``: torchtitan's ``Parallelism`` section, or the preflight's
    values read the same way; ``multi_stage``: the schedule runs several stages per rank. Raises torchtitan's
    ``ValueError`` where its split cannot cut the stage count from ``n_layers`` layers."""
    if parallelism.module_fqns_per_model_part:
        return parallelism.module_fqns_per_model_part
    first_less = parallelism.pipeline_parallel_first_stage_less_layers
    last_less = parallelism.pipeline_parallel_last_stage_less_layers
    stages = pipeline_stage_count(
        multi_stage, pp, n_layers, parallelism.pipeline_parallel_layers_per_stage, first_less, last_less
    )
    return generate_llm_fqn_per_model_part(stages, n_layers, first_less, last_less)

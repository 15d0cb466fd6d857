"""BOOST's rules, stated once: the linear kinds and the tensor-parallel schemes and what each one is, the
norm and activation-checkpoint modes, how the bottleneck rank and the data-parallel degree are resolved,
the models' name, and every check of a layout.

Everything that needs one of these imports it from here: the model (``boost.training.model``), the TP plans
(``boost.training.parallel.tp_plans``), the layout planner and performance model, and the trainer's preflight
(``torchtitan_ext.preflight``), which quotes the TOML field each check is about.

A layout check takes plain values and returns ``None`` when the layout holds, else what to change —
one sentence a user can act on. Callers decide what a broken rule means: the preflight refuses the
job naming the field, the planner skips the layout, ``apply_tp`` raises ``ValueError``.

One concern a file; they import nothing outside the standard library, and one another only where
``tensor_parallel`` reads the kinds:

- ``kinds``: the linear kinds, LaX's gate choices, the bottleneck rank, LORO's checks, the models' name;
- ``tensor_parallel``: the TP schemes, the norm and AC modes, and the checks of a TP layout;
- ``data_parallel``: the data-parallel degree, when FSDP wraps, its reshard policy, SimpleFSDP's needs;
- ``compile``: what is compiled, and what CUDA graphs over it need;
- ``pipeline``: the stages and what each pipeline schedule accepts;
- ``attention``: the attention kernels and masks, and context parallelism.

Example::

    >>> KINDS["lax"].latent_crossing, KINDS["cola"].latent_activation, KINDS["full"].tp_scheme
    (True, True, 'megatron')
    >>> SCHEMES["btp"].residual_width(4096, tp=4), SCHEMES["vanilla"].residual_width(4096, tp=4)
    (1024, 4096)
    >>> resolve_rank(dim=4096, rank=0, rank_ratio=0.25)
    1024
    >>> tp_scheme_problem("full", "btp", tp=4)
    'the dense model (boost.linear = "full") uses tp_scheme = "megatron"'
"""

from __future__ import annotations

from boost.training.rules.attention import (
    ATTENTION_KINDS,
    ATTENTION_TYPES,
    CP_LOAD_BALANCERS,
    FLEX_BLOCK,
    MASK_TYPES,
    AttentionKind,
    attention_kind,
    attention_layout_problem,
    attention_mask_problem,
    comm_count_problem,
    context_parallel_path,
    context_parallel_problem,
    load_balancer_problem,
)
from boost.training.rules.compile import (
    compiles_model,
    cudagraphs_problem,
)
from boost.training.rules.data_parallel import (
    FSDP_IMPLS,
    RESHARD_POLICIES,
    data_parallel_degree,
    fsdp_for_precision,
    fsdp_wraps,
    reshards_after_forward,
    simple_fsdp_problem,
)
from boost.training.rules.kinds import (
    DEFAULT_RANK_RATIO,
    DENSE_KIND,
    KINDS,
    LAX_GATE_FORMS,
    LAX_GATES,
    LINEAR_KINDS,
    MODEL_NAME,
    LinearKind,
    lax_gate,
    lax_gate_form,
    lax_gate_form_problem,
    linear_kind,
    loro_kind_problem,
    loro_rank_problem,
    most_balanced_factor_pair,
    rank_problem,
    resolve_rank,
)
from boost.training.rules.pipeline import (
    PIPELINE_MICROBATCH_PER_STAGE,
    PIPELINE_MICROBATCH_ROUNDS,
    PIPELINE_SPLIT_BACKWARD,
    PIPELINE_TWO_STAGES_PER_RANK,
    microbatch_size_problem,
    model_part_names,
    module_split_problem,
    pipeline_csv_problem,
    pipeline_loss_rank,
    pipeline_microbatch_problem,
    pipeline_problem,
    pipeline_runtime_problem,
    pipeline_schedule_problem,
    pipeline_stage_count,
    pipeline_stages_problem,
    pipeline_validation_problem,
    splits_backward,
)
from boost.training.rules.tensor_parallel import (
    AC_BY_MEMORY_KEPT,
    AC_MODES,
    NORM_MODES,
    SCHEMES,
    SHARD_LOCAL_NORM_WARNING,
    TP_SCHEMES,
    TPScheme,
    activation_checkpoint_problem,
    grouping_problem,
    groups_linears,
    lowrank_ac_applies,
    norm_is_shard_local,
    online_norm_problem,
    rms_norm_record,
    sequence_parallel_length_problem,
    sequence_parallel_problem,
    shard_local_degree,
    tp_scheme,
    tp_scheme_problem,
    tp_shape_problem,
    tp_sharded_dims,
    vanilla_rank_problem,
)

__all__ = [
    "AC_BY_MEMORY_KEPT",
    "AC_MODES",
    "ATTENTION_KINDS",
    "ATTENTION_TYPES",
    "AttentionKind",
    "CP_LOAD_BALANCERS",
    "DEFAULT_RANK_RATIO",
    "DENSE_KIND",
    "FLEX_BLOCK",
    "FSDP_IMPLS",
    "KINDS",
    "LAX_GATES",
    "LAX_GATE_FORMS",
    "LINEAR_KINDS",
    "LinearKind",
    "MASK_TYPES",
    "MODEL_NAME",
    "NORM_MODES",
    "PIPELINE_MICROBATCH_PER_STAGE",
    "PIPELINE_MICROBATCH_ROUNDS",
    "PIPELINE_SPLIT_BACKWARD",
    "PIPELINE_TWO_STAGES_PER_RANK",
    "RESHARD_POLICIES",
    "SCHEMES",
    "SHARD_LOCAL_NORM_WARNING",
    "TPScheme",
    "TP_SCHEMES",
    "activation_checkpoint_problem",
    "attention_kind",
    "attention_layout_problem",
    "attention_mask_problem",
    "comm_count_problem",
    "compiles_model",
    "context_parallel_path",
    "context_parallel_problem",
    "cudagraphs_problem",
    "data_parallel_degree",
    "fsdp_for_precision",
    "fsdp_wraps",
    "grouping_problem",
    "groups_linears",
    "lax_gate",
    "lax_gate_form",
    "lax_gate_form_problem",
    "linear_kind",
    "load_balancer_problem",
    "loro_kind_problem",
    "loro_rank_problem",
    "lowrank_ac_applies",
    "model_part_names",
    "module_split_problem",
    "most_balanced_factor_pair",
    "norm_is_shard_local",
    "rms_norm_record",
    "shard_local_degree",
    "online_norm_problem",
    "pipeline_csv_problem",
    "pipeline_loss_rank",
    "microbatch_size_problem",
    "pipeline_microbatch_problem",
    "pipeline_problem",
    "pipeline_runtime_problem",
    "pipeline_schedule_problem",
    "pipeline_stage_count",
    "pipeline_stages_problem",
    "pipeline_validation_problem",
    "rank_problem",
    "reshards_after_forward",
    "resolve_rank",
    "sequence_parallel_length_problem",
    "sequence_parallel_problem",
    "simple_fsdp_problem",
    "splits_backward",
    "tp_scheme",
    "tp_scheme_problem",
    "tp_shape_problem",
    "tp_sharded_dims",
    "vanilla_rank_problem",
]

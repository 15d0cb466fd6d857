"""torchtitan 0.2.2's JobConfig schema and dataset names, read by torchtitan_ext.preflight.schema.

Written by ``python -m torchtitan_ext.preflight.schema``; do not edit.
tests/unit/test_start_up.py holds it equal to torchtitan."""

TORCHTITAN = "0.2.2"
DATASETS = ("c4", "c4_test", "c4_validation")
JOB_CONFIG = {
    "class": "JobConfig",
    "fields": [
        {
            "name": "job",
            "section": {
                "class": "Job",
                "fields": [
                    {"name": "config_file", "type": "str | None", "default": None},
                    {"name": "dump_folder", "type": "str", "default": "./outputs"},
                    {"name": "description", "type": "str", "default": "default job"},
                    {"name": "print_config", "type": "bool", "default": False},
                    {"name": "save_config_file", "type": "str | None", "default": None},
                    {"name": "custom_config_module", "type": "str", "default": ""},
                ],
            },
        },
        {
            "name": "profiling",
            "section": {
                "class": "Profiling",
                "fields": [
                    {"name": "enable_profiling", "type": "bool", "default": False},
                    {"name": "save_traces_folder", "type": "str", "default": "profile_traces"},
                    {"name": "profile_freq", "type": "int", "default": 10},
                    {"name": "profiler_active", "type": "int", "default": 1},
                    {"name": "profiler_warmup", "type": "int", "default": 3},
                    {"name": "enable_memory_snapshot", "type": "bool", "default": False},
                    {"name": "save_memory_snapshot_folder", "type": "str", "default": "memory_snapshot"},
                ],
            },
        },
        {
            "name": "metrics",
            "section": {
                "class": "Metrics",
                "fields": [
                    {"name": "log_freq", "type": "int", "default": 10},
                    {"name": "enable_tensorboard", "type": "bool", "default": False},
                    {"name": "disable_color_printing", "type": "bool", "default": False},
                    {"name": "save_tb_folder", "type": "str", "default": "tb"},
                    {"name": "save_for_all_ranks", "type": "bool", "default": False},
                    {"name": "enable_wandb", "type": "bool", "default": False},
                ],
            },
        },
        {
            "name": "model",
            "section": {
                "class": "Model",
                "fields": [
                    {"name": "name", "type": "str", "default": "llama3"},
                    {"name": "flavor", "type": "str", "default": "debugmodel"},
                    {"name": "hf_assets_path", "type": "str", "default": "./tests/assets/tokenizer"},
                    {"name": "tokenizer_path", "type": "str | None", "default": None},
                    {"name": "converters", "type": "list[str]", "default": []},
                    {"name": "print_after_conversion", "type": "bool", "default": False},
                ],
            },
        },
        {
            "name": "optimizer",
            "section": {
                "class": "Optimizer",
                "fields": [
                    {"name": "name", "type": "str", "default": "AdamW"},
                    {"name": "lr", "type": "float", "default": 0.0008},
                    {"name": "beta1", "type": "float", "default": 0.9},
                    {"name": "beta2", "type": "float", "default": 0.95},
                    {"name": "eps", "type": "float", "default": 1e-08},
                    {"name": "weight_decay", "type": "float", "default": 0.1},
                    {
                        "name": "implementation",
                        "type": "Literal['for-loop', 'foreach', 'fused']",
                        "default": "fused",
                    },
                    {"name": "early_step_in_backward", "type": "bool", "default": False},
                ],
            },
        },
        {
            "name": "lr_scheduler",
            "section": {
                "class": "LRScheduler",
                "fields": [
                    {"name": "warmup_steps", "type": "int", "default": 200},
                    {"name": "total_steps", "type": "int | None", "default": None},
                    {"name": "decay_ratio", "type": "float | None", "default": None},
                    {
                        "name": "decay_type",
                        "type": "Literal['linear', 'sqrt', 'cosine']",
                        "default": "linear",
                    },
                    {"name": "min_lr_factor", "type": "float", "default": 0.0},
                ],
            },
        },
        {
            "name": "training",
            "section": {
                "class": "Training",
                "fields": [
                    {"name": "dataset", "type": "str", "default": "c4_test"},
                    {"name": "dataset_path", "type": "str | None", "default": None},
                    {"name": "local_batch_size", "type": "int", "default": 8},
                    {"name": "global_batch_size", "type": "int", "default": -1},
                    {"name": "seq_len", "type": "int", "default": 2048},
                    {"name": "max_norm", "type": "float | int", "default": 1.0},
                    {"name": "steps", "type": "int", "default": 10000},
                    {"name": "enable_cpu_offload", "type": "bool", "default": False},
                    {"name": "dtype", "type": "Literal['bfloat16', 'float32']", "default": "float32"},
                    {
                        "name": "mixed_precision_param",
                        "type": "Literal['bfloat16', 'float32']",
                        "default": "bfloat16",
                    },
                    {"name": "mixed_precision_reduce", "type": "Literal['float32']", "default": "float32"},
                    {"name": "gc_freq", "type": "int", "default": 50},
                    {"name": "gc_debug", "type": "bool", "default": False},
                    {
                        "name": "dataloader",
                        "section": {
                            "class": "DataLoader",
                            "fields": [
                                {"name": "num_workers", "type": "int", "default": 0},
                                {"name": "persistent_workers", "type": "bool", "default": False},
                                {"name": "pin_memory", "type": "bool", "default": False},
                                {"name": "prefetch_factor", "type": "int | None", "default": None},
                            ],
                        },
                    },
                ],
            },
        },
        {
            "name": "parallelism",
            "section": {
                "class": "Parallelism",
                "fields": [
                    {"name": "data_parallel_replicate_degree", "type": "int", "default": 1},
                    {"name": "data_parallel_shard_degree", "type": "int", "default": -1},
                    {
                        "name": "fsdp_reshard_after_forward",
                        "type": "Literal['default', 'always', 'never']",
                        "default": "default",
                    },
                    {"name": "tensor_parallel_degree", "type": "int", "default": 1},
                    {"name": "disable_loss_parallel", "type": "bool", "default": False},
                    {"name": "enable_async_tensor_parallel", "type": "bool", "default": False},
                    {"name": "pipeline_parallel_degree", "type": "int", "default": 1},
                    {"name": "module_fqns_per_model_part", "type": "list[list[str]] | None", "default": None},
                    {"name": "pipeline_parallel_first_stage_less_layers", "type": "int", "default": 1},
                    {"name": "pipeline_parallel_last_stage_less_layers", "type": "int", "default": 1},
                    {"name": "pipeline_parallel_layers_per_stage", "type": "int | None", "default": None},
                    {"name": "pipeline_parallel_schedule", "type": "str", "default": "1F1B"},
                    {"name": "pipeline_parallel_schedule_csv", "type": "str | None", "default": ""},
                    {"name": "pipeline_parallel_microbatch_size", "type": "int", "default": 1},
                    {"name": "pipeline_parallel_expert_parallel_overlap", "type": "bool", "default": True},
                    {"name": "context_parallel_degree", "type": "int", "default": 1},
                    {"name": "context_parallel_load_balancer", "type": "str | None", "default": "headtail"},
                    {
                        "name": "context_parallel_rotate_method",
                        "type": "Literal['allgather', 'alltoall']",
                        "default": "allgather",
                    },
                    {"name": "expert_parallel_degree", "type": "int", "default": 1},
                    {"name": "expert_tensor_parallel_degree", "type": "int", "default": 1},
                    {
                        "name": "expert_parallel_comm_backend",
                        "type": "Literal['standard', 'deepep']",
                        "default": "standard",
                    },
                ],
            },
        },
        {
            "name": "checkpoint",
            "section": {
                "class": "Checkpoint",
                "fields": [
                    {"name": "enable", "type": "bool", "default": False},
                    {"name": "enable_ft_dataloader_checkpoints", "type": "bool", "default": True},
                    {"name": "folder", "type": "str", "default": "checkpoint"},
                    {"name": "interval", "type": "int", "default": 500},
                    {"name": "initial_load_path", "type": "str | None", "default": None},
                    {"name": "initial_load_model_only", "type": "bool", "default": True},
                    {"name": "initial_load_in_hf", "type": "bool", "default": False},
                    {"name": "initial_load_in_hf_quantized", "type": "bool", "default": False},
                    {"name": "last_save_model_only", "type": "bool", "default": True},
                    {"name": "last_save_in_hf", "type": "bool", "default": False},
                    {
                        "name": "export_dtype",
                        "type": "Literal['float16', 'bfloat16', 'float32']",
                        "default": "float32",
                    },
                    {
                        "name": "async_mode",
                        "type": "Literal['disabled', 'async', 'async_with_pinned_mem']",
                        "default": "disabled",
                    },
                    {"name": "keep_latest_k", "type": "int", "default": 10},
                    {"name": "load_step", "type": "int", "default": -1},
                    {"name": "exclude_from_loading", "type": "list[str]", "default": []},
                    {"name": "enable_first_step_checkpoint", "type": "bool", "default": False},
                    {"name": "create_seed_checkpoint", "type": "bool", "default": False},
                    {"name": "load_only", "type": "bool", "default": False},
                ],
            },
        },
        {
            "name": "activation_checkpoint",
            "section": {
                "class": "ActivationCheckpoint",
                "fields": [
                    {
                        "name": "mode",
                        "type": "Literal['selective', 'full', 'memory_budget', 'none']",
                        "default": "selective",
                    },
                    {"name": "selective_ac_option", "type": "str", "default": "2"},
                    {
                        "name": "per_op_sac_force_recompute_mm_shapes_by_fqns",
                        "type": "list[str]",
                        "default": ["moe.router.gate"],
                    },
                    {"name": "early_stop", "type": "bool", "default": False},
                    {"name": "memory_budget", "type": "float", "default": 0.5},
                    {"name": "visualize_memory_budget_pareto", "type": "bool", "default": False},
                    {"name": "preserve_rng_state", "type": "bool", "default": True},
                    {"name": "determinism_check", "type": "str", "default": "default"},
                    {"name": "debug", "type": "bool", "default": False},
                ],
            },
        },
        {
            "name": "compile",
            "section": {
                "class": "Compile",
                "fields": [
                    {"name": "enable", "type": "bool", "default": False},
                    {"name": "components", "type": "list[str]", "default": ["model", "loss"]},
                    {"name": "backend", "type": "str", "default": "inductor"},
                ],
            },
        },
        {
            "name": "quantize",
            "section": {
                "class": "Quantize",
                "fields": [
                    {
                        "name": "linear",
                        "section": {
                            "class": "QuantizedLinear",
                            "fields": [
                                {
                                    "name": "float8",
                                    "section": {
                                        "class": "Float8Linear",
                                        "fields": [
                                            {
                                                "name": "enable_fsdp_float8_all_gather",
                                                "type": "bool",
                                                "default": False,
                                            },
                                            {
                                                "name": "precompute_float8_dynamic_scale_for_fsdp",
                                                "type": "bool",
                                                "default": False,
                                            },
                                            {
                                                "name": "recipe_name",
                                                "type": "Literal['tensorwise', "
                                                "'rowwise', "
                                                "'rowwise_with_gw_hp'] "
                                                "| "
                                                "None",
                                                "default": None,
                                            },
                                            {"name": "filter_fqns", "type": "list[str]", "default": []},
                                            {"name": "emulate", "type": "bool", "default": False},
                                        ],
                                    },
                                },
                                {
                                    "name": "mx",
                                    "section": {
                                        "class": "MXLinear",
                                        "fields": [
                                            {
                                                "name": "mxfp8_dim1_cast_kernel_choice",
                                                "type": "Literal['triton', 'cuda', 'torch']",
                                                "default": "triton",
                                            },
                                            {"name": "recipe_name", "type": "str", "default": "mxfp8_cublas"},
                                            {
                                                "name": "filter_fqns",
                                                "type": "list[str]",
                                                "default": ["output"],
                                            },
                                        ],
                                    },
                                },
                            ],
                        },
                    },
                    {
                        "name": "grouped_mm",
                        "section": {
                            "class": "QuantizedGroupedMM",
                            "fields": [
                                {
                                    "name": "float8",
                                    "section": {
                                        "class": "Float8GroupedMM",
                                        "fields": [
                                            {"name": "fqns", "type": "list[str] | str", "default": []}
                                        ],
                                    },
                                },
                                {
                                    "name": "mx",
                                    "section": {
                                        "class": "MXGroupedMM",
                                        "fields": [
                                            {
                                                "name": "recipe_name",
                                                "type": "Literal['mxfp8']",
                                                "default": "mxfp8",
                                            },
                                            {"name": "fqns", "type": "list[str] | str", "default": []},
                                        ],
                                    },
                                },
                            ],
                        },
                    },
                ],
            },
        },
        {
            "name": "comm",
            "section": {
                "class": "Comm",
                "fields": [
                    {"name": "init_timeout_seconds", "type": "int", "default": 300},
                    {"name": "train_timeout_seconds", "type": "int", "default": 100},
                    {"name": "trace_buf_size", "type": "int", "default": 20000},
                    {"name": "save_traces_folder", "type": "str", "default": "comm_traces"},
                    {"name": "save_traces_file_prefix", "type": "str", "default": "rank_"},
                    {
                        "name": "mode",
                        "type": "Literal['default', 'fake_backend', 'local_tensor']",
                        "default": "default",
                    },
                ],
            },
        },
        {
            "name": "memory_estimation",
            "section": {
                "class": "MemoryEstimation",
                "fields": [
                    {"name": "enable", "type": "bool", "default": False},
                    {"name": "disable_fake_mode", "type": "bool", "default": False},
                ],
            },
        },
        {
            "name": "fault_tolerance",
            "section": {
                "class": "FaultTolerance",
                "fields": [
                    {"name": "enable", "type": "bool", "default": False},
                    {"name": "process_group", "type": "str", "default": "gloo"},
                    {"name": "process_group_timeout_ms", "type": "int", "default": 10000},
                    {"name": "replica_id", "type": "int", "default": 0},
                    {"name": "group_size", "type": "int", "default": 0},
                    {"name": "min_replica_size", "type": "int", "default": 1},
                    {"name": "semi_sync_method", "type": "str | None", "default": None},
                ],
            },
        },
        {
            "name": "experimental",
            "section": {
                "class": "Experimental",
                "fields": [
                    {"name": "custom_import", "type": "str", "default": ""},
                    {"name": "custom_args_module", "type": "str", "default": ""},
                ],
            },
        },
        {
            "name": "validation",
            "section": {
                "class": "Validation",
                "fields": [
                    {"name": "enable", "type": "bool", "default": False},
                    {"name": "dataset", "type": "str", "default": "c4_validation"},
                    {"name": "dataset_path", "type": "str | None", "default": None},
                    {"name": "local_batch_size", "type": "int", "default": 8},
                    {"name": "seq_len", "type": "int", "default": 2048},
                    {"name": "freq", "type": "int", "default": 10},
                    {"name": "steps", "type": "int", "default": -1},
                    {
                        "name": "dataloader",
                        "section": {
                            "class": "DataLoader",
                            "fields": [
                                {"name": "num_workers", "type": "int", "default": 0},
                                {"name": "persistent_workers", "type": "bool", "default": False},
                                {"name": "pin_memory", "type": "bool", "default": False},
                                {"name": "prefetch_factor", "type": "int | None", "default": None},
                            ],
                        },
                    },
                ],
            },
        },
        {
            "name": "debug",
            "section": {
                "class": "Debug",
                "fields": [
                    {"name": "seed", "type": "int | None", "default": None},
                    {"name": "deterministic", "type": "bool", "default": False},
                    {"name": "deterministic_warn_only", "type": "bool", "default": False},
                    {"name": "moe_force_load_balance", "type": "bool", "default": False},
                ],
            },
        },
    ],
}

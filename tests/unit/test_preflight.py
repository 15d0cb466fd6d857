"""Bad input is refused before any work, with the field, the value and the fix (issues 10 and 14).

Each row of ``CASES`` is also a row of docs/config_errors.md, and the docs' rule table is
``job_rules.RULES`` rendered (both checked below).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from boost.training.rules import LINEAR_KINDS
from torchtitan_ext.preflight import ConfigError, check_job, load_toml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "train_configs" / "debug.toml")

# (overrides, world size, message fragment)
CASES = [
    (["--boost.rank", "300"], 1, "boost.rank = 300: must be below the smallest dim"),
    (["--boost.rank", "-1"], 1, "boost.rank = -1: must be positive"),
    (["--boost.rank_ratio", "1.5"], 1, "boost.rank_ratio = 1.5"),
    (["--boost.linear", "lora"], 1, "boost.linear = 'lora': choose one of"),
    (["--boost.norm", "layer"], 1, "boost.norm = 'layer': choose one of"),
    (["--boost.tp_scheme", "ring"], 1, "boost.tp_scheme = 'ring': choose one of"),
    (["--boost.activation_checkpoint", "selective"], 1, "boost.activation_checkpoint = 'selective'"),
    (["--boost.fsdp", "hooks"], 1, "boost.fsdp = 'hooks': choose one of"),
    (
        ["--boost.fsdp", "simple_fsdp", "--compile.no-enable"],
        2,
        "boost.fsdp = 'simple_fsdp': SimpleFSDP gathers each weight where it is read",
    ),
    (
        [
            "--boost.fsdp",
            "simple_fsdp",
            "--compile.enable",
            "--parallelism.fsdp_reshard_after_forward",
            "never",
        ],
        2,
        "parallelism.fsdp_reshard_after_forward = 'never' is FSDP2's",
    ),
    (
        ["--boost.cudagraphs", "--compile.no-enable"],
        1,
        "boost.cudagraphs = True: CUDA graphs are inductor's, over the compiled blocks",
    ),
    (
        ["--boost.cudagraphs", "--compile.enable"],
        2,
        "boost.cudagraphs = True: FSDP2 gathers each block's weights into new memory every step",
    ),
    (
        ["--boost.cudagraphs", "--compile.enable", "--training.global_batch_size", "16"],
        1,
        "boost.cudagraphs = True: CUDA graphs are not built for 2 micro-batches a step",
    ),
    # each of what boost.cudagraphs and SimpleFSDP are not built for, alone
    (
        ["--boost.cudagraphs", "--compile.enable", "--compile.backend", "aot_eager"],
        1,
        "boost.cudagraphs = True: CUDA graphs are inductor's, over the compiled blocks: set compile.enable with "
        '"model" in compile.components and compile.backend = "inductor"',
    ),
    (
        ["--boost.cudagraphs", "--compile.enable", "--parallelism.pipeline_parallel_degree", "2"],
        2,
        "boost.cudagraphs = True: CUDA graphs are not built for parallelism.pipeline_parallel_degree > 1 here",
    ),
    (
        ["--boost.cudagraphs", "--compile.enable", "--parallelism.data_parallel_replicate_degree", "2"],
        2,
        "boost.cudagraphs = True: CUDA graphs are not built for parallelism.data_parallel_replicate_degree > 1 "
        "(HSDP) here",
    ),
    (
        ["--boost.cudagraphs", "--compile.enable", "--training.enable_cpu_offload"],
        1,
        "boost.cudagraphs = True: CUDA graphs are not built for training.enable_cpu_offload here",
    ),
    (
        ["--boost.cudagraphs", "--compile.enable", "--optimizer.name", "LORO", "--boost.linear", "svd"],
        1,
        'boost.cudagraphs = True: CUDA graphs are not built for optimizer.name = "LORO" here',
    ),
    (
        ["--boost.fsdp", "simple_fsdp", "--compile.enable", "--parallelism.pipeline_parallel_degree", "2"],
        4,
        "boost.fsdp = 'simple_fsdp': SimpleFSDP is not built for parallelism.pipeline_parallel_degree > 1 here",
    ),
    (
        [
            "--boost.fsdp",
            "simple_fsdp",
            "--compile.enable",
            "--parallelism.data_parallel_replicate_degree",
            "2",
            "--parallelism.data_parallel_shard_degree",
            "2",
        ],
        4,
        "boost.fsdp = 'simple_fsdp': SimpleFSDP is not built for parallelism.data_parallel_replicate_degree > 1 "
        "(HSDP) here",
    ),
    (
        ["--boost.fsdp", "simple_fsdp", "--compile.enable", "--training.enable_cpu_offload"],
        2,
        "boost.fsdp = 'simple_fsdp': SimpleFSDP is not built for training.enable_cpu_offload here",
    ),
    (
        [
            "--boost.fsdp",
            "simple_fsdp",
            "--compile.enable",
            "--optimizer.name",
            "LORO",
            "--boost.linear",
            "svd",
        ],
        2,
        "boost.fsdp = 'simple_fsdp': SimpleFSDP is not built for optimizer.name = \"LORO\" here",
    ),
    (
        ["--parallelism.tensor_parallel_degree", "3", "--parallelism.data_parallel_shard_degree", "1"],
        3,
        "parallelism.tensor_parallel_degree = 3: must divide n_heads = 8",
    ),
    (
        ["--parallelism.tensor_parallel_degree", "8", "--parallelism.data_parallel_shard_degree", "1"],
        8,
        "parallelism.tensor_parallel_degree = 8: must divide kv_heads = 4",
    ),
    (
        ["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "2"],
        2,
        "parallelism.data_parallel_shard_degree = 2: tp×pp×dp_replicate×cp×dp_shard = 4 must equal the world size 2",
    ),
    (["--parallelism.tensor_parallel_degree", "2"], 3, "must divide the world size 3"),
    (
        ["--parallelism.pipeline_parallel_degree", "8", "--parallelism.data_parallel_shard_degree", "1"],
        8,
        "more stages than the 4 layers",
    ),
    (
        ["--boost.linear", "lax", "--boost.lax_gate", "kronecker"],
        1,
        "boost.lax_gate = 'kronecker': choose one of",
    ),
    (
        ["--boost.linear", "lax", "--boost.lax_gate", "linear", "--boost.lax_gate_form", "kron"],
        1,
        "boost.lax_gate_form = 'kron': kron computes the tensorized gate, not boost.lax_gate = \"linear\"",
    ),
    (
        [
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.pipeline_parallel_microbatch_size",
            "2",
            "--validation.local_batch_size",
            "3",
        ],
        2,
        "validation.local_batch_size = 3: must split into the pipeline's 4 micro-batches",
    ),
    (
        ["--parallelism.pipeline_parallel_degree", "2", "--training.local_batch_size", "1"],
        2,
        "training.local_batch_size = 1: with parallelism.pipeline_parallel_microbatch_size = 1 that is 1 micro-batch, "
        "fewer than the 2 stages of schedule 1F1B, which needs one per stage: raise "
        "training.local_batch_size to at least 2",
    ),
    (
        [
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.pipeline_parallel_schedule",
            "Interleaved1F1B",
            "--training.local_batch_size",
            "9",
        ],
        2,
        "training.local_batch_size = 9: with parallelism.pipeline_parallel_microbatch_size = 1 "
        "that is 9 micro-batches, "
        "which schedule Interleaved1F1B cannot split into n // pp = 4 equal rounds: make the "
        "micro-batch count a multiple "
        "of pp = 2, or below 4",
    ),
    (
        [
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.pipeline_parallel_layers_per_stage",
            "1",
        ],
        2,
        "parallelism.pipeline_parallel_layers_per_stage = 1: gives 3 stages per rank; schedule 1F1B runs one: leave it "
        "unset, or choose a multi-stage schedule",
    ),
    # stages named by hand: each module once, in the forward's order, as many stages as the schedule runs
    (
        [
            *("--parallelism.pipeline_parallel_degree", "2", "--parallelism.module_fqns_per_model_part"),
            *("tok_embeddings,layers.0", "layers.2,layers.3,norm,output"),
        ],
        2,
        "parallelism.module_fqns_per_model_part = [['tok_embeddings', 'layers.0'], ['layers.2', 'layers.3', 'norm', "
        "'output']]: leaves out layers.1, which no stage would train: the stages, read in order, must name "
        "tok_embeddings, layers.0 … layers.3, norm, output, each once",
    ),
    (
        [
            *("--parallelism.pipeline_parallel_degree", "2", "--parallelism.module_fqns_per_model_part"),
            *("tok_embeddings,layers.0,layers.1", "layers.1,layers.2,layers.3,norm,output"),
        ],
        2,
        "names layers.1 in more than one stage, which would train a copy of it in each",
    ),
    (
        [
            *("--parallelism.pipeline_parallel_degree", "2", "--parallelism.module_fqns_per_model_part"),
            *("tok_embeddings,layers.0", "layers.1,layers.2", "layers.3,norm,output"),
        ],
        2,
        "parallelism.module_fqns_per_model_part = [['tok_embeddings', 'layers.0'], ['layers.1', 'layers.2'], "
        "['layers.3', 'norm', 'output']]: gives 3 stages, which 2 pipeline ranks cannot split evenly",
    ),
    # stages named where nothing reads them, or beside a setting torchtitan then drops
    (
        [
            "--parallelism.module_fqns_per_model_part",
            "tok_embeddings,layers.0,layers.1",
            "layers.2,layers.3,norm,output",
        ],
        2,
        "parallelism.module_fqns_per_model_part = [['tok_embeddings', 'layers.0', 'layers.1'], ['layers.2', "
        "'layers.3', 'norm', 'output']]: names pipeline stages, which only pipeline parallelism reads: set "
        "parallelism.pipeline_parallel_degree > 1, or unset it",
    ),
    (
        [
            *(
                "--parallelism.pipeline_parallel_degree",
                "2",
                "--parallelism.pipeline_parallel_layers_per_stage",
                "2",
            ),
            *("--parallelism.module_fqns_per_model_part", "tok_embeddings,layers.0,layers.1"),
            "layers.2,layers.3,norm,output",
        ],
        2,
        "names the stages, so torchtitan ignores parallelism.pipeline_parallel_layers_per_stage = 2: unset one of "
        "the two",
    ),
    # stage counts torchtitan's split (generate_llm_fqn_per_model_part) cannot cut: refused before start
    (
        [
            *("--parallelism.pipeline_parallel_degree", "4", "--parallelism.data_parallel_shard_degree", "1"),
            *("--parallelism.pipeline_parallel_schedule", "Interleaved1F1B"),
        ],
        4,
        "parallelism = \"8 stages of flavor debug's 4 layers\": torchtitan's split (generate_llm_fqn_per_model_part; "
        "its input and output weights are pipeline_parallel_first_stage_less_layers = 1 and "
        "pipeline_parallel_last_stage_less_layers = 1) refuses them: Number of stages (8) cannot be greater than "
        "effective layers (6); cut fewer stages (a lower pipeline_parallel_degree, a single-stage schedule, or "
        "pipeline_parallel_layers_per_stage), lower those two, or name each stage's modules in "
        "parallelism.module_fqns_per_model_part",
    ),
    (
        [
            *("--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule"),
            *("Interleaved1F1B", "--parallelism.pipeline_parallel_first_stage_less_layers", "3"),
        ],
        2,
        "refuses them: input_weight (3) exceeds minimum layers per stage (2); cut fewer stages",
    ),
    (
        ["--boost.linear", "full", "--parallelism.tensor_parallel_degree", "2"],
        2,
        'uses tp_scheme = "megatron"',
    ),
    (
        ["--boost.tp_scheme", "megatron", "--parallelism.tensor_parallel_degree", "2"],
        2,
        "megatron is the dense baseline",
    ),
    (
        ["--boost.tokenizer_vocab_size", "2047", "--parallelism.tensor_parallel_degree", "2"],
        2,
        "boost.tokenizer_vocab_size = 2047: must be divisible by the TP degree 2",
    ),
    (
        ["--training.dataset", "local", "--training.dataset_path", "/nonexistent/corpus"],
        1,
        "training.dataset_path = '/nonexistent/corpus': does not exist",
    ),
    (["--training.dataset", "local"], 1, "training.dataset_path"),
    (
        ["--model.hf_assets_path", "/nonexistent/tokenizer"],
        1,
        "model.hf_assets_path = '/nonexistent/tokenizer': holds no tokenizer.json",
    ),
    (["--training.seq_len", "1"], 1, "training.seq_len = 1"),
    (["--training.steps", "0"], 1, "training.steps = 0"),
    (["--model.flavor", "2B"], 1, "model.flavor = '2B': choose one of"),
    # Ranges and names torchtitan would only trip over after every rank started
    (["--checkpoint.interval", "0"], 1, "checkpoint.interval = 0: must be at least 1"),
    (["--metrics.log_freq", "0"], 1, "metrics.log_freq = 0: must be at least 1"),
    (["--validation.freq", "0"], 1, "validation.freq = 0: must be at least 1"),
    (["--optimizer.lr", "-1"], 1, "optimizer.lr = -1.0: must lie in (0, ∞)"),
    (["--optimizer.name", "Foo"], 1, "optimizer.name = 'Foo': choose one of ('Adam', 'AdamW', 'LORO')"),
    (
        ["--training.global_batch_size", "10"],
        1,
        "training.global_batch_size = 10: must be -1 or a positive multiple of local_batch_size "
        "× data-parallel degree = 8 × 1",
    ),
    (
        [
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.pipeline_parallel_microbatch_size",
            "3",
        ],
        2,
        "parallelism.pipeline_parallel_microbatch_size = 3: must divide training.local_batch_size = 8",
    ),
    (
        [
            "--boost.tp_scheme",
            "vanilla",
            "--boost.no-group-linears",
            "--boost.rank",
            "63",
            "--parallelism.tensor_parallel_degree",
            "2",
        ],
        2,
        "boost.rank = 63: must be divisible by the TP degree 2",
    ),
    ([], 0, "NGPU = 0: must be at least 1"),
    (
        ["--checkpoint.keep_latest_k", "1"],
        1,
        "checkpoint.keep_latest_k = 1: use 0 to keep every checkpoint, or at least 2",
    ),
    (["--lr_scheduler.min_lr_factor", "1.5"], 1, "lr_scheduler.min_lr_factor = 1.5: must lie in [0, 1]"),
    (
        ["--comm.mode", "local_tensor"],
        2,
        "comm.mode = 'local_tensor': choose one of ('default', 'fake_backend')",
    ),
    (
        ["--comm.mode", "fake_backend"],
        4,
        "checkpoint.enable = True: a dry run plays one rank of NGPU, and a checkpoint holds every rank's shards",
    ),
    (
        ["--optimizer.name", "LORO"],
        1,
        "optimizer.name = 'LORO': LORO moves W = B·A on the rank-r manifold, and under boost.linear = 'cola' σ "
        'between the factors make B·A not the layer\'s weight: use boost.linear = "svd"',
    ),
    (
        ["--optimizer.name", "LORO", "--boost.linear", "svd", "--boost.rank", "100"],
        1,
        "boost.rank = 100: LORO's exact step needs 2·rank ≤ the smallest factored dim (128): use a rank of at most 64",
    ),
    (["--optimizer.loro_freq", "0"], 1, "optimizer.loro_freq = 0: must be at least 1"),
    (
        [
            "--optimizer.name",
            "LORO",
            "--boost.linear",
            "svd",
            "--checkpoint.exclude_from_loading",
            "optimizer",
        ],
        1,
        "checkpoint.exclude_from_loading = ['optimizer']: LORO's exact steps and moment refreshes count in the "
        "optimizer's state",
    ),
    (["--optimizer.loro_lr_scaler", "0"], 1, "optimizer.loro_lr_scaler = 0.0: use -1 (rank / dim"),
    (
        ["--lr_scheduler.decay_type", "cosine_restart", "--lr_scheduler.min_lr_factor", "0"],
        1,
        "lr_scheduler.min_lr_factor = 0.0: must lie in (0, 1] for cosine_restart",
    ),
    (
        ["--lr_scheduler.decay_type", "cosine_restart", "--lr_scheduler.restart_adjust_steps", "300"],
        1,
        "lr_scheduler.restart_adjust_steps = 300: warmup_steps + restart_adjust_steps = 330 must be below the "
        "schedule's 300 steps",
    ),
    (["--training.dataset", "c5"], 1, "training.dataset = 'c5': unknown dataset"),
    (
        ["--training.dataset_path", "corpus.jsonl"],
        1,
        "training.dataset_path = 'corpus.jsonl': the stdlib datasets read the interpreter's "
        "sources and would ignore it",
    ),
    (
        ["--experimental.custom_import", "no.such.module"],
        1,
        "experimental.custom_import = 'no.such.module': no such module",
    ),
    # Feature combinations
    (["--boost.attn_type", "ring"], 1, "boost.attn_type = 'ring': choose one of"),
    (
        ["--boost.attn_type", "flex"],
        1,
        "boost.log_comm = True: FlexAttention's kernel is compiled where it is called",
    ),
    (
        ["--boost.attn_type", "varlen"],
        1,
        "boost.attn_mask_type = 'causal': varlen attends within each document of a packed window",
    ),
    (
        [
            *("--boost.attn_type", "varlen", "--boost.attn_mask_type", "block_causal"),
            *("--parallelism.pipeline_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1"),
        ],
        2,
        "boost.attn_type = 'varlen': varlen's document offsets run over the whole local batch",
    ),
    (
        ["--parallelism.context_parallel_degree", "2", "--training.seq_len", "66"],
        2,
        "training.seq_len = 66: must be divisible by 4 (cp 2 × 2 chunks a rank under the headtail balancer)",
    ),
    (
        [
            "--parallelism.context_parallel_degree",
            "2",
            "--parallelism.context_parallel_load_balancer",
            "ptrr",
        ],
        2,
        "parallelism.context_parallel_load_balancer = 'ptrr': ptrr balances by a FlexAttention block mask",
    ),
    (
        [
            *("--parallelism.context_parallel_degree", "2"),
            *("--boost.attn_type", "varlen", "--boost.attn_mask_type", "block_causal"),
        ],
        2,
        "boost.attn_type = 'varlen': varlen has no context-parallel path",
    ),
    (
        ["--activation_checkpoint.mode", "full", "--boost.activation_checkpoint", "lowrank"],
        1,
        "activation_checkpoint.mode = 'full': conflicts with boost.activation_checkpoint = 'lowrank'",
    ),
    (
        ["--activation_checkpoint.mode", "selective"],
        1,
        "activation_checkpoint.mode = 'selective': BOOST's switch is boost.activation_checkpoint",
    ),
    (
        ["--boost.no-group-linears", "--parallelism.tensor_parallel_degree", "2"],
        2,
        "boost.norm = 'online': online RMSNorm rides in the one grouped down-projection that reads the norm; "
        'ungrouped, several read it: set boost.norm = "sync", or boost.group_linears = true',
    ),
    (
        ["--boost.tp_scheme", "vanilla", "--parallelism.tensor_parallel_degree", "2"],
        2,
        "boost.group_linears = True: vanilla TP shards the rank dim",
    ),
    (
        [
            *("--boost.tp_scheme", "vanilla", "--boost.no-group-linears", "--boost.norm", "sync"),
            *("--boost.sequence_parallel", "--parallelism.tensor_parallel_degree", "2"),
        ],
        2,
        "boost.sequence_parallel = True: only the btp and megatron schemes have a sequence-parallel plan",
    ),
    (
        [
            "--boost.sequence_parallel",
            "--parallelism.tensor_parallel_degree",
            "2",
            "--training.seq_len",
            "63",
        ],
        2,
        "boost.sequence_parallel = True: training.seq_len = 63 must be divisible by the TP degree 2: "
        "boost.sequence_parallel shards the sequence",
    ),
    (
        [
            "--boost.sequence_parallel",
            "--parallelism.tensor_parallel_degree",
            "2",
            "--validation.seq_len",
            "63",
        ],
        2,
        "validation.seq_len = 63: must be divisible by the TP degree 2: boost.sequence_parallel shards the sequence",
    ),
    # The command line, read against the same annotations before torchtitan's parser sees it
    (["--training.steps", "abc"], 1, "command line: --training.steps 'abc': expected int"),
    (
        ["--training.stepz", "3"],
        1,
        "command line: --training.stepz 3: unknown option; did you mean --training.steps?",
    ),
    (
        ["--boost.group_linears", "false"],
        1,
        "'false' follows --boost.group_linears, a flag that takes no value: write --boost.group_linears or "
        "--boost.no-group-linears",
    ),
    # what torchtitan would stop on in each rank with a traceback, or drop silently
    (
        ["--model.converters", "quantize.linear.float8"],
        1,
        "model.converters = ['quantize.linear.float8']: BOOST's model takes none of torchtitan's model converters",
    ),
    (
        ["--compile.enable", "--compile.backend", "foo"],
        1,
        "compile.backend = 'foo': not a torch.compile backend this torch knows: use inductor (the default), "
        "aot_eager or eager",
    ),
    (
        ["--debug.seed", "18446744073709551616"],
        1,
        "debug.seed = 18446744073709551616: torch seeds its generators with a 64-bit integer",
    ),
    (
        ["--comm.init_timeout_seconds", "100000000000000"],
        1,
        "comm.init_timeout_seconds = 100000000000000: must lie in [1, 604800] seconds (a week)",
    ),
    (
        ["--comm.train_timeout_seconds", "0"],
        1,
        "comm.train_timeout_seconds = 0: must lie in [1, 604800] seconds",
    ),
    (
        ["--fault_tolerance.enable"],
        1,
        "fault_tolerance.enable = True: torchtitan 0.2.2's trainer builds no fault-tolerance manager (TorchFT)",
    ),
    (
        ["--memory_estimation.enable"],
        1,
        "memory_estimation.enable = True: torchtitan 0.2.2's trainer runs no memory estimation",
    ),
    (
        ["--parallelism.enable_async_tensor_parallel"],
        1,
        "parallelism.enable_async_tensor_parallel = True: BOOST's parallelization applies no async TP",
    ),
    (["--metrics.enable_wandb"], 1, "metrics.enable_wandb = True: wandb is not installed"),
    (
        ["--optimizer.early_step_in_backward", "--parallelism.pipeline_parallel_degree", "2"],
        2,
        "optimizer.early_step_in_backward = True: torchtitan steps no optimizer in backward under pipeline parallelism",
    ),
    (  # torchtitan's hook steps at every backward: once a micro-batch
        [
            *("--optimizer.early_step_in_backward", "--training.max_norm", "inf"),
            *("--training.global_batch_size", "16", "--training.local_batch_size", "8"),
        ],
        1,
        "optimizer.early_step_in_backward = True: training.global_batch_size = 16 accumulates 2 backward passes a "
        "step, and each would step the optimizer",
    ),
    (
        ["--optimizer.early_step_in_backward"],
        1,
        "optimizer.early_step_in_backward = True: each parameter steps before any gradient norm is taken, so "
        "training.max_norm = 1.0 would clip nothing",
    ),
    (
        ["--checkpoint.last_save_in_hf"],
        1,
        "checkpoint.last_save_in_hf = True: BOOST gives torchtitan's checkpointer no Hugging Face state-dict adapter",
    ),
    (
        ["--training.enable_cpu_offload"],
        1,
        "training.enable_cpu_offload = True: FSDP's CPU offload keeps weights on the CPU for an accelerator, and "
        "this machine has none",
    ),
    (
        ["--checkpoint.async_mode", "async_with_pinned_mem"],
        1,
        "checkpoint.async_mode = 'async_with_pinned_mem': pinned-memory staging copies from an accelerator, and "
        "this machine has none",
    ),
]

# TOML edits of debug.toml ((old text, new text), ...) and the message: types are checked before torchtitan parses.
TOML_CASES = [
    ((("steps = 300", 'steps = "abc"'),), "training.steps = 'abc': expected int, got str"),
    ((("steps = 300", "steps = 4.5"),), "training.steps = 4.5: expected int, got float"),
    ((("steps = 300", "steps = true"),), "training.steps = True: expected int, got bool"),
    ((("rank_ratio = 0.25", 'rank_ratio = "0.25"'),), "boost.rank_ratio = '0.25': expected float, got str"),
    (
        (("group_linears = true", 'group_linears = "yes"'),),
        "boost.group_linears = 'yes': expected bool, got str",
    ),
    (
        (("# The default job", "boost = 5\n# The default job"), ("[boost]", "[boost_section]")),
        "boost = 5: [boost] is a section",
    ),
    ((("[boost]", "[boost.linear]"),), "boost.linear = {"),  # a section where a scalar belongs
    (
        (("[training]", "[training]\nstepz = 3"),),
        "training.stepz: unknown field of [training]; did you mean 'steps'?",
    ),
    ((("[debug]", "[debugging]"),), "debugging: unknown section"),
    (
        (('dtype = "float32"', 'dtype = "float16"'),),
        "training.dtype = 'float16': expected one of ('bfloat16', 'float32')",
    ),
    (
        (('decay_type = "cosine"', 'decay_type = "step"'),),
        "lr_scheduler.decay_type = 'step': expected one of ('linear', 'sqrt', 'cosine', 'cosine_restart')",
    ),
    (
        (('custom_config_module = "torchtitan_ext.config"', ""),),
        "job.custom_config_module = '': the [boost] section needs it",
    ),
    (
        (('custom_config_module = "torchtitan_ext.config"', 'custom_config_module = "no_such_module"'),),
        "job.custom_config_module = 'no_such_module': cannot be imported",
    ),
]


@pytest.mark.parametrize("overrides,world_size,message", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_config_is_refused_with_field_and_fix(overrides, world_size, message):
    with pytest.raises(ConfigError) as err:
        check_job(["--job.config_file", CONFIG, *overrides], world_size)
    assert message in str(err.value)


@pytest.mark.parametrize("edits,message", TOML_CASES, ids=[c[0][0][1][:40] for c in TOML_CASES])
def test_toml_values_of_the_wrong_type_are_refused(tmp_path, edits, message):
    text = Path(CONFIG).read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    variant = tmp_path / "variant.toml"
    variant.write_text(text)
    with pytest.raises(ConfigError) as err:
        check_job(["--job.config_file", str(variant)], 1)
    assert message in str(err.value) and str(variant) in str(err.value)


def test_torchtitans_own_dataclass_checks_end_in_a_named_refusal(tmp_path):
    # torchtitan's Validation.__post_init__ asserts "validation steps must be positive or -1", naming no field.
    variant = tmp_path / "variant.toml"
    variant.write_text(Path(CONFIG).read_text().replace("steps = 10\n", "steps = 0\n", 1))
    with pytest.raises(ConfigError, match=r"^validation\.steps = 0: use -1 for the whole validation set"):
        check_job(["--job.config_file", str(variant)], 1)


def test_type_matching_follows_the_annotation():
    from typing import Literal

    from torchtitan_ext.preflight.config_types import matches

    assert matches(1, float) and not matches(True, int) and not matches(True, float) and not matches(1.0, int)
    assert matches("a", Literal["a", "b"]) and not matches(1, Literal["1"]) and not matches(True, Literal[1])
    assert matches(None, int | None) and matches(3, int | None) and not matches("3", int | None)
    assert (
        matches([["a"]], list[list[str]] | None) and not matches([[1]], list[list[str]]) and matches([], list)
    )
    assert matches({"a": 1}, dict[str, int]) and not matches({"a": "1"}, dict[str, int])


def test_every_field_annotation_is_understood():
    from dataclasses import is_dataclass

    from torchtitan_ext.preflight.config_types import describe, field_types
    from torchtitan_ext.torchtitan_private import merged_job_config_class

    def walk(cls):
        for hint in field_types(cls).values():
            walk(hint) if is_dataclass(hint) else describe(hint)  # raises TypeError for an unknown kind

    walk(merged_job_config_class(["--job.custom_config_module", "torchtitan_ext.config"], None))


def test_toml_only_parse_equals_torchtitans():
    from dataclasses import asdict

    from torchtitan.config import ConfigManager

    argv = ["--job.config_file", CONFIG]
    assert asdict(check_job(argv, 1)) == asdict(ConfigManager().parse_args(argv))


def _override_for(option) -> list[str]:
    """A command-line override of ``option``'s field in the form its annotation takes."""
    import typing

    hint, origin = option.hint, typing.get_origin(option.hint)
    if option.flag is not None:
        return [option.name if option.flag else option.name.rsplit(".", 1)[0] + ".no-" + option.path[-1]]
    if origin is typing.Literal:
        return [option.name, str(typing.get_args(hint)[-1])]
    if hint in (int, float) or hint == float | int:
        return [option.name, "7"]
    if str(hint) == "list[list[str]] | None":
        return [option.name, "a,b", "c"]
    if str(hint) == "list[str]":
        return [f"{option.name}=a,b"]
    if type(None) in typing.get_args(hint):
        return [option.name, "None"]
    return [f"{option.name}=v"]


def _as_dict(values) -> dict:
    from types import SimpleNamespace

    return {k: _as_dict(v) if isinstance(v, SimpleNamespace) else v for k, v in vars(values).items()}


def test_command_line_reading_equals_torchtitans():
    """command_line.parse_overrides against tyro (torchtitan's parse_args): every field of the merged
    JobConfig overridden at once, then tyro's other forms (dashes, "=", no- flags, negative numbers,
    repeats, lists)."""
    from dataclasses import asdict

    from torchtitan.config import ConfigManager

    from torchtitan_ext.preflight.command_line import options
    from torchtitan_ext.preflight.read import read_job
    from torchtitan_ext.torchtitan_private import merged_job_config_class

    base = ["--job.config_file", CONFIG]
    config_cls = merged_job_config_class(base, load_toml(CONFIG))
    # the base's TOML and module stand: a second config file is refused, and the module must import
    kept = {"--job.config_file", "--job.custom_config_module"}
    fields = {o.path: o for o in options(config_cls).values() if o.flag is not False}.values()
    every = [arg for option in fields if option.name not in kept for arg in _override_for(option)]
    forms = [
        "--training.local-batch-size",
        "4",
        "--optimizer.lr=-1e-3",
        "--boost.no_group_linears",
        "--boost.rank",
        "-5",
        "--training.steps",
        "3",
        "--training.steps=1_000",
        "--model.converters=",
        "--debug.seed=None",
        "--training.dataset_path=--x",
        "--training.dataloader.num-workers=2",
        "--training.max_norm",
        "-inf",
        "--parallelism.module_fqns_per_model_part",
        "--lr-scheduler.total-steps",
        "None",
        "--",
    ]
    # torchtitan's _validate_config copies these deprecated aliases over their successors after its parse
    aliases = ["--model.tokenizer_path", "/nonexistent", "--experimental.custom_args_module=some.module"]
    # a list of lists reads on after a value attached with "=" (a later repeat would hide it in `forms`)
    attached = ["--parallelism.module_fqns_per_model_part=a,b", "c", "d,e", "--training.steps", "3"]
    for overrides in (every, forms, attached, aliases):
        argv = [*base, *overrides]
        ours = _as_dict(read_job(argv).values)
        theirs = asdict(ConfigManager().parse_args(argv))
        assert ours == theirs, [k for k in theirs if ours[k] != theirs[k]]


def test_preflight_checks_the_tokenizer_torchtitan_copies_from_the_deprecated_field(tmp_path):
    """``model.tokenizer_path`` is what the trainer loads (torchtitan copies it over ``model.hf_assets_path``):
    the launcher's check refuses a missing one before any process starts."""
    from torchtitan_ext.preflight import preflight

    argv = [
        "--job.config_file",
        CONFIG,
        "--job.dump_folder",
        str(tmp_path),
        "--model.tokenizer_path",
        "/nonexistent",
    ]
    with pytest.raises(
        ConfigError, match=r"^model\.hf_assets_path = '/nonexistent': holds no tokenizer\.json"
    ):
        preflight(argv, 1)


@pytest.mark.parametrize(
    "content,message",
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00\xd0\x9e\xff", "not UTF-8 text (byte 12, line 1)"),
        ("[job]\nx = 1\n".encode("utf-16"), "not UTF-8 text (byte 0, line 1)"),
        (b"[job]\n\x00\x00\x00\n", "TOML syntax error"),
    ],
)
def test_toml_that_is_not_toml_names_the_file_and_place(tmp_path, content, message):
    bad = tmp_path / "binary.toml"
    bad.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        check_job(["--job.config_file", str(bad)], 1)
    assert message in str(err.value) and str(bad) in str(err.value)


def test_docs_list_the_rule_table_and_every_case():
    from torchtitan_ext.preflight.job_rules import rules_markdown

    docs = (ROOT / "docs" / "config_errors.md").read_text()
    generated = docs.split("<!-- rules:begin -->\n", 1)[1].split("<!-- rules:end -->", 1)[0]
    assert generated == rules_markdown(), "regenerate: python -m torchtitan_ext.preflight.job_rules"
    missing = [message for *_, message in [*CASES, *TOML_CASES] if message not in docs]
    assert not missing, missing


def test_toml_syntax_error_names_the_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[job]\ndump_folder = "x"\n[boost\nlinear = "cola"\n')
    with pytest.raises(ConfigError, match=r"TOML syntax error.*line 3"):
        check_job(["--job.config_file", str(bad)], 1)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="job.config_file = '/nope.toml': no such file"):
        check_job(["--job.config_file", "/nope.toml"], 1)
    # an empty attached path is no path: the next argument is not read as one
    for argv in (["--job.config_file=", CONFIG], ["--job.config-file", ""], ["--job.config_file"]):
        with pytest.raises(ConfigError, match="^job.config_file = .*: the flag needs a path"):
            check_job(argv, 1)


def test_simple_fsdps_needs_hold_only_where_fsdp_wraps():
    """SimpleFSDP's needs (a compiled model, its reshard policy) are refused where FSDP wraps the model and
    not on one process in float32, where parallelize_boost applies no FSDP (both read
    ``rules.fsdp_wraps``): there the job trains as with FSDP2."""
    simple = ["--job.config_file", CONFIG, "--boost.fsdp", "simple_fsdp", "--compile.no-enable"]
    for policy in ("default", "never"):
        job = check_job([*simple, "--parallelism.fsdp_reshard_after_forward", policy], 1)
        assert job.boost.fsdp == "simple_fsdp"
        with pytest.raises(ConfigError, match="boost.fsdp = 'simple_fsdp': SimpleFSDP gathers each weight"):
            check_job([*simple, "--parallelism.fsdp_reshard_after_forward", policy], 2)
    tp_bf16 = ["--parallelism.tensor_parallel_degree", "2", "--training.mixed_precision_param", "bfloat16"]
    with pytest.raises(ConfigError, match="SimpleFSDP gathers each weight"):  # FSDP wraps at degree 1
        check_job([*simple, *tp_bf16, "--parallelism.data_parallel_shard_degree", "1"], 2)


def test_local_norm_warns_that_it_is_not_the_dense_model():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_job(
            [
                "--job.config_file",
                CONFIG,
                "--boost.norm",
                "local",
                "--parallelism.tensor_parallel_degree",
                "2",
                "--parallelism.data_parallel_shard_degree",
                "1",
            ],
            2,
        )
    assert any("NOT the dense" in str(w.message) for w in caught)


def test_every_shipped_config_is_valid_for_every_linear_kind():
    from torchtitan_ext.config import linear_kind_overrides

    configs = sorted((ROOT / "train_configs").glob("*.toml"))
    assert len(configs) == 9  # debug and one per flavor: the linear kind is an override
    for cfg in configs:
        values = load_toml(str(cfg))
        world = (
            values["parallelism"]["tensor_parallel_degree"]
            * values["parallelism"]["pipeline_parallel_degree"]
        )
        check_job(["--job.config_file", str(cfg)], world)
        for kind in LINEAR_KINDS:
            overrides = linear_kind_overrides(kind, values)
            job = check_job(["--job.config_file", str(cfg), *overrides], world)
            assert job.boost.linear == kind
            # the overrides the TOML's header lists for this kind
            if kind != values["boost"]["linear"] and cfg.name != "debug.toml":
                assert " ".join(overrides) in cfg.read_text(), (cfg.name, overrides)


@pytest.mark.slow
def test_run_train_refuses_before_starting_any_process(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, NGPU="2")
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path), "--parallelism.tensor_parallel_degree", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "BOOST config error: parallelism" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written
    # NGPU = 0 reaches the preflight (before the launcher's arithmetic divides by it): one line, no traceback.
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path)],
        cwd=ROOT,
        env=dict(env, NGPU="0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "BOOST config error: NGPU = 0: must be at least 1 (processes on this node)"
    )
    # the fake process group by hand, without DRY_RUN=1: each of NGPU processes would play rank 0
    proc = subprocess.run(
        [
            "./run_train.sh",
            "--job.dump_folder",
            str(tmp_path),
            "--comm.mode",
            "fake_backend",
            "--checkpoint.no-enable",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "BOOST config error: comm.mode = 'fake_backend'" in proc.stderr, (
        proc.stderr
    )
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_run_train_uses_or_refuses_a_config_file_given_as_an_argument(tmp_path):
    """``--job.config_file X`` (torchtitan's CLI form) is the config run_train.sh runs, never ignored for the
    default."""
    env = {k: v for k, v in os.environ.items() if k != "CONFIG_FILE"} | {
        "PYTHON": sys.executable,
        "NGPU": "1",
    }
    # A config only this file makes invalid: its refusal shows the file is the one read.
    zero_steps = tmp_path / "zero_steps.toml"
    zero_steps.write_text(
        (ROOT / "train_configs" / "debug.toml").read_text().replace("steps = 300", "steps = 0")
    )
    missing = str(tmp_path / "missing.toml")
    expected = [
        (
            {},
            ["--job.config_file", str(zero_steps)],
            "BOOST config error: training.steps = 0: must be at least 1",
        ),
        (
            {},
            [f"--job.config-file={missing}"],
            f"BOOST config error: job.config_file = {missing!r}: no such file; pass an existing "
            "TOML (see train_configs/)",
        ),
        (
            {"CONFIG_FILE": missing},
            [],
            f"BOOST config error: job.config_file = {missing!r}: no such file; pass an existing "
            "TOML (see train_configs/)",
        ),
        (  # run_train.sh reads a relative path from the repository's root, and the refusal says so
            {"CONFIG_FILE": "my.toml"},
            [],
            f"BOOST config error: job.config_file = 'my.toml': no such file ({ROOT.resolve() / 'my.toml'}); pass an "
            "existing TOML (see train_configs/)",
        ),
        (
            {"CONFIG_FILE": "train_configs/debug.toml"},
            ["--job.config_file", str(zero_steps)],
            f"BOOST config error: job.config_file = {str(zero_steps)!r}: a second config file, after "
            f"'train_configs/debug.toml' (CONFIG_FILE, or an earlier --job.config_file); torchtitan reads the first "
            f"alone: name one, as CONFIG_FILE={zero_steps} or --job.config_file {zero_steps}",
        ),
    ]
    for extra_env, args, message in expected:
        proc = subprocess.run(
            ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), *args],
            cwd=ROOT,
            env=env | extra_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert proc.stderr.strip().splitlines() == [message]  # one line, before any process started
    assert not (tmp_path / "out").exists()


def test_pipeline_rules_accept_exactly_what_torchs_schedules_accept():
    """boost.training.rules' stage and micro-batch rules against the real schedule constructors of
    torch.distributed.pipelining, at pp 2 and 4, 1 to 3 stages per rank and up to 3 micro-batches per
    stage (fake process group: no communication)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from boost.training.rules import pipeline_microbatch_problem, pipeline_stages_problem

    disagreements, tried = [], 0
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        for name in (
            "1F1B",
            "GPipe",
            "Interleaved1F1B",
            "LoopedBFS",
            "InterleavedZeroBubble",
            "ZBVZeroBubble",
            "DualPipeV",
        ):
            schedule = get_schedule_class(name)
            multi_stage = issubclass(schedule, PipelineScheduleMulti)
            for pp in (2, 4):
                group = dist.new_group(list(range(pp)))
                for per_rank in (2, 3) if multi_stage else (1,):
                    stages = pp * per_rank
                    v_shape = name in ("ZBVZeroBubble", "DualPipeV") and per_rank == 2
                    rank0_stages = [0, stages - 1] if v_shape else list(range(0, stages, pp))
                    for n in range(1, 3 * stages + 2):
                        built = [
                            PipelineStage(torch.nn.Linear(2, 2), i, stages, torch.device("cpu"), group=group)
                            for i in rank0_stages
                        ]
                        try:
                            schedule(
                                built if multi_stage else built[0],
                                n_microbatches=n,
                                loss_fn=lambda y, t: y.sum(),
                            )
                            accepted = True
                        except ValueError:
                            accepted = False
                        problem = pipeline_stages_problem(
                            name, multi_stage, pp, stages
                        ) or pipeline_microbatch_problem(name, n, 1, pp, stages)
                        tried += 1
                        if accepted != (problem is None):
                            disagreements.append((name, pp, per_rank, n, accepted, problem))
    finally:
        dist.destroy_process_group()
    assert tried > 300 and not disagreements, disagreements


def test_split_backward_rule_is_torchs_refusal_of_compiled_stages():
    """``rules.PIPELINE_SPLIT_BACKWARD`` (refused with a compiled model) names exactly the schedules whose
    constructors refuse a compiled stage module (fake process group: no communication)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from boost.training.rules import PIPELINE_SPLIT_BACKWARD, PIPELINE_TWO_STAGES_PER_RANK

    refused = set()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        for name in ("1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", *PIPELINE_SPLIT_BACKWARD):
            schedule = get_schedule_class(name)
            multi = issubclass(schedule, PipelineScheduleMulti)
            indices = ([0, 3] if name.lower() in PIPELINE_TWO_STAGES_PER_RANK else [0, 2]) if multi else [0]
            stages = [
                PipelineStage(torch.compile(torch.nn.Linear(2, 2)), i, 4 if multi else 2, torch.device("cpu"))
                for i in indices
            ]
            try:
                schedule(stages if multi else stages[0], n_microbatches=4, loss_fn=lambda y, t: y.sum())
            except RuntimeError as e:
                assert "torch.compile" in str(e), e
                refused.add(name.lower())
    finally:
        dist.destroy_process_group()
    assert refused == set(PIPELINE_SPLIT_BACKWARD)


@pytest.mark.compat
def test_a_split_backward_schedule_is_refused_where_torch_computes_it_wrong():
    """A zero-bubble schedule runs where torch's split backward is exact (the 2.13 stage API) and is refused,
    before any process starts, on the older one (torch 2.11: the compatibility tier)."""
    from torchtitan_ext.torch_private import EXACT_SPLIT_BACKWARD

    argv = [
        "--job.config_file",
        str(ROOT / "train_configs" / "debug.toml"),
        *("--parallelism.tensor_parallel_degree", "2", "--parallelism.pipeline_parallel_degree", "2"),
        *("--parallelism.data_parallel_shard_degree", "1"),
        *("--parallelism.pipeline_parallel_schedule", "InterleavedZeroBubble"),
        *("--training.mixed_precision_param", "float32"),
    ]
    if EXACT_SPLIT_BACKWARD:
        check_job(argv, 4)
    else:
        with pytest.raises(ConfigError, match=r"parallelism.pipeline_parallel_schedule .*before 2.13"):
            check_job(argv, 4)


def test_the_launcher_refuses_a_split_backward_schedule_where_torch_computes_it_wrong(tmp_path, monkeypatch):
    """The launcher's check (``preflight``) asks this torch what the ranks would, before any process starts:
    torch 2.11's split backward (``EXACT_SPLIT_BACKWARD`` False there) refuses a zero-bubble schedule."""
    from torchtitan_ext import torch_private
    from torchtitan_ext.preflight import preflight

    argv = [
        *("--job.config_file", CONFIG, "--job.dump_folder", str(tmp_path)),
        *("--parallelism.pipeline_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1"),
        *("--parallelism.pipeline_parallel_schedule", "InterleavedZeroBubble"),
    ]
    if torch_private.EXACT_SPLIT_BACKWARD:
        preflight(argv, 2)
    monkeypatch.setattr(torch_private, "EXACT_SPLIT_BACKWARD", False)  # torch 2.11's stage API
    with pytest.raises(
        ConfigError, match=r"^parallelism.pipeline_parallel_schedule = 'InterleavedZeroBubble'"
    ):
        preflight(argv, 2)


@pytest.mark.slow
def test_run_train_refuses_log_ranks_that_are_not_its_ranks(tmp_path):
    """``LOG_RANK`` is checked as ``DRY_RUN_RANK`` is, before any process starts: torchrun stops on a
    non-integer with a traceback, and a rank beyond NGPU would leave the console silent."""
    from torchtitan_ext.preflight.check import log_ranks

    assert log_ranks("0, 1", 2) == "0,1" and log_ranks("", 2) is None and log_ranks(None, 2) is None
    env = dict(os.environ, PYTHON=sys.executable, NGPU="1")
    for raw, shown in (("x", "'x'"), ("5", "'5'"), ("0,-1", "'0,-1'")):
        proc = subprocess.run(
            ["./run_train.sh", "--job.dump_folder", str(tmp_path)],
            cwd=ROOT,
            env=dict(env, LOG_RANK=raw),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines() == [
            f"BOOST config error: LOG_RANK = {shown}: must be ranks of this node's NGPU = 1 processes: "
            "comma-separated integers from 0 to 0"
        ]
    assert not any(tmp_path.iterdir())

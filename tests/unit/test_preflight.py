"""Bad input is refused before any work, with the field, the value and the fix (issues 10 and 14).

Each row of ``CASES`` is also a row of docs/config_errors.md, and the docs' rule table is
``job_rules.RULES`` rendered (both checked below).
"""

from __future__ import annotations

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
        ["--boost.activation_checkpoint", "lowrank"],
        1,
        "boost.activation_checkpoint = 'lowrank': keeps BTP's r-wide all-reduced latents, and at "
        'tensor_parallel_degree = 1 there are none: use "full" (or tp_scheme = "btp" with tensor_parallel_degree > 1)',
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
        ["--boost.sequence_parallel"],
        1,
        "boost.sequence_parallel = True: shards the sequence over the TP ranks, and at tensor_parallel_degree = 1 "
        "there are none: set it false (or tensor_parallel_degree > 1)",
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
        "training.max_norm = 1.0 would clip nothing, and BOOST's non-finite guard, which reads that norm before "
        "every checkpoint, would let a NaN/inf step be applied and saved",
    ),
    (  # unclipped: still no norm for the guard (tried: lr 1e30 saved a checkpoint of NaNs, exit 0)
        ["--optimizer.early_step_in_backward", "--training.max_norm", "inf"],
        1,
        "optimizer.early_step_in_backward = True: each parameter steps before any gradient norm is taken, so "
        "BOOST's non-finite guard, which reads that norm before every checkpoint, would let a NaN/inf step be "
        "applied and saved",
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
    (
        ["--lr_scheduler.total_steps", "5", "--training.steps", "10"],
        1,
        "lr_scheduler.total_steps = 5: ends the learning-rate schedule before training.steps = 10",
    ),
    (
        ["--profiling.enable_profiling", "--profiling.profile_freq", "2"],
        1,
        "profiling.profile_freq = 2: each profiled window is profiler_warmup + profiler_active = 3 + 1 = 4 steps",
    ),
    (
        ["--checkpoint.exclude_from_loading", "optim"],
        1,
        "checkpoint.exclude_from_loading = ['optim']: 'optim' is not a state a checkpoint holds",
    ),
    (
        ["--checkpoint.initial_load_in_hf"],
        1,
        "checkpoint.initial_load_in_hf = True: BOOST gives torchtitan's checkpointer no Hugging Face "
        "state-dict adapter",
    ),
    (
        ["--checkpoint.create_seed_checkpoint"],
        2,
        "checkpoint.create_seed_checkpoint = True: torchtitan writes the seed checkpoint from one unsharded "
        "process: run it at NGPU=1, not 2",
    ),
    (
        ["--checkpoint.no-enable", "--checkpoint.load_step", "3"],
        1,
        "checkpoint.enable = False: torchtitan's checkpointer loads nothing while it is off: "
        "checkpoint.load_step = 3 would be ignored",
    ),
    (
        ["--training.dataloader.num_workers", "2"],
        1,
        "training.dataloader.num_workers = 2: dataset 'stdlib' is one map-style dataset that every "
        "DataLoader worker reads whole",
    ),
    (
        ["--job.dump_folder", "README.md/out"],
        1,
        "job.dump_folder = 'README.md/out': README.md is a file, not a folder",
    ),
    (
        ["--boost.lax_gate_form", "kron"],
        1,
        "boost.lax_gate_form = 'kron': kron computes LaX's tensorized gate, and boost.linear = \"cola\" has no gate",
    ),
    (
        ["--validation.dataset", "stdlib"],
        1,
        "validation.dataset = 'stdlib': is the training split: the loss would score training text",
    ),
    (
        [
            *("--training.dataset", "local", "--training.dataset_path", "corpus"),
            *("--validation.dataset", "local", "--validation.dataset_path", "./corpus"),
        ],
        1,
        "validation.dataset_path = './corpus': is training.dataset_path: the loss would score training text",
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


def test_the_states_exclude_from_loading_may_name_are_torchtitans():
    """The preflight, which imports no torchtitan, names the checkpointer's states from its own list: held
    to torchtitan's (its checkpointer's four, and the trainer's ``train_state``)."""
    import inspect

    from torchtitan import train
    from torchtitan.components import checkpoint

    from torchtitan_ext.preflight.job_rules.runs import CHECKPOINT_STATES

    torchtitans = [checkpoint.MODEL, checkpoint.OPTIMIZER, checkpoint.LR_SCHEDULER, checkpoint.DATALOADER]
    assert 'states={"train_state": self}' in inspect.getsource(train.Trainer.__init__)
    assert sorted(CHECKPOINT_STATES) == sorted([*torchtitans, "train_state"])

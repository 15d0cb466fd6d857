"""BOOST's options of a training run: the ``[boost]`` section of a TOML and its ``--boost.*`` overrides.

Plain data with the defaults; ``torchtitan_ext.config`` merges it into torchtitan's schema, and the
after-training tools read a run's section through it.
"""

from dataclasses import dataclass


@dataclass
class BoostOptions:
    linear: str = "cola"
    """Projection kind of the seven block linears: full | svd | cola | lax."""

    rank: int = 0
    """Bottleneck rank r of every low-rank projection; 0 derives it as ``rank_ratio * dim``."""

    rank_ratio: float = 0.25
    """r / d when ``rank`` is 0 (the reference paper's r = d/4)."""

    lax_gate: str = "tensorized"
    """LaX's gate on the latent each projection carries from the previous block (boost.linear = "lax"):
    tensorized (a Kronecker pair of small square factors over r, the LaX authors' default) | linear
    (r×r with a bias) | none (the carry as it is). Other kinds ignore it."""

    lax_gate_form: str = "factored"
    """How the tensorized LaX gate is computed, the same function either way: factored (its two small
    contractions, as the LaX authors compute it) | kron (one [r, r] GEMM a projection by kron(D, E): r²
    multiply-adds a token instead of r·(a + b), in a GEMM's efficient shape). Other gates and kinds ignore
    factored; kron is refused with them."""

    only_lr_act: bool = True
    """CoLA/LaX MLP: true computes down(gate(x) * up(x)), gate's latent SiLU its only activation; false
    keeps SwiGLU's full-width SiLU on top, down(SiLU(gate(x)) * up(x)), as the CoLA authors' 60M and
    130M configs do (their modeling code's ``only_lr_act``). The svd and full kinds keep SwiGLU either way."""

    group_linears: bool = True
    """One GEMM for the q/k/v and gate/up down-projections, one batched GEMM for their up-projections."""

    norm: str = "online"
    """Pre-norm under tensor parallelism: online (statistic rides in the down-projection's
    all-reduce) | sync (its own all-reduce) | local (shard-local; NOT equivalent to the dense model)."""

    tp_scheme: str = "btp"
    """Tensor-parallel plan when parallelism.tensor_parallel_degree > 1:
    btp (bottleneck-aware) | vanilla (low-rank Megatron-style) | megatron (dense only)."""

    sequence_parallel: bool = False
    """Shard on the sequence what every TP rank would compute whole: megatron, the norms and the residual
    between blocks (torchtitan's plan); btp, each bottleneck's r-wide latent (σ and LaX's crossing on a
    rank's b·s/t tokens, between a reduce-scatter and an all-gather in place of the all-reduce). Needs
    training.seq_len divisible by the TP degree; vanilla has no such plan."""

    fsdp: str = "fully_shard"
    """How FSDP shards the model where it does (data_parallel_shard_degree > 1, or bf16 under TP/PP):
    fully_shard (torch's FSDP2: gathers and reductions from Python hooks around each block) |
    simple_fsdp (torchtitan's SimpleFSDP: both traced into each compiled block's graphs, for a host
    that issues less; needs compile, no PP, HSDP, CPU offload or LORO, reshard policy "default")."""

    cudagraphs: bool = False
    """Replay each compiled block's forward and backward as CUDA graphs (inductor's cudagraph trees):
    the host issues one graph launch per block where it issued every kernel. A GPU's mechanism: on a
    CPU the blocks run as without it. Needs the compiled model (inductor), SimpleFSDP where FSDP wraps,
    one micro-batch a step, no PP, HSDP (data-parallel replicas), CPU offload or LORO."""

    activation_checkpoint: str = "none"
    """none | full (torchtitan's whole-block AC) | lowrank (keep r-wide latents, recompute the rest)."""

    attn_type: str = "sdpa"
    """Attention kernel, as torchtitan's LLaMA names it: sdpa (torch's scaled_dot_product_attention) |
    flex (FlexAttention) | varlen (torch's varlen_attn over the packed documents; block_causal only).
    Which device trains each is torch's to say: the preflight asks it on this machine's device."""

    attn_mask_type: str = "causal"
    """causal (each window one sequence) | block_causal (a token attends only within its own document of
    the packed window; documents end at the tokenizer's EOS, as every BOOST dataset frames them)."""

    tokenizer_vocab_size: int = 2048
    """Vocabulary of the BPE tokenizer trained offline when model.hf_assets_path holds none."""

    cache_dir: str = ""
    """Where the offline tokenizer and corpus index are cached ('' = $BOOST_CACHE or ~/.cache/boost)."""

    log_comm: bool = True
    """Count collectives of every step (kind, count, bytes) and log them with the metrics."""

    stop_grace_s: float = 120.0
    """Seconds from a SIGTERM/SIGINT to the end of every rank: the run saves at the next agreed step
    boundary within it, or exits without a checkpoint. Keep it under the cluster's own grace."""

    stop_check_every: int = 5
    """Ranks agree on a stop (one small all-reduce, a host sync) every this many steps."""

"""Peak memory of one GPU of a layout: what a training step holds at its highest, in closed form.

Per GPU (bytes; ``P`` = a TP rank's parameters of its stage: the ones its TP plan shards, ``/tp``, and the
ones it replicates whole, ``step_time.tp_replicated_params``: LaX's gates and norms, the norms on a replicated
residual; ``P_layer`` a layer's of them; ``T = b·s/cp`` the tokens of a rank, ``L = ceil(n_layers/pp)``;
``dp`` below is FSDP's shard degree, ``dp_shard × cp`` under context parallelism; HSDP's replicas hold the
same shards):

==================  ============================================================================
states              ``16·P / dp``: fp32 master weights, fp32 grads, Adam m and v, sharded by
                    FSDP over dp (every rank its share: the batched ``[G, d_out, r]`` up-projections
                    are sharded on ``r``, ``torchtitan_ext.infra.parallelize.shard_placement``)
unsharded           under FSDP2: ``2·dtype·P_layer`` for the all-gathered weights of the layer in
                    use and the next one (prefetch), ``(dtype + 4)·V·d / tp`` for the all-gathered
                    embedding or head with its unsharded fp32 gradient (in that unit's backward);
                    under PP (m > 1, any FSDP degree) instead ``(dtype + 4)·P``: torch's schedule keeps
                    the stage's weights gathered and its gradients unsharded across micro-batches;
                    with ``fsdp_reshard_after_forward = "never"`` (no PP) instead ``dtype·P +
                    4·V·d / tp``: every layer's gathered weights held from its forward to its
                    backward, and the head's fp32 gradient;
                    and ``(dtype + 4)·P_layer`` in a layer's backward: its unsharded gradient in
                    the compute dtype and FSDP2's fp32 reduce-scatter input. Where FSDP2 does not wrap
                    (``boost.training.rules.fsdp_wraps``: one device, where torchtitan's autocast casts
                    in place, or TP/PP in float32 at a shard degree of 1; the gradients are the fp32
                    ones of ``states``) this term is 0
activations         ``(L · in_flight · a_keep + a_layer) · ACTIVATION_CALIBRATION`` with
                    ``in_flight = min(m, pp)`` micro-batches held by the first 1F1B stage;
                    ``a_layer`` = the full per-layer activations (one layer live in backward, or
                    recomputed), and ``a_keep`` by AC mode: none ``a_layer``; full ``2·T·d_res``
                    (block input); lowrank ``2·T·(d_res + 7·r)``; compiled, full and lowrank also
                    keep attention's output and log-sum-exp (``2·T·heads_local·head_dim +
                    4·T·heads_local``: ``boost.training.parallel.activation_checkpoint``)
a_layer             ``2·T·(Σ GEMM inputs + 4·heads_local·head_dim + 4·d_res + 2·f_local) + 4·T·heads_local``
                    (bf16 GEMM inputs, q/k/v/out of flash attention, norm and residual inputs,
                    gate/up for the product; fp32 log-sum-exp)
LaX                 the carried latents ``2·T·7r`` in ``a_keep`` under every AC (held from the block that
                    makes them to the backward of the next); the H100's 7B@16 LaX rank reserved 23.39 GiB
                    at micro-batch 4 (2026-11-27) against the model's 25.6 (+9%; CoLA's 16.19 against
                    17.4, +7%). Without AC every layer also keeps its crossings' own tensors,
                    ``LAX_CROSSING_KEPT_BYTES·T·7r`` (below: fitted on the H200's 1B LaX peak)
sequence parallel   ``boost.sequence_parallel``: btp's latent on a rank's ``T/tp`` tokens, so LaX's carry is
                    ``2·(T/tp)·7r``, and the compiled or replayed low-rank AC keeps each bottleneck's
                    reduce-scattered rows beside its gathered latent (``+2·(T/tp)·7r``); megatron's residual
                    on ``T/tp`` tokens: full AC's block input and ``a_layer``'s norm and residual inputs
                    are a ``tp``-th (its GEMMs still read the gathered ``T`` tokens)
context parallel    ``a_layer`` adds the window's gathered keys and values, ``2·dtype·b·s·kv``
                    (``kv``: ``comm_volume.attention_kv_width``), the ring's fp32 dK|dV accumulators and
                    the buffer they rotate through (``2 · 4·2·T·kv``), or under a boolean mask its
                    rows ``b·(s/cp)·s`` (1 byte) and the kernel's additive copy of them in the compute
                    dtype; ``a_keep`` adds the gathered keys and values where the compiled low-rank AC
                    keeps the collectives' outputs, and all of ``a_layer``'s where no AC does
CUDA graphs         ``boost.cudagraphs``: the kept activations once more, ``L · in_flight · a_keep ·
                    ACTIVATION_CALIBRATION``, in ``activations`` (the graphs record into a private memory
                    pool, which the caching allocator's blocks and the pool's do not share). Fitted, not
                    derived: three H100 peaks at micro-batch 4 (2026-11-27; 7B@16 btp and megatron under
                    SimpleFSDP, the 1B CoLA on one GPU with full AC) rose by 10.69, 4.23 and 5.67 GiB with
                    the graphs, where the kept activations are 10.55, 5.87 and 3.56 GiB; the totals come
                    out within -1.6% and +2.1% of the three measured peaks
logits              ``3 · 4·T·V/tp · ACTIVATION_CALIBRATION`` (fp32 logits, their grad, softmax) on
                    the last stage
workspace           ``1 GiB`` outside the caching allocator (CUDA context, NCCL buffers)
==================  ============================================================================

``d_res``, ``heads_local`` and ``f_local`` are what the scheme leaves on a rank (``boost.training.rules.SCHEMES``):
``d_res`` is ``d/tp`` for btp (the sharded residual) and ``d`` for megatron and vanilla; vanilla keeps
the heads and the FFN whole. The ``2`` bytes of bf16 above are ``dtype_bytes`` (4 for the fp32 dry runs of
``bench.dry_run``).

``ACTIVATION_CALIBRATION`` is measured: on one H100 (torch 2.11, compiled, bf16 via FSDP2, 2026-11-26) the
shipped 7B at 16 GPUs (rank 0: tp 4, FSDP 4, btp, low-rank AC) peaked at 16.11 GiB of the caching
allocator's reserved memory at micro-batch 4 and 29.33 GiB at micro-batch 8: 3.305 GiB per sequence of
4096 tokens where the formulas above count 2.824, while the part that does not grow with the batch
(2.89 GiB) is what they count (3.00). What a compiled step holds beyond the named tensors (the
backward's gradient buffers, the allocator's rounding of the per-micro-batch blocks) is taken as
proportional to them. docs/perf_model.md, "Micro-batch advice", has the check on 9 measured peaks.

Example::

    >>> round(memory_per_gpu("7B", "btp", 4, 1, 4, "lowrank", micro_batch=4, seq_len=4096,
    ...                      num_microbatches=1, compiled=True, workspace_bytes=0) / 2**30, 1)
    16.2
"""

from __future__ import annotations

import math

from boost.planning.comm_volume import RING_GRADIENT_BYTES, attention_kv_width
from boost.planning.perf_model.step_time import (
    args_params,
    block_gemms,
    model_args,
    tp_replicated_params,
)
from boost.training.rules import AC_MODES, KINDS, SCHEMES, context_parallel_path, fsdp_wraps

GIB = 2**30
WORKSPACE_BYTES = GIB
# Bytes a latent element (a token's r-wide latent of one projection) that a LaX crossing keeps for its
# backward beyond CoLA's σ, in every layer where nothing is recomputed (AC none): the norm's input and
# statistics, its float32 output under autocast, the gate's intermediate. Fitted, not derived: on one H200
# (2026-11-28, bench/results/gpu.md) the 1B trainer's LaX peaked 14.46 GiB above its CoLA at micro-batch 4,
# AC none, where the carried latents account for 3.38 (the model then 11.7% under the LaX peak); 7 bytes
# put it 4.9% over, as the model is over the CoLA peak (7.0%). Of those 7 bytes, the CPU's compiled 1B
# block saves 3.4 for backward (saved-tensor hooks, LayerNorm in float32 as CUDA's autocast computes it);
# the rest is what a GPU step holds beyond the saved tensors, not separated. Under AC, the crossing is
# recomputed with its layer: the calibration covers it (the 7B@16 LaX rank, low-rank AC: +9%).
LAX_CROSSING_KEPT_BYTES = 7
# The share of a GPU's memory a planned peak leaves free: the peak is what a step's first steps reserve,
# and a long run reserves more (the caching allocator's fragmentation grows with the shapes it has served;
# validation's forward at its own batch; a checkpoint's staging); inductor's autotuning takes workspace at
# the first compile; and an "80 GB" GPU gives torch a little less than 80 GiB (the driver keeps some).
HEADROOM = 0.10


def usable_bytes(gpu_memory_bytes: float) -> float:
    """What a planned peak (``memory_per_gpu``, its workspace included) may reach on a GPU of this memory."""
    return (1 - HEADROOM) * gpu_memory_bytes


# Measured per-sequence peak over the formulas' per-sequence count: 3.305 / 2.824 GiB (module docstring).
ACTIVATION_CALIBRATION = 1.17


def memory_per_gpu(
    flavor: str,
    scheme: str,
    tp: int,
    pp: int,
    dp: int,
    ac: str,
    *,
    micro_batch: int,
    seq_len: int,
    num_microbatches: int,
    vocab_size: int = 32000,
    linear: str = "cola",
    dtype_bytes: int = 2,
    workspace_bytes: float = WORKSPACE_BYTES,
    compiled: bool = False,
    rank: int | None = None,
    reshard_after_forward: bool = True,
    cp: int = 1,
    attn_type: str = "sdpa",
    attn_mask_type: str = "causal",
    sequence_parallel: bool = False,
    cudagraphs: bool = False,
    dp_replicate: int = 1,
    lax_gate: str = "tensorized",
    lax_gate_form: str = "factored",
    group_linears: bool | None = None,
    breakdown: bool = False,
) -> float | dict[str, float]:
    """Peak bytes on one GPU (module docstring's formulas). ``dp`` is the FSDP degree (its shard degree;
    ``dp_replicate`` HSDP's replicas, which hold the same shards); ``dtype_bytes``
    the dtype the run computes in (2 for bf16, 4 for fp32 as in the CPU dry runs of ``bench.dry_run``): the
    all-gathered weights, the unsharded gradients and the activations take it; the fixed
    ``workspace_bytes`` is a GPU's (CUDA context, NCCL); ``compiled``: torch.compile, whose AC keeps
    attention's output; ``rank`` the bottleneck rank (``None``: the flavor's); ``reshard_after_forward``
    FSDP's (``boost.training.rules.reshards_after_forward``: False keeps the gathered weights of every
    layer from its forward to its backward). ``breakdown=True``: the
    terms (``states``, ``unsharded``, ``activations``, ``logits``, ``workspace``) and their sum under
    ``"total"``. ``cp``: the context-parallel degree (a rank holds ``s/cp`` of each window, FSDP shards over
    ``dp·cp``), with the attention's ``attn_type`` and ``attn_mask_type`` (what CP gathers).
    ``sequence_parallel``: ``boost.sequence_parallel`` (the scheme's plan: ``TPScheme.sequence_parallel``);
    ``cudagraphs``: ``boost.cudagraphs`` (the blocks replayed as CUDA graphs: their pool, module docstring);
    ``lax_gate``, ``lax_gate_form``, ``group_linears``: the model's (``model_args``)."""
    if ac not in AC_MODES:
        raise ValueError(f"unknown activation_checkpoint {ac!r}; choose one of {AC_MODES}")
    args = model_args(
        flavor,
        scheme,
        vocab_size,
        linear,
        rank,
        lax_gate=lax_gate,
        lax_gate_form=lax_gate_form,
        group_linears=group_linears,
    )
    T = micro_batch * seq_len // cp
    # whether FSDP2 wraps the model at all: the runtime's rule (no FSDP: nothing gathered, no reduce-scatter
    # input; one device, or TP/PP in float32 at a shard degree of 1)
    precision = "bfloat16" if dtype_bytes == 2 else "float32"
    wraps = fsdp_wraps(
        dp_replicate=dp_replicate, dp_shard=dp, cp=cp, tp=tp, pp=pp, mixed_precision_param=precision
    )
    dp = dp * cp  # FSDP's mesh: dp_shard × cp
    layers = math.ceil(args.n_layers / pp)
    params = args_params(args)
    # a layer's parameters on a TP rank: its sharded ones' tp-th, the ones the plan replicates whole
    # (tp_replicated_params: the norms on a replicated residual, LaX's gates and norms)
    replicated = tp_replicated_params(args, scheme) / args.n_layers
    layer_params = ((params - 2 * args.dim * vocab_size) / args.n_layers - replicated) / tp + replicated
    # a TP rank's parameters of its stage: the first stage holds the embedding, the last the head (each
    # vocab-parallel); without PP one rank holds both
    params_stage = layer_params * layers + (2 if pp == 1 else 1) * args.dim * vocab_size / tp
    if not wraps:
        unsharded = 0.0  # no FSDP2: autocast casts each weight where it is used, or float32 computes as is
    elif pp > 1 and num_microbatches > 1:
        # torch's pipeline schedule neither reshards nor reduce-scatters between micro-batches: the
        # stage's weights stay gathered, and its gradients unsharded (fp32), for the whole step; at an
        # FSDP degree of 1 as well, where FSDP2 wraps for the precision (its gathered copy is the bf16 one:
        # the 13B@8 rank, tp 4 × pp 2, measured 19.36 GiB on the H100 where the model without it said 15.3)
        unsharded = (dtype_bytes + 4) * params_stage
    elif pp == 1 and not reshard_after_forward:
        # every layer's weights stay gathered from its forward to its backward; the head's fp32 gradient
        unsharded = dtype_bytes * params_stage + 4 * args.dim * vocab_size / tp
    else:
        # the layer in use and the next one (FSDP prefetch); the embedding or head with its unsharded
        # fp32 gradient, together in that unit's backward (V·d/tp: as large as a layer at 1B, tp 1)
        unsharded = 2 * dtype_bytes * layer_params + (dtype_bytes + 4) * args.dim * vocab_size / tp
    if wraps:
        # a layer's backward: its unsharded gradient, and FSDP2's fp32 reduce-scatter input beside it
        unsharded += (dtype_bytes + 4) * layer_params
    record = SCHEMES[scheme]
    heads, d_res, f_local = (
        record.local(args.n_heads, tp),
        record.residual_width(args.dim, tp),
        record.local(args.ffn_dim, tp),
    )
    gemm_inputs = sum(g.K * g.batch for g in block_gemms(args, scheme, tp, T))
    # the residual stream's tokens on a rank (megatron's sequence parallelism splits them), and the rows of
    # each latent σ and LaX's crossing run on (btp's)
    T_res = T // tp if record.splits(sequence_parallel, tp, "residual") else T
    rows = record.latent_tokens(T, tp, sequence_parallel)
    a_layer = (
        dtype_bytes * (T * (gemm_inputs + 4 * heads * args.head_dim + 2 * f_local) + T_res * 4 * d_res)
        + 4 * T * heads
    )
    carried = 0.0
    if KINDS[args.linear].latent_crossing:
        # LaX: the latents a block hands the next (7r a token, whole on every rank or its rows), held from
        # the block that makes them to the backward of the one that reads them, whatever the AC. (The
        # crossing's own temporaries in a layer, ~4 more r-wide tensors a projection, are left to the
        # calibration: with them the 7B@16 rank's LaX peak came out 2.3 GiB above the H100's 23.4.)
        carried = dtype_bytes * rows * 7 * args.rank
    # low-rank AC keeps each bottleneck's latent, and under btp's sequence parallelism its rows as well
    # (the reduce-scatter's output, from which the recompute runs σ without communication)
    kept_rows = rows if rows < T else 0
    a_keep = {
        "none": a_layer,
        "full": dtype_bytes * T_res * d_res,
        "lowrank": dtype_bytes * (T_res * d_res + (T + kept_rows) * 7 * args.rank),
    }[ac]
    a_keep += carried  # once a layer, in what every layer keeps (the live layer's is among them)
    if KINDS[args.linear].latent_crossing and ac == "none":
        a_keep += LAX_CROSSING_KEPT_BYTES * rows * 7 * args.rank
    if compiled and ac != "none":
        a_keep += dtype_bytes * T * heads * args.head_dim + 4 * T * heads  # attention output and log-sum-exp
    if cp > 1 or attn_mask_type == "block_causal":
        kv = attention_kv_width(args, scheme, tp, attn_type)
        gathered = 2 * dtype_bytes * micro_batch * seq_len * kv if cp > 1 else 0  # the window's K|V
        dense_mask = attn_type == "sdpa" and attn_mask_type == "block_causal"
        mask_rows = (1 + dtype_bytes) * micro_batch * T * seq_len if dense_mask else 0  # bool, additive copy
        ring = context_parallel_path(attn_type, attn_mask_type) == "ring" and cp > 1
        # dK|dV (float32) and the buffer they rotate through
        accumulators = 2 * RING_GRADIENT_BYTES * 2 * T * kv if ring else 0
        a_layer += gathered + mask_rows + accumulators
        if ac == "none":
            a_keep += gathered + mask_rows
        elif ac == "lowrank" and compiled:
            a_keep += gathered  # the collectives' outputs are kept (activation_checkpoint.KEPT_COLLECTIVES)
    in_flight = min(num_microbatches, pp)
    kept = layers * in_flight * a_keep * (2 if cudagraphs else 1)  # the graphs' pool: module docstring
    parts = {
        "states": 16 * params_stage / dp,
        "unsharded": unsharded,
        "activations": (kept + a_layer) * ACTIVATION_CALIBRATION,
        "logits": 3 * 4 * T * vocab_size / tp * ACTIVATION_CALIBRATION,
        "workspace": float(workspace_bytes),
    }
    total = sum(parts.values())
    return {**parts, "total": total} if breakdown else total

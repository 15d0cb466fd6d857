"""Analytic step-time model of BOOST's three tensor-parallel schemes (DESIGN §6, §7).

One iteration = ``num_microbatches`` micro-batches of ``b·s`` tokens through a ``tp × pp`` layout
(each of ``dp`` replicas does the same), then one Adam step. Per layer and micro-batch, per rank:

==================  =============================================================================
component           time
==================  =============================================================================
GEMM (M, K, N)      ``max(2MKN / (peak·η(AI)), bytes / (HBM·η_mem)) + t_kernel`` for the forward
                    GEMM and its two backward GEMMs; ``AI = 2MKN / bytes``,
                    ``η(AI) = η_max · AI / (AI + AI_half)``: skinny d×r GEMMs have low AI and run
                    further from peak — no per-scheme factor
attention (flash)   ``4·T·s·heads_local·head_dim · ½ (causal) · (1 fwd + 2.5 bwd) / (peak·η_attn)``;
                    ``T = b·s/cp`` a context-parallel rank's queries over the window's keys (a
                    balanced share of the triangle); SDPA under block_causal computes every score of
                    its dense mask (× 2), FlexAttention and varlen at most the triangle
elementwise         bytes of norms, residual adds, RoPE, SwiGLU/σ, loss ``/ (HBM·η_mem)``; the norms and
                    adds on the residual's tokens (``TPScheme.residual_shape``: a ``t``-th under
                    megatron's sequence parallelism); btp's norm Function only at ``t > 1``
collectives         ``count·latency + ring·elements·dtype / bus_bw``; ring = 2(t-1)/t (all-reduce),
                    (t-1)/t (all-gather, reduce-scatter); counts and elements from
                    ``boost.planning.comm_volume.per_layer``; TP collectives are on the critical path
pipeline (1F1B)     ``(m + p - 1) · t_stage``, i.e. a bubble of ``(p-1)/(m+p-1)``; a stage sends the
                    residual on (``TPScheme.residual_shape``) and receives its gradient, at ``bus_bw``
                    while the pipeline's ``tp·dp·cp·pp`` consecutive ranks fit a node, else at
                    ``inter_bw`` (``Hardware.group_bw``, FSDP's and CP's rule)
context parallel    the attention's collectives of ``comm_volume.context_parallel_layer`` over the
                    ``cp`` group (NVLink while ``tp·cp`` fits a node), on the critical path; torch's
                    ring runs ``cp`` kernels a direction and merges their float32 partial outputs
                    (``cp·t_kernel`` and ``cp · 6 / 9`` passes over ``4·T·heads_local·head_dim`` bytes,
                    forward / backward) and rotates its dK|dV in float32
                    (``comm_volume.RING_GRADIENT_BYTES``); FSDP and Adam over ``dp·cp`` (torchtitan's FSDP
                    mesh is ``dp_shard × cp``)
recompute           ``full``: the block's forward again, its TP and CP collectives included;
                    ``lowrank``: the up-projection GEMMs a backward reads (every B but the block's last;
                    the down-projections' collective outputs are kept), LaX's gates and the elementwise
                    work, no collective (DESIGN §4); either recomputes attention eager, not compiled
                    (``boost.training.parallel.activation_checkpoint.KEPT_ATTENTION``)
optimizer           Adam over the rank's parameter shard, memory-bound (28 B/param)
FSDP                ``(n-1)/n · P/(tp·pp) · (g·dtype + 4) / bw`` over ``n = dp·cp``: ``g`` all-gathers
                    a step, 2 where the forward reshards (``rules.reshards_after_forward``; torchtitan's
                    "default" except under PP) else 1, and a float32 reduce-scatter; NVLink while the
                    group's ``tp·dp·cp`` consecutive ranks fit a node; overlapped, only the excess shows
==================  =============================================================================

``num_microbatches`` defaults to ``max(1, pp - 1)``, the reading of the reference paper's PP rows
(``boost.planning.perf_model.reference_table.paper_microbatches`` says why).

Example::

    >>> round(predict_step_time("7B", "btp", tp=4, pp=1, hardware="a100", micro_batch=4, seq_len=4096), 2)
    0.76
    >>> parts = predict_step_time("7B", "vanilla", tp=4, pp=1, hardware="a100", micro_batch=4, seq_len=4096,
    ...                           breakdown=True)
    >>> btp = predict_step_time("7B", "btp", 4, 1, hardware="a100", micro_batch=4, seq_len=4096,
    ...                         breakdown=True)
    >>> parts["attn_fwd"] > 3 * btp["attn_fwd"]
    True
"""

from __future__ import annotations

import math
from typing import NamedTuple

from boost.planning.comm_volume import context_parallel_layer, per_layer
from boost.planning.perf_model.hardware import Hardware, get_hardware
from boost.training.model.args import ModelArgs, crossing_params, matmul_params
from boost.training.rules import (
    AC_MODES,
    KINDS,
    SCHEMES,
    TP_SCHEMES,
    context_parallel_path,
    most_balanced_factor_pair,
    reshards_after_forward,
)


def model_args(
    flavor: str,
    scheme: str,
    vocab_size: int = 32000,
    linear: str = "cola",
    rank: int | None = None,
    *,
    lax_gate: str = "tensorized",
    lax_gate_form: str = "factored",
    group_linears: bool | None = None,
) -> ModelArgs:
    """The model a scheme runs (``TPScheme.kind_for``); ``rank`` ``None`` is the flavor's; ``lax_gate`` and
    ``lax_gate_form`` LaX's (``boost.lax_gate``, ``boost.lax_gate_form``); ``group_linears`` the TOML's
    ``boost.group_linears``, ``None``: grouped where the scheme keeps the rank dim whole."""
    if scheme not in TP_SCHEMES:
        raise ValueError(f"unknown tp scheme {scheme!r}; choose one of {TP_SCHEMES}")
    kind = SCHEMES[scheme].kind_for(linear)
    if not SCHEMES[scheme].takes(KINDS[kind]):
        raise ValueError(f"scheme {scheme!r} needs a low-rank linear kind, not {kind!r}")
    overrides = {} if rank is None else {"rank": rank}
    return ModelArgs.from_flavor(
        flavor,
        linear=kind,
        vocab_size=vocab_size,
        group_linears=SCHEMES[scheme].groups_linears if group_linears is None else group_linears,
        lax_gate=lax_gate,
        lax_gate_form=lax_gate_form,
        **overrides,
    )


def args_params(args: ModelArgs) -> int:
    """Parameters of the model: block factors (from matmul_params' shapes), embedding, LM head, norms, and
    LaX's norms and gates."""
    return (
        matmul_params(args)
        + args.dim * args.vocab_size
        + (2 * args.n_layers + 1) * args.dim
        + crossing_params(args)
    )


def tp_replicated_params(args: ModelArgs, scheme: str) -> int:
    """Parameters every TP rank of ``scheme`` holds whole (its plan's ``Replicate`` ones): the RMSNorm weights
    on a replicated residual (all of them under vanilla and megatron; under btp, whose residual is sharded,
    the final norm alone, which reads the gathered residual) and LaX's norms and gates (the latent they
    act on is whole on a rank: replicated after btp's all-reduce, gathered under vanilla)."""
    norms = 1 if SCHEMES[scheme].shards_residual else 2 * args.n_layers + 1
    return norms * args.dim + crossing_params(args)


def rank_params(args: ModelArgs, scheme: str, tp: int) -> float:
    """Parameters one TP rank holds: the sharded ones' ``1/tp``, the replicated ones whole
    (``tp_replicated_params``); before FSDP shards them all over its own ranks."""
    replicated = tp_replicated_params(args, scheme)
    return (args_params(args) - replicated) / tp + replicated


class Gemm(NamedTuple):
    """``batch`` forward GEMMs ``y[M,N] = x[M,K] W[K,N]`` in one kernel, and their role in the block:
    ``dense`` a dense projection, ``down`` a bottleneck's A (its output is what the collectives carry),
    ``up`` a bottleneck's B, ``last_up`` the block's last B (its output only the residual add reads, so no
    backward needs it), ``gate`` LaX's gate."""

    M: int
    K: int
    N: int
    batch: int = 1
    role: str = "dense"


# Low-rank AC keeps every down-projection's collective output, so its recompute runs the up-projections whose
# outputs a backward reads and LaX's gates, never a collective (boost.training.parallel.activation_checkpoint)
LOWRANK_RECOMPUTED = frozenset({"up", "gate"})


def block_gemms(
    args: ModelArgs, scheme: str, tp: int, tokens: int, sequence_parallel: bool = False
) -> list[Gemm]:
    """Forward GEMMs of one block on one rank (``Gemm``: shape, batch and role).

    Each width is what the scheme leaves on a rank (``boost.training.rules.TPScheme``): the residual (q/k/v's,
    gate/up's inputs, o's and down's outputs), the heads (q/k/v's outputs, o's input), the FFN columns
    and the rank. btp: A row-parallel on its d_in, B column-parallel on d_out, r whole; vanilla: A
    column-parallel on r, B row-parallel (a full-width partial output); megatron: the dense projections
    column- then row-parallel, each its own kernel (``ModelArgs.grouped``: dense projections never are).
    ``sequence_parallel``: LaX's gates on a rank's rows (btp).
    """
    record, t, T = SCHEMES[scheme], tp, tokens
    kv = args.kv_heads * args.head_dim
    res, heads, kv_heads, ff = (
        record.residual_width(args.dim, t),
        record.local(args.dim, t),
        record.local(kv, t),
        record.local(args.ffn_dim, t),
    )
    ins = [res, res, res, heads, res, res, ff]  # q k v o gate up down
    outs = [heads, kv_heads, kv_heads, res, ff, ff, res]
    if not args.low_rank:
        return [Gemm(T, k, n) for k, n in zip(ins, outs)]
    r = record.latent_width(args.rank, t)
    gates = _lax_gate_gemms(args, record.latent_tokens(T, t, sequence_parallel))
    if args.grouped:
        block = [
            Gemm(T, res, 3 * r, 1, "down"),
            Gemm(T, r, heads, 1, "up"),
            Gemm(T, r, kv_heads, 2, "up"),  # A_qkv; B_q, B_k|B_v batched
            Gemm(T, heads, r, 1, "down"),
            Gemm(T, r, res, 1, "up"),  # o
            Gemm(T, res, 2 * r, 1, "down"),
            Gemm(T, r, ff, 2, "up"),  # A_gu; B_g|B_u batched
            Gemm(T, ff, r, 1, "down"),
            Gemm(T, r, res, 1, "up"),  # down
        ]
    else:
        block = [g for k, n in zip(ins, outs) for g in (Gemm(T, k, r, 1, "down"), Gemm(T, r, n, 1, "up"))]
    block[-1] = block[-1]._replace(role="last_up")  # down's B
    return gates + block


def crossing_members(args: ModelArgs) -> list[int]:
    """The members of each of a block's bottlenecks, one LaX crossing each: q|k|v, o, gate|up, down grouped,
    else the seven projections alone."""
    return [3, 1, 2, 1] if args.grouped else [1] * 7


def _lax_gate_gemms(args: ModelArgs, tokens: int) -> list[Gemm]:
    """LaX's gates in one block, on the whole latent of ``tokens`` (every scheme holds it whole on a rank:
    replicated after BTP's all-reduce, gathered under vanilla; a rank's rows of it under btp's sequence
    parallelism), one batched GEMM per bottleneck's members: the
    tensorized pair as ``[T·a, b]×[b, b]`` then ``[T·b, a]×[a, a]``, the linear gate ``[T, r]×[r, r]``,
    the tensorized gate's kron form one ``[T, r]×[r, r]`` per member. Charged to every block (the first
    crosses nothing: 1/n_layers of it too much). The roofline charges the pair's small GEMMs at the
    memory's speed; on an H100 they ran far below it (``bench/results/gpu.md``)."""
    if not KINDS[args.linear].latent_crossing or args.lax_gate == "none":
        return []
    r = args.rank
    members = crossing_members(args)
    if args.lax_gate == "linear":
        return [Gemm(tokens, r, r, g, "gate") for g in members]
    if args.lax_gate_form == "kron":
        return [Gemm(tokens, r, r, 1, "gate")] * sum(members)
    a, b = most_balanced_factor_pair(r)
    return [
        gemm
        for g in members
        for gemm in (Gemm(tokens * a, b, b, g, "gate"), Gemm(tokens * b, a, a, g, "gate"))
    ]


def gemm_time(M: int, K: int, N: int, hw: Hardware, dtype_bytes: int = 2, batch: int = 1) -> float:
    """Roofline of ``batch`` GEMMs ``[M,K]×[K,N]`` in one kernel, efficiency from arithmetic intensity."""
    flops = 2.0 * M * K * N * batch
    moved = dtype_bytes * (M * K + K * N + M * N) * batch
    ai = flops / moved
    eta = hw.eta_gemm * ai / (ai + hw.ai_half)
    return max(flops / (hw.peak_flops * eta), moved / (hw.mem_bw * hw.eta_hbm)) + hw.t_kernel


def _gemm_fwd_bwd(gemms, hw, dtype_bytes) -> tuple[float, float]:
    fwd = sum(gemm_time(M, K, N, hw, dtype_bytes, b) for M, K, N, b, *_ in gemms)
    # dX = dY Wᵀ is [M,N]×[N,K]; dW = Xᵀ dY is [K,M]×[M,N]
    bwd = sum(
        gemm_time(M, N, K, hw, dtype_bytes, b) + gemm_time(K, M, N, hw, dtype_bytes, b)
        for M, K, N, b, *_ in gemms
    )
    return fwd, bwd


def collective_time(
    volume: dict[str, tuple[int, int]],
    tp: int,
    hw: Hardware,
    dtype_bytes: int = 2,
    bus_bw: float | None = None,
) -> float:
    """``Σ count·latency + ring_factor·elements·dtype/bus_bw`` over collective kinds; 0 at tp = 1."""
    if tp <= 1:
        return 0.0
    bw = bus_bw or hw.bus_bw
    # an all-to-all's elements are what one rank sends (torch's ring passes its whole buffer on)
    ring = {
        "all_reduce": 2 * (tp - 1) / tp,
        "all_gather": (tp - 1) / tp,
        "reduce_scatter": (tp - 1) / tp,
        "all_to_all": 1.0,
    }
    return sum(
        count * hw.latency + ring[kind] * elements * dtype_bytes / bw
        for kind, (count, elements) in volume.items()
    )


def _elementwise_bytes(
    args: ModelArgs,
    scheme: str,
    tp: int,
    tokens: int,
    norm: str,
    dtype_bytes: int,
    sequence_parallel: bool = False,
) -> tuple[float, float]:
    """HBM bytes of one block's memory-bound ops, forward and backward (passes × width × T × dtype).

    Passes: RMSNorm 2 fwd / 3 bwd, residual add 3 / 1, RoPE 2 / 2 on q and k, SwiGLU or gate⊙up
    3 / 5 on f, σ on each r-latent 2 / 3, each at the width the scheme leaves on a rank: megatron and
    vanilla keep the residual and norms (vanilla also attention's RoPE and the f-wide product)
    replicated at full width; btp works on d/t, f/t, and under its sequence parallelism on the latents
    of a rank's ``T/t`` tokens; megatron's sequence parallelism runs the norms and residual adds on a rank's
    ``T/t`` tokens (``TPScheme.residual_shape``).
    """
    record, d, r, t = SCHEMES[scheme], args.dim, args.rank, tp
    kv = args.kv_heads * args.head_dim
    _, res_tokens, res = record.residual_shape(1, tokens, d, t, sequence_parallel)
    qk, ff = record.local(d + kv, t), record.local(args.ffn_dim, t)
    # the residual stream's passes, per token of the micro-batch (a rank runs them on res_tokens of them)
    res_share = res_tokens / tokens
    fwd = res_share * (2 * 2 + 2 * 3) * res + 2 * qk + 3 * ff
    bwd = res_share * (2 * 3 + 2 * 1) * res + 2 * qk + 5 * ff
    # the latents' passes, per token of the micro-batch (a rank computes them on latent_tokens of them)
    share = record.latent_tokens(tokens, t, sequence_parallel) / tokens
    lat_fwd = lat_bwd = 0.0
    if KINDS[args.linear].latent_activation:
        lat = 7 * record.latent_width(r, t)
        lat_fwd, lat_bwd = 2 * lat, 3 * lat
    if KINDS[args.linear].latent_crossing:
        # LaX on the whole latents: the carry's add (3 / 1) and the LayerNorm (2 / 3), as the residual's
        lat_fwd, lat_bwd = lat_fwd + (3 + 2) * 7 * r, lat_bwd + (1 + 3) * 7 * r
    # a sharded residual's norm runs the custom norm Function; TP is applied only at t > 1
    # (torchtitan_ext.infra.parallelize), so one rank runs plain RMSNorm
    if record.shards_residual and norm in ("online", "sync") and t > 1:
        # fp32 Σx² over the shard, and the rescale of the (3r, 2r) latents, both directions
        fwd, bwd = fwd + res_share * 2 * res * 2, bwd + res_share * 2 * res * 2
        lat_fwd, lat_bwd = lat_fwd + 2 * 5 * r, lat_bwd + 2 * 5 * r
    fwd, bwd = fwd + share * lat_fwd, bwd + share * lat_bwd
    return fwd * tokens * dtype_bytes, bwd * tokens * dtype_bytes


def attention_time(
    args: ModelArgs,
    scheme: str,
    tp: int,
    micro_batch: int,
    seq_len: int,
    hw: Hardware,
    cp: int = 1,
    dense_mask: bool = False,
) -> tuple[float, float]:
    """Causal flash attention, fwd and bwd (bwd = 2.5× fwd FLOPs: it recomputes the scores): a CP rank's
    ``s/cp`` queries over the window's ``s`` keys; ``dense_mask``: every score computed (SDPA under a
    boolean mask skips none), else the causal half."""
    heads = SCHEMES[scheme].local(args.n_heads, tp)  # vanilla: q/k/v replicated
    fwd = 4.0 * micro_batch * (seq_len // cp) * seq_len * heads * args.head_dim * (1.0 if dense_mask else 0.5)
    rate = hw.peak_flops * hw.eta_attn
    return fwd / rate, 2.5 * fwd / rate


def layer_times(
    args: ModelArgs,
    scheme: str,
    tp: int,
    *,
    micro_batch: int,
    seq_len: int,
    hw: Hardware,
    norm: str = "online",
    dtype_bytes: int = 2,
    sequence_parallel: bool = False,
    cp: int = 1,
    attn_type: str = "sdpa",
    attn_mask_type: str = "causal",
    activation_checkpoint: str = "none",
    compiled: bool = False,
) -> dict[str, float]:
    """Seconds of one block for one micro-batch on one rank, by component and direction (``cp``: the
    rank's share ``s/cp`` of each window), and what ``activation_checkpoint`` runs again in its backward
    (``compiled``: torch.compile, whose AC keeps attention's output)."""
    T = micro_batch * seq_len // cp
    gemms = block_gemms(args, scheme, tp, T, sequence_parallel)
    g_fwd, g_bwd = _gemm_fwd_bwd(gemms, hw, dtype_bytes)
    dense = attn_type == "sdpa" and attn_mask_type == "block_causal"  # a boolean mask: no score skipped
    a_fwd, a_bwd = attention_time(args, scheme, tp, micro_batch, seq_len, hw, cp, dense)
    e_fwd, e_bwd = (
        b / (hw.mem_bw * hw.eta_mem)
        for b in _elementwise_bytes(args, scheme, tp, T, norm, dtype_bytes, sequence_parallel)
    )
    vol = per_layer(args, scheme, T, norm=norm, sequence_parallel=sequence_parallel)
    cp_bytes = context_parallel_layer(
        args, scheme, tp, micro_batch, seq_len, cp, attn_type, attn_mask_type, dtype_bytes=dtype_bytes
    )
    cp_bw = hw.group_bw(tp * cp)  # a CP group: tp·cp consecutive ranks
    if cp > 1 and context_parallel_path(attn_type, attn_mask_type) == "ring":
        # torch's ring: a kernel per step, its partial output and log-sum-exp merged in float32 (forward),
        # its dq, dk, dv accumulated in float32 (backward)
        out = 4 * T * SCHEMES[scheme].local(args.n_heads, tp) * args.head_dim
        a_fwd += cp * (hw.t_kernel + 6 * out / (hw.mem_bw * hw.eta_mem))
        a_bwd += cp * (hw.t_kernel + 9 * out / (hw.mem_bw * hw.eta_mem))
    comm_fwd = collective_time(vol["forward"], tp, hw, dtype_bytes)
    cp_fwd = collective_time(cp_bytes["forward"], cp, hw, 1, cp_bw)  # in bytes already
    attention_again = 0.0 if compiled else a_fwd  # compiled, both ACs keep attention's output
    if activation_checkpoint == "lowrank":
        up, _ = _gemm_fwd_bwd([g for g in gemms if g.role in LOWRANK_RECOMPUTED], hw, dtype_bytes)
        recompute = up + e_fwd + attention_again
    elif activation_checkpoint == "full":
        recompute = g_fwd + e_fwd + attention_again + comm_fwd + cp_fwd
    else:
        recompute = 0.0
    return {
        "gemm_fwd": g_fwd,
        "gemm_bwd": g_bwd,
        "attn_fwd": a_fwd,
        "attn_bwd": a_bwd,
        "elem_fwd": e_fwd,
        "elem_bwd": e_bwd,
        "comm_fwd": comm_fwd,
        "comm_bwd": collective_time(vol["backward"], tp, hw, dtype_bytes),
        "cp_fwd": cp_fwd,
        "cp_bwd": collective_time(cp_bytes["backward"], cp, hw, 1, cp_bw),
        "recompute": recompute,
    }


def _head_time(args, tp, tokens, hw, dtype_bytes) -> float:
    """LM head (vocab-parallel) fwd + bwd and the fp32 cross-entropy passes over the logits."""
    f, b = _gemm_fwd_bwd([(tokens, args.dim, args.vocab_size // tp, 1)], hw, dtype_bytes)
    return f + b + 6 * tokens * (args.vocab_size // tp) * 4 / (hw.mem_bw * hw.eta_hbm)


def predict_step_time(
    flavor: str,
    scheme: str,
    tp: int,
    pp: int,
    *,
    hardware: str | Hardware,
    micro_batch: int,
    seq_len: int,
    dp: int = 1,
    num_microbatches: int | None = None,
    activation_checkpoint: str = "none",
    dtype_bytes: int = 2,
    vocab_size: int = 32000,
    linear: str = "cola",
    norm: str = "online",
    sequence_parallel: bool = False,
    cp: int = 1,
    attn_type: str = "sdpa",
    attn_mask_type: str = "causal",
    compiled: bool = False,
    fsdp_reshard_after_forward: str = "default",
    breakdown: bool = False,
) -> float | dict[str, float]:
    """Seconds per optimizer step (``breakdown=True``: the components, their sum under ``"total"``).

    ``num_microbatches`` defaults to the paper convention ``max(1, pp - 1)`` (module docstring); ``dp``
    is the data-parallel degree (the batches a step reads), ``cp`` the context-parallel one (each of those
    batches' windows over ``cp`` ranks: ``tp·pp·dp·cp`` GPUs). ``compiled``: torch.compile, whose full and
    low-rank AC keep attention's output (not recomputed); ``fsdp_reshard_after_forward``: torchtitan's
    policy (``boost.training.rules.reshards_after_forward``), which decides FSDP's all-gathers a step.
    """
    hw = get_hardware(hardware)
    if activation_checkpoint not in AC_MODES:
        raise ValueError(f"unknown activation_checkpoint {activation_checkpoint!r}; choose one of {AC_MODES}")
    reshards = reshards_after_forward(fsdp_reshard_after_forward, pp > 1)
    args = model_args(flavor, scheme, vocab_size, linear)
    m = num_microbatches or max(1, pp - 1)
    lt = layer_times(
        args,
        scheme,
        tp,
        micro_batch=micro_batch,
        seq_len=seq_len,
        hw=hw,
        norm=norm,
        dtype_bytes=dtype_bytes,
        sequence_parallel=sequence_parallel,
        cp=cp,
        attn_type=attn_type,
        attn_mask_type=attn_mask_type,
        activation_checkpoint=activation_checkpoint,
        compiled=compiled,
    )
    layer = hw.t_layer + sum(lt.values())  # the recompute included
    layers_per_stage = math.ceil(args.n_layers / pp)
    T = micro_batch * seq_len // cp
    head = _head_time(args, tp, T, hw, dtype_bytes)
    # the residual crosses each stage boundary as the scheme leaves it on a rank, and its gradient back
    residual = SCHEMES[scheme].residual_shape(micro_batch, seq_len // cp, args.dim, tp, sequence_parallel)
    crossing = math.prod(residual)
    if KINDS[args.linear].latent_crossing:  # LaX's carried latents cross beside it (a rank's share)
        tokens = SCHEMES[scheme].latent_tokens(micro_batch * (seq_len // cp), tp, sequence_parallel)
        crossing += tokens * 7 * args.rank
    # a stage's neighbour is tp·dp·cp ranks away (pp is the mesh's outermost dim): the pipeline spans
    # tp·dp·cp·pp consecutive ranks, and crosses nodes where that exceeds one
    p2p = 2 * crossing * dtype_bytes / hw.group_bw(tp * dp * cp * pp) if pp > 1 else 0.0
    # 1F1B runs at the pace of the slowest stage: the last one, which also holds the LM head and loss
    stage = layers_per_stage * layer + p2p + head
    pipeline = (m + pp - 1) * stage
    # Adam over this rank's shard of the parameters and fp32 states: ~28 B/param read + written
    shards = dp * cp  # FSDP's mesh: dp_shard × cp
    params = rank_params(args, scheme, tp) / (pp * shards)  # TP-replicated parameters whole on a rank
    optimizer = params * 28 / (hw.mem_bw * hw.eta_hbm)
    # FSDP (module docstring), overlapped with compute: only the excess shows
    fsdp = 0.0
    if shards > 1:
        # the backward gathers again what the forward resharded; under PP the schedule keeps the stage's
        # weights gathered, and its gradients unreduced, across micro-batches: once a step
        gathers = 2 if reshards else 1
        # torchtitan's mesh is (pp, dp_replicate, dp_shard, cp, tp), tp innermost: an FSDP group spans
        # tp·dp·cp consecutive ranks, whatever pp
        bw = hw.group_bw(tp * shards)
        # gradients reduce-scattered in float32: torchtitan's training.mixed_precision_reduce, the one value
        # it takes
        fsdp = (shards - 1) / shards * rank_params(args, scheme, tp) / pp * (gathers * dtype_bytes + 4) / bw
    exposed_fsdp = max(0.0, fsdp - pipeline)
    total = pipeline + optimizer + exposed_fsdp
    if not breakdown:
        return total
    parts = {k: v * layers_per_stage * (m + pp - 1) for k, v in lt.items()}
    parts.update(
        head=head,
        p2p=p2p * (m + pp - 1),
        bubble=(pp - 1) * stage,
        optimizer=optimizer,
        fsdp_exposed=exposed_fsdp,
        total=total,
    )
    return parts

"""Layout planner: enumerate (scheme, TP, PP, DP, AC), drop what does not fit in memory, rank by
``boost.perf_model`` step time, print the best layouts and the TOML overrides of the first.

    python -m boost.layout_planner --flavor 7B --gpus 16 --hardware a100 [--seq-len 4096 --micro-batch 4
                         --memory-gb 80 --linear cola --num-microbatches M --top 10]

Per-GPU memory (bytes, ``P`` = parameters of the rank's stage, ``T = b·s``, ``L = ceil(n_layers/pp)``):

==================  ============================================================================
weights, grads,     ``16·P / (tp·dp)``: fp32 master weights, fp32 grads, Adam m and v, sharded by
Adam states         FSDP over dp (every rank its share: the batched ``[G, d_out, r]`` up-projections
                    are sharded on ``r``, ``torchtitan_ext.infra.parallelize.shard_placement``); plus
                    ``2·dtype·P_layer / tp`` for the all-gathered weights of the layer in use and the
                    next one (FSDP prefetch), and ``(dtype + 4)·V·d / tp`` for the all-gathered
                    embedding or head with its unsharded fp32 gradient (in that unit's backward);
                    under PP (m > 1, dp > 1) instead ``(dtype + 4)·P / tp``: torch's schedule keeps
                    the stage's weights gathered and its gradients unsharded across micro-batches;
                    and ``(dtype + 4)·P_layer / tp`` in a layer's backward: its unsharded gradient in
                    the compute dtype and FSDP2's fp32 reduce-scatter input (``reduce_dtype``; FSDP2
                    wraps every model, at a shard degree of 1 too, under mixed precision with TP/PP)
activations         ``L · in_flight · a_keep + a_layer`` with ``in_flight = min(m, pp)`` micro-batches
                    held by the first 1F1B stage; ``a_layer`` = the full per-layer activations (one
                    layer live in backward, or recomputed), and ``a_keep`` by AC mode:
                    none ``a_layer``; full ``2·T·d_res`` (block input); lowrank ``2·T·(d_res + 7·r)``;
                    compiled, full and lowrank also keep attention's output and log-sum-exp
                    (``2·T·heads_local·head_dim + 4·T·heads_local``: ``boost.parallel.activation_checkpoint``)
a_layer             ``2·T·(Σ GEMM inputs + 4·heads_local·head_dim + 4·d_res + 2·f_local) + 4·T·heads_local``
                    (bf16 GEMM inputs, q/k/v/out of flash attention, norm and residual inputs,
                    gate/up for the product; fp32 log-sum-exp)
logits              ``3 · 4·T·V/tp`` (fp32 logits, their grad, softmax) on the last stage
workspace           ``1 GiB`` (NCCL buffers, cuBLAS workspace, allocator slack)
==================  ============================================================================

``d_res``, ``heads_local`` and ``f_local`` are what the scheme leaves on a rank (``boost.rules.SCHEMES``):
``d_res`` is ``d/tp`` for btp (the sharded residual) and ``d`` for megatron and vanilla; vanilla keeps
the heads and the FFN whole. The ``2`` bytes of bf16 above are ``dtype_bytes`` (4 for the fp32 dry runs of
``bench.dry_run``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from boost import rules
from boost.model.args import FLAVORS, flavor_rank
from boost.perf_model import (
    args_params,
    block_gemms,
    get_hardware,
    model_args,
    predict_step_time,
)
from boost.rules import AC_MODES, SCHEMES

WORKSPACE_BYTES = 2**30


@dataclass
class Layout:
    scheme: str
    tp: int
    pp: int
    dp: int
    ac: str
    memory_bytes: float
    step_time: float
    tokens_per_s: float

    def overrides(self, linear: str, num_microbatches: int, micro_batch: int, seq_len: int) -> str:
        """The ``run_train.sh`` / torchtitan command-line overrides of this layout."""
        parts = [
            f"--parallelism.tensor_parallel_degree {self.tp}",
            f"--parallelism.pipeline_parallel_degree {self.pp}",
            f"--parallelism.data_parallel_shard_degree {self.dp}",
            f"--boost.linear {SCHEMES[self.scheme].kind_for(linear)}",
            f"--boost.tp_scheme {self.scheme}",
            f"--boost.activation_checkpoint {self.ac}",
        ]
        if not rules.groups_linears(self.scheme):
            parts.append("--boost.no-group-linears")  # tyro's flag form of a boolean
        # torchtitan splits local_batch_size into micro-batches of pipeline_parallel_microbatch_size
        parts.append(f"--training.local_batch_size {micro_batch * (num_microbatches if self.pp > 1 else 1)}")
        parts.append(f"--training.seq_len {seq_len}")
        if self.pp > 1:
            parts.append(f"--parallelism.pipeline_parallel_microbatch_size {micro_batch}")
        return " ".join(parts)


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
) -> float:
    """Peak bytes on one GPU (module docstring's formulas). ``dtype_bytes`` is the dtype the run computes
    in (2 for bf16, 4 for fp32 as in the CPU dry runs of ``bench.dry_run``): the all-gathered weights,
    the unsharded gradients and the activations take it; the fixed ``workspace_bytes`` is a GPU's (CUDA
    context, NCCL); ``compiled``: torch.compile, whose AC keeps attention's output."""
    args = model_args(flavor, scheme, vocab_size, linear)
    T = micro_batch * seq_len
    layers = math.ceil(args.n_layers / pp)
    params = args_params(args)
    layer_params = (params - 2 * args.dim * vocab_size) / args.n_layers
    # the first stage holds the embedding, the last the head; without PP one rank holds both
    params_stage = layer_params * layers + (2 if pp == 1 else 1) * args.dim * vocab_size
    if pp > 1 and num_microbatches > 1 and dp > 1:
        # torch's pipeline schedule neither reshards nor reduce-scatters between micro-batches: the
        # stage's weights stay gathered, and its gradients unsharded (fp32), for the whole step
        unsharded = (dtype_bytes + 4) * params_stage / tp
    else:
        # the layer in use and the next one (FSDP prefetch); the embedding or head with its unsharded
        # fp32 gradient, together in that unit's backward (V·d/tp: as large as a layer at 1B, tp 1)
        unsharded = 2 * dtype_bytes * layer_params / tp + (dtype_bytes + 4) * args.dim * vocab_size / tp
    # a layer's backward: its unsharded gradient, and FSDP2's fp32 reduce-scatter input beside it
    unsharded += (dtype_bytes + 4) * layer_params / tp
    states = 16 * params_stage / (tp * dp) + unsharded
    record = SCHEMES[scheme]
    heads, d_res, f_local = (
        record.local(args.n_heads, tp),
        record.residual_width(args.dim, tp),
        record.local(args.ffn_dim, tp),
    )
    gemm_inputs = sum(K * batch for _, K, _, batch in block_gemms(args, scheme, tp, T))
    a_layer = (
        dtype_bytes * T * (gemm_inputs + 4 * heads * args.head_dim + 4 * d_res + 2 * f_local) + 4 * T * heads
    )
    a_keep = {
        "none": a_layer,
        "full": dtype_bytes * T * d_res,
        "lowrank": dtype_bytes * T * (d_res + 7 * args.rank),
    }[ac]
    if compiled and ac != "none":
        a_keep += dtype_bytes * T * heads * args.head_dim + 4 * T * heads  # attention output and log-sum-exp
    in_flight = min(num_microbatches, pp)
    activations = layers * in_flight * a_keep + a_layer
    logits = 3 * 4 * T * vocab_size / tp
    return states + activations + logits + workspace_bytes


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def enumerate_layouts(
    flavor: str,
    gpus: int,
    hardware: str,
    *,
    seq_len: int = 4096,
    micro_batch: int = 4,
    memory_gb: float | None = None,
    linear: str = "cola",
    num_microbatches: int | None = None,
    vocab_size: int = 32000,
) -> list[Layout]:
    """All layouts that fit, fastest (highest tokens/s per step) first. Raises ``ValueError`` on
    bad input or when nothing fits."""
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; choose one of {sorted(FLAVORS)}")
    hw = get_hardware(hardware)
    if gpus < 1:
        raise ValueError(f"--gpus must be positive, got {gpus}")
    budget = (memory_gb * 1e9) if memory_gb else hw.memory_bytes
    kind = rules.linear_kind(linear)
    # the schemes this kind runs under tensor parallelism (the preflight's rule, at any TP > 1)
    schemes = [scheme.name for scheme in SCHEMES.values() if scheme.takes(kind)]
    f = FLAVORS[flavor]
    n_layers, rank = f.n_layers, flavor_rank(flavor)
    sharded = {**rules.tp_sharded_dims(f.n_heads, f.n_kv_heads, f.dim, f.ffn_dim), "vocab_size": vocab_size}
    layouts = []
    for scheme in schemes:
        for tp in _divisors(gpus):
            # TP stays inside a node (the planner's choice); the rest are the preflight's rules
            if (
                tp > hw.gpus_per_node
                or rules.tp_shape_problem(sharded, tp)
                or rules.vanilla_rank_problem(scheme, rank, tp)
            ):
                continue
            for pp in _divisors(gpus // tp):
                # at least 2 layers per stage (the planner's choice)
                if rules.pipeline_problem(linear, pp, n_layers) or (pp > 1 and n_layers / pp < 2):
                    continue
                dp = gpus // (tp * pp)
                m = num_microbatches or pp  # 1F1B with m = pp: bubble (p-1)/(2p-1)
                for ac in AC_MODES:
                    if rules.activation_checkpoint_problem(ac, scheme, tp):
                        continue
                    mem = memory_per_gpu(
                        flavor,
                        scheme,
                        tp,
                        pp,
                        dp,
                        ac,
                        micro_batch=micro_batch,
                        seq_len=seq_len,
                        num_microbatches=m,
                        vocab_size=vocab_size,
                        linear=linear,
                        compiled=True,
                    )  # BOOST ships compiled
                    if mem > budget:
                        continue
                    t = predict_step_time(
                        flavor,
                        scheme,
                        tp,
                        pp,
                        hardware=hw,
                        micro_batch=micro_batch,
                        seq_len=seq_len,
                        dp=dp,
                        num_microbatches=m,
                        activation_checkpoint=ac,
                        vocab_size=vocab_size,
                        linear=linear,
                    )
                    tokens = m * dp * micro_batch * seq_len
                    layouts.append(Layout(scheme, tp, pp, dp, ac, mem, t, tokens / t))
    if not layouts:
        raise ValueError(
            f"no layout of {flavor} on {gpus} {hw.name} GPU(s) fits in {budget / 1e9:.0f} GB at micro-batch "
            f"{micro_batch} × seq {seq_len}; add GPUs, lower --micro-batch or --seq-len, or raise --memory-gb"
        )
    return sorted(layouts, key=lambda l: (-round(l.tokens_per_s, 6), l.memory_bytes))


def _positive_int(text: str) -> int:
    """argparse type: a whole number ≥ 1 (argparse names the option when this raises)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m boost.layout_planner", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--flavor", required=True)
    parser.add_argument("--gpus", type=_positive_int, required=True)
    parser.add_argument("--hardware", default="a100")
    parser.add_argument("--seq-len", type=_positive_int, default=4096)
    parser.add_argument("--micro-batch", type=_positive_int, default=4)
    parser.add_argument(
        "--memory-gb", type=float, default=None, help="per-GPU memory (default: the hardware's)"
    )
    parser.add_argument("--linear", default="cola", help="cola | svd | lax (btp, vanilla) or full (megatron)")
    parser.add_argument(
        "--num-microbatches", type=_positive_int, default=None, help="per step under PP (default: pp)"
    )
    parser.add_argument("--top", type=_positive_int, default=10)
    opts = parser.parse_args(argv)
    try:
        layouts = enumerate_layouts(
            opts.flavor,
            opts.gpus,
            opts.hardware,
            seq_len=opts.seq_len,
            micro_batch=opts.micro_batch,
            memory_gb=opts.memory_gb,
            linear=opts.linear,
            num_microbatches=opts.num_microbatches,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"{opts.flavor} on {opts.gpus} × {opts.hardware}, seq {opts.seq_len}, micro-batch {opts.micro_batch}, "
        f"linear {opts.linear}: {len(layouts)} feasible layouts"
    )
    print(
        f"{'#':>3} {'scheme':<9}{'tp':>3}{'pp':>3}{'dp':>4} {'ac':<8}{'mem GB':>8}{'step s':>9}{'tokens/s':>11}"
    )
    for i, l in enumerate(layouts[: opts.top], 1):
        print(
            f"{i:>3} {l.scheme:<9}{l.tp:>3}{l.pp:>3}{l.dp:>4} {l.ac:<8}{l.memory_bytes / 1e9:>8.1f}"
            f"{l.step_time:>9.3f}{l.tokens_per_s:>11,.0f}"
        )
    best = layouts[0]
    m = opts.num_microbatches or max(1, best.pp)
    print("\nbest layout overrides:\n" + best.overrides(opts.linear, m, opts.micro_batch, opts.seq_len))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Layout planner: enumerate (scheme, TP, PP, DP, AC), drop what does not fit in memory, rank by
``boost.perf_model`` step time, print the best layouts and the TOML overrides of the first.

    python -m boost.plan --flavour 7B --gpus 16 --hardware a100 [--seq-len 4096 --micro-batch 4
                         --memory-gb 80 --linear cola --num-microbatches M --top 10]

Per-GPU memory (bytes, ``P`` = parameters of the rank's stage, ``T = b·s``, ``L = ceil(n_layers/pp)``):

==================  ============================================================================
weights, grads,     ``16·P / (tp·dp)``: fp32 master weights, fp32 grads, Adam m and v, sharded by
Adam states         FSDP over dp; plus ``2·2·P_layer / tp`` for the bf16 all-gathered weights of the
                    layer in use and the next one (FSDP prefetch)
activations         ``L · in_flight · a_keep + a_layer`` with ``in_flight = min(m, pp)`` micro-batches
                    held by the first 1F1B stage; ``a_layer`` = the full per-layer activations (one
                    layer live in backward, or recomputed), and ``a_keep`` by AC mode:
                    none ``a_layer``; full ``2·T·d_res`` (block input); lowrank ``2·T·(d_res + 7·r)``
a_layer             ``2·T·(Σ GEMM inputs + 4·heads_local·head_dim + 4·d_res + 2·f_local) + 4·T·heads_local``
                    (bf16 GEMM inputs, q/k/v/out of flash attention, norm and residual inputs,
                    gate/up for the product; fp32 log-sum-exp)
logits              ``3 · 4·T·V/tp`` (fp32 logits, their grad, softmax) on the last stage
workspace           ``1 GiB`` (NCCL buffers, cuBLAS workspace, allocator slack)
==================  ============================================================================

``d_res`` is ``d/tp`` for btp (the sharded residual) and ``d`` for megatron and vanilla.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from boost.model.args import FLAVOURS
from boost.perf_model import AC_MODES, args_params, block_gemms, get_hardware, model_args, predict_step_time

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
            f"--boost.linear {linear if self.scheme != 'megatron' else 'full'}",
            f"--boost.tp_scheme {self.scheme}",
            f"--boost.activation_checkpoint {self.ac}",
        ]
        if self.scheme == "vanilla":
            parts.append("--boost.group_linears false")
        # torchtitan splits local_batch_size into micro-batches of pipeline_parallel_microbatch_size
        parts.append(f"--training.local_batch_size {micro_batch * (num_microbatches if self.pp > 1 else 1)}")
        parts.append(f"--training.seq_len {seq_len}")
        if self.pp > 1:
            parts.append(f"--parallelism.pipeline_parallel_microbatch_size {micro_batch}")
        return " ".join(parts)


def memory_per_gpu(flavour, scheme, tp, pp, dp, ac, micro_batch, seq_len, num_microbatches,
                   vocab_size=32000, linear="cola") -> float:
    """Peak bytes on one GPU (module docstring's formulas)."""
    args = model_args(flavour, scheme, vocab_size, linear)
    T = micro_batch * seq_len
    layers = math.ceil(args.n_layers / pp)
    params = args_params(args)
    params_stage = params * layers / args.n_layers + args.dim * vocab_size  # embedding or head on the end stages
    layer_params = (params - 2 * args.dim * vocab_size) / args.n_layers
    states = 16 * params_stage / (tp * dp) + 2 * 2 * layer_params / tp
    heads = args.n_heads if scheme == "vanilla" else args.n_heads // tp
    d_res = args.dim // tp if scheme == "btp" else args.dim
    f_local = args.ffn_dim if scheme == "vanilla" else args.ffn_dim // tp
    gemm_inputs = sum(K * batch for _, K, _, batch in block_gemms(args, scheme, tp, T))
    a_layer = 2 * T * (gemm_inputs + 4 * heads * args.head_dim + 4 * d_res + 2 * f_local) + 4 * T * heads
    a_keep = {"none": a_layer, "full": 2 * T * d_res, "lowrank": 2 * T * (d_res + 7 * args.rank)}[ac]
    in_flight = min(num_microbatches, pp)
    activations = layers * in_flight * a_keep + a_layer
    logits = 3 * 4 * T * vocab_size / tp
    return states + activations + logits + WORKSPACE_BYTES


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def enumerate_layouts(flavour: str, gpus: int, hardware: str, seq_len: int = 4096, micro_batch: int = 4,
                      memory_gb: float | None = None, linear: str = "cola", num_microbatches: int | None = None,
                      vocab_size: int = 32000) -> list[Layout]:
    """All layouts that fit, fastest (highest tokens/s per step) first. Raises ``ValueError`` on
    bad input or when nothing fits."""
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; choose one of {sorted(FLAVOURS)}")
    hw = get_hardware(hardware)
    if gpus < 1:
        raise ValueError(f"--gpus must be positive, got {gpus}")
    budget = (memory_gb * 1e9) if memory_gb else hw.memory_bytes
    schemes = ("megatron",) if linear == "full" else ("btp", "vanilla")
    dim, n_layers, n_heads, n_kv_heads, ffn_dim = FLAVOURS[flavour]
    rank = dim // 4
    layouts = []
    for scheme in schemes:
        for tp in _divisors(gpus):
            if tp > hw.gpus_per_node or n_heads % tp or n_kv_heads % tp or dim % tp or ffn_dim % tp:
                continue
            if scheme == "vanilla" and rank % tp:
                continue
            for pp in _divisors(gpus // tp):
                if pp > n_layers or (pp > 1 and n_layers / pp < 2):
                    continue
                dp = gpus // (tp * pp)
                m = num_microbatches or pp  # 1F1B with m = pp: bubble (p-1)/(2p-1)
                for ac in AC_MODES:
                    if ac == "lowrank" and scheme == "megatron":
                        continue  # nothing low-rank to keep: the dense model has full AC only
                    mem = memory_per_gpu(flavour, scheme, tp, pp, dp, ac, micro_batch, seq_len, m, vocab_size, linear)
                    if mem > budget:
                        continue
                    t = predict_step_time(flavour, scheme, tp, pp, hw, micro_batch, seq_len, dp=dp,
                                          num_microbatches=m, activation_checkpoint=ac, vocab_size=vocab_size,
                                          linear=linear)
                    tokens = m * dp * micro_batch * seq_len
                    layouts.append(Layout(scheme, tp, pp, dp, ac, mem, t, tokens / t))
    if not layouts:
        raise ValueError(
            f"no layout of {flavour} on {gpus} {hw.name} GPU(s) fits in {budget / 1e9:.0f} GB at micro-batch "
            f"{micro_batch} × seq {seq_len}; add GPUs, lower --micro-batch or --seq-len, or raise --memory-gb"
        )
    return sorted(layouts, key=lambda l: (-round(l.tokens_per_s, 6), l.memory_bytes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m boost.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--flavour", required=True)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--hardware", default="a100")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--memory-gb", type=float, default=None, help="per-GPU memory (default: the hardware's)")
    parser.add_argument("--linear", default="cola", help="cola | svd | lax (btp, vanilla) or full (megatron)")
    parser.add_argument("--num-microbatches", type=int, default=None, help="per step under PP (default: pp)")
    parser.add_argument("--top", type=int, default=10)
    opts = parser.parse_args(argv)
    try:
        layouts = enumerate_layouts(opts.flavour, opts.gpus, opts.hardware, opts.seq_len, opts.micro_batch,
                                    opts.memory_gb, opts.linear, opts.num_microbatches)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{opts.flavour} on {opts.gpus} × {opts.hardware}, seq {opts.seq_len}, micro-batch {opts.micro_batch}, "
          f"linear {opts.linear}: {len(layouts)} feasible layouts")
    print(f"{'#':>3} {'scheme':<9}{'tp':>3}{'pp':>3}{'dp':>4} {'ac':<8}{'mem GB':>8}{'step s':>9}{'tokens/s':>11}")
    for i, l in enumerate(layouts[: opts.top], 1):
        print(f"{i:>3} {l.scheme:<9}{l.tp:>3}{l.pp:>3}{l.dp:>4} {l.ac:<8}{l.memory_bytes / 1e9:>8.1f}"
              f"{l.step_time:>9.3f}{l.tokens_per_s:>11,.0f}")
    best = layouts[0]
    m = opts.num_microbatches or max(1, best.pp)
    print("\nbest layout overrides:\n" + best.overrides(opts.linear, m, opts.micro_batch, opts.seq_len))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-layer and per-step tensor-parallel communication of megatron, vanilla and btp, debug…30B, of
one LORO exact step (svd kind) under btp and vanilla, and of context parallelism's attention at long windows.

    python -m bench.comm_table [--batch 4 --seq 4096 --dtype-bytes 2] [--cp-seq 32768]
        [--png bench/results/comm_bytes.png]

From the closed forms of ``boost.planning.comm_volume``, which tests/multiprocess/test_comm_volume.py checks against the
counter (``boost.runtime.comm_counter.CommCounter``) on real gloo runs at small shapes, TP 2 and 4.
"""

from __future__ import annotations

import argparse

from bench.plots import pyplot, save
from boost import FLAVORS, ModelArgs
from boost.planning.comm_volume import context_parallel_layer, loro_exact_step, per_layer, total
from boost.planning.perf_model import model_args


def rows(batch: int, seq: int, dtype_bytes: int, tps=(2, 4, 8)):
    tokens = batch * seq
    for flavor in FLAVORS:
        for tp in tps:
            low = ModelArgs.from_flavor(flavor, linear="cola", vocab_size=32000)
            if low.kv_heads % tp or low.n_heads % tp:
                continue
            # each scheme on the model it runs (perf_model.model_args: the dense one, or CoLA grouped or not)
            cases = {
                "megatron": per_layer(model_args(flavor, "megatron"), "megatron", tokens),
                "vanilla": per_layer(model_args(flavor, "vanilla"), "vanilla", tokens),
                "btp (online)": per_layer(model_args(flavor, "btp"), "btp", tokens, norm="online"),
                "btp (sync)": per_layer(model_args(flavor, "btp"), "btp", tokens, norm="sync"),
            }
            for scheme, vol in cases.items():
                fc, fe = total(vol["forward"])
                bc, be = total(vol["backward"])
                yield flavor, tp, scheme, fc, fe * dtype_bytes, bc, be * dtype_bytes, low.n_layers


def loro_rows(tps=(2, 4, 8)):
    """One LORO exact step per layer: float64 all-reduced sums (btp), fp32 gathered factors (vanilla)."""
    for flavor in FLAVORS:
        for tp in tps:
            args = ModelArgs.from_flavor(flavor, linear="svd", vocab_size=32000)
            if args.kv_heads % tp or args.n_heads % tp:
                continue
            for scheme in ("btp", "vanilla"):
                layer_args = model_args(flavor, scheme, linear="svd")
                for kind, (count, elements) in loro_exact_step(layer_args, scheme).items():
                    size = elements * (8 if kind == "all_reduce" else 4)
                    yield flavor, tp, scheme, kind, count, size, args.n_layers


# context parallelism's attention paths (boost.training.rules.context_parallel_path), as (mask, ring rotation)
CP_PATHS = {
    "ring, allgather (causal)": ("causal", "allgather"),
    "ring, alltoall (causal)": ("causal", "alltoall"),
    "all-gather (block_causal)": ("block_causal", "allgather"),
}


def cp_rows(seq: int, dtype_bytes: int, tp: int = 4, cps=(2, 4, 8)):
    """One layer's CP collectives (btp at ``tp``, micro-batch 1, SDPA): bytes forward and backward; the ring's
    dK|dV rotate in float32 (its accumulators), the rest in ``dtype_bytes``."""
    for flavor in ("1B", "3B", "7B", "13B", "30B"):
        args = model_args(flavor, "btp")
        for cp in cps:
            for path, (mask, rotate) in CP_PATHS.items():
                in_bytes = context_parallel_layer(
                    args, "btp", tp, 1, seq, cp, "sdpa", mask, rotate, dtype_bytes=dtype_bytes
                )
                fc, fb = total(in_bytes["forward"])
                bc, bb = total(in_bytes["backward"])
                yield flavor, cp, path, fc, fb, bc, bb, args
    return


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--dtype-bytes", type=int, default=2)
    p.add_argument("--png", default="")
    p.add_argument("--cp-seq", type=int, default=32768, help="window length of the context-parallel table")
    a = p.parse_args()
    print(
        f"# TP communication per layer (b={a.batch}, s={a.seq}, {a.dtype_bytes}-byte elements); "
        "per step = per layer × layers, forward + backward\n"
    )
    print(
        "| flavor | TP | scheme | fwd collectives | fwd MiB/layer | bwd collectives | bwd MiB/layer | GiB/step |"
    )
    print("|---|---|---|---|---|---|---|---|")
    data = list(rows(a.batch, a.seq, a.dtype_bytes))
    for flavor, tp, scheme, fc, fb, bc, bb, layers in data:
        print(
            f"| {flavor} | {tp} | {scheme} | {fc} | {fb / 2**20:.1f} | {bc} | {bb / 2**20:.1f} | "
            f"{(fb + bb) * layers / 2**30:.2f} |"
        )
    print(
        "\n# LORO exact step per layer (svd kind, once every optimizer.loro_freq steps); "
        "the all-reduced r×r sums are float64, vanilla's gathered factors fp32\n"
    )
    print("| flavor | TP | scheme | collectives | MiB/layer | GiB/exact step | MiB/step at loro_freq 500 |")
    print("|---|---|---|---|---|---|---|")
    for flavor, tp, scheme, kind, count, size, layers in loro_rows():
        print(
            f"| {flavor} | {tp} | {scheme} | {count} {kind} | {size / 2**20:.1f} | {size * layers / 2**30:.2f} | "
            f"{size * layers / 500 / 2**20:.1f} |"
        )
    print(
        f"\n# Context parallelism per layer: the attention's collectives (btp tp 4, SDPA, micro-batch 1, "
        f"s={a.cp_seq}, {a.dtype_bytes}-byte elements, the ring's dK|dV float32); every other collective of a "
        "block is per token, the TP table's at b·s/cp tokens\n"
    )
    print(
        "| flavor | cp | path | fwd collectives | fwd MiB/layer | bwd collectives | bwd MiB/layer | GiB/step |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for flavor, cp, path, fc, fb, bc, bb, args in cp_rows(a.cp_seq, a.dtype_bytes):
        print(
            f"| {flavor} | {cp} | {path} | {fc} | {fb / 2**20:.1f} | {bc} | {bb / 2**20:.1f} | "
            f"{(fb + bb) * args.n_layers / 2**30:.2f} |"
        )
    if a.png:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(8, 4))
        flavors = [f for f in FLAVORS if f != "debug"]
        for scheme in ("megatron", "vanilla", "btp (online)"):
            ys = [
                next(fb for fl, tp, sc, _, fb, *_ in data if fl == f and tp == 4 and sc == scheme) / 2**20
                for f in flavors
            ]
            ax.plot(flavors, ys, marker="o", label=scheme)
        ax.set_yscale("log")
        ax.set_ylabel("forward MiB per layer (TP=4)")
        ax.set_title(f"TP communication per layer, b={a.batch}, s={a.seq}, bf16")
        ax.legend()
        save(fig, a.png)


if __name__ == "__main__":
    main()

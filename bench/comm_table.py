"""Per-layer and per-step tensor-parallel communication of megatron, vanilla and btp, debug…30B, of
one LORO exact step (svd kind) under btp and vanilla, and of context parallelism's attention at long windows.

    python -m bench.comm_table [--batch 4 --seq 4096 --dtype-bytes 2] [--cp-seq 32768]
        [--png bench/results/comm_bytes.png] [--out bench/results/comm_table.md]

From the closed forms of ``boost.planning.comm_volume``, which tests/multiprocess/test_comm_volume.py checks against the
counter (``boost.runtime.comm_counter.CommCounter``) on real gloo runs at small shapes, TP 2 and 4. The tables are
printed and written to ``--out`` (default bench/results/comm_table.md) under the command that made them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bench.plots import pyplot, save
from bench.run_command import command_as_run
from boost import FLAVORS, ModelArgs
from boost.planning.comm_volume import context_parallel_layer, loro_exact_step, per_layer, total
from boost.planning.perf_model import model_args
from boost.runtime.cli_types import positive_int
from boost.training.rules import context_parallel_problem


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


CP_DEGREES = (2, 4, 8)


def cp_rows(seq: int, dtype_bytes: int, tp: int = 4, cps=CP_DEGREES):
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


RESULTS = Path(__file__).resolve().parent / "results" / "comm_table.md"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.comm_table", description=__doc__)
    p.add_argument("--batch", type=positive_int, default=4)
    p.add_argument("--seq", type=positive_int, default=4096)
    p.add_argument("--dtype-bytes", type=positive_int, default=2)
    p.add_argument("--png", default="", help="also draw the TP table's forward bytes (needs matplotlib)")
    p.add_argument(
        "--cp-seq",
        type=positive_int,
        default=32768,
        help=f"window length of the context-parallel table (shared equally by cp {', '.join(map(str, CP_DEGREES))})",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="write the tables here (as printed)")
    return p


def markdown(a: argparse.Namespace, command: str) -> str:
    """The three tables as ``--out`` holds them, each under what it is and which test holds its closed form."""
    lines = [
        f"# TP communication per layer (b={a.batch}, s={a.seq}, {a.dtype_bytes}-byte elements); "
        "per step = per layer × layers, forward + backward",
        "",
        f"command: `{command}`. Closed forms of `boost.planning.comm_volume`, which",
        "`tests/multiprocess/test_comm_volume.py` checks against `boost.CommCounter` on real gloo runs (TP 2 and 4,",
        "every scheme); machine-independent. btp forward = 7·b·s·r + 2·b·s statistic columns (online); each",
        "flavor at its own rank (`ModelArgs.from_flavor`: r = d/4 unless the flavor publishes one, 130M's 256).",
        "",
    ]
    if a.png:
        lines += [f"![forward bytes per layer]({os.path.relpath(a.png, a.out.parent)})", ""]
    lines += [
        "| flavor | TP | scheme | fwd collectives | fwd MiB/layer | bwd collectives | bwd MiB/layer | GiB/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {flavor} | {tp} | {scheme} | {fc} | {fb / 2**20:.1f} | {bc} | {bb / 2**20:.1f} | "
        f"{(fb + bb) * layers / 2**30:.2f} |"
        for flavor, tp, scheme, fc, fb, bc, bb, layers in rows(a.batch, a.seq, a.dtype_bytes)
    ]
    lines += [
        "",
        "## LORO exact step per layer (svd kind, once every optimizer.loro_freq steps)",
        "",
        "`boost.planning.comm_volume.loro_exact_step`, held to `boost.CommCounter` at TP 2 (btp and vanilla) by",
        "`tests/multiprocess/test_loro_sharded.py`. btp all-reduces r×r sums over the row shards of each factor",
        "(float64, Gram triangles packed); vanilla gathers its rank-sharded factors and their Adam directions",
        "(fp32) and computes whole.",
        "",
        "| flavor | TP | scheme | collectives | MiB/layer | GiB/exact step | MiB/step at loro_freq 500 |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {flavor} | {tp} | {scheme} | {count} {kind} | {size / 2**20:.1f} | {size * layers / 2**30:.2f} | "
        f"{size * layers / 500 / 2**20:.1f} |"
        for flavor, tp, scheme, kind, count, size, layers in loro_rows()
    ]
    lines += [
        "",
        "## Context parallelism per layer: the attention's collectives",
        "",
        f"btp tp 4, SDPA, micro-batch 1, s={a.cp_seq}, {a.dtype_bytes}-byte elements, the ring's dK|dV float32;",
        "every other collective of a block is per token, the TP table's at b·s/cp tokens.",
        "`boost.planning.comm_volume.context_parallel_layer`, held to `boost.CommCounter` (every layer's, ring by",
        "all-gather and by all-to-all, and the all-gather path) by `tests/multiprocess/test_context_parallel.py`.",
        "",
        "| flavor | cp | path | fwd collectives | fwd MiB/layer | bwd collectives | bwd MiB/layer | GiB/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {flavor} | {cp} | {path} | {fc} | {fb / 2**20:.1f} | {bc} | {bb / 2**20:.1f} | "
        f"{(fb + bb) * args.n_layers / 2**30:.2f} |"
        for flavor, cp, path, fc, fb, bc, bb, args in cp_rows(a.cp_seq, a.dtype_bytes)
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    p = parser()
    a = p.parse_args(argv)
    for cp in CP_DEGREES:  # the table's windows split equally, as the trainer's rule asks
        problem = context_parallel_problem(cp, a.cp_seq, "sdpa", None, tp=1, sequence_parallel=False)
        if problem is not None:
            p.error(
                f"--cp-seq {a.cp_seq} {problem}: the table shards it over cp {', '.join(map(str, CP_DEGREES))}"
            )
    plt = pyplot() if a.png else None  # matplotlib before any file is written: the table and its PNG agree
    text = markdown(a, command_as_run("bench.comm_table", p, a))
    print(text, end="")
    a.out.write_text(text)
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 4))
        flavors = [f for f in FLAVORS if f != "debug"]
        data = list(rows(a.batch, a.seq, a.dtype_bytes))
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
    return text


if __name__ == "__main__":
    main()

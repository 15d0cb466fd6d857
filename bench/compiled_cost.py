"""A transformer block's device time modeled from the kernels torch.compile schedules for it, on a CPU.

    python -m bench.compiled_cost                                   # every row (about 30 min on 2 cores)
    python -m bench.compiled_cost --rows '1B CoLA' '1B LaX' --seq-len 1024

Each row is the GPU report's row of that name (``bench.gpu_rows``), dry-run as rank 0 of ``NGPU``
(torchtitan's fake process group, one process) for one step, compiled as shipped; it records every graph
inductor compiles: each scheduled kernel (a fused kernel, or a library call: GEMM, attention) with the
bytes it reads and writes (inductor's own count, ``GraphLowering.count_bytes``) and its FLOPs. A kernel
costs the larger of bytes / bandwidth and FLOPs / peak (the roofline), at an H100 SXM's 3.35 TB/s and
989 TFLOP/s (dense bf16). A block's time is its forward graph plus its backward graph, each the one with
the most FLOPs (the block every layer runs, LaX's first excepted). Attention is charged its causal half
(BOOST's attention is causal).

What it is for: on a machine without a GPU, which of two formulations costs a device less, and where a
block's time goes. What it is not: a GPU's time. Inductor fuses for a CPU otherwise than for a GPU, a real
kernel reaches neither peak, and nothing here sees the host (launches, the optimizer, FSDP's copies) or
the network: the collectives in a graph, and their waits, are left out (inductor counts their buffers as
if a kernel read and wrote them; ``bench.comm_table`` and the performance model price the wire).
``bench/results/compiled_cost.md`` holds the table beside what the H100 measured.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from bench import gpu_rows
from bench.gpu_rows import ROOT, TrainRow
from torchtitan_ext.config import DRY_RUN_COMM_MODE

BANDWIDTH = 3.35e12  # bytes/s, H100 SXM HBM3
PEAK = 989e12  # FLOP/s, H100 SXM dense bf16


# The GPU report's rows that the goals of issues 40 and 41 read (the same configs and overrides).
ROW_NAMES = (
    "1B dense",
    "1B CoLA",
    "1B LaX",
    "1B LaX kron",
    "7B@16 megatron",
    "7B@16 btp",
    "7B@16 btp lax",
    "7B@16 btp lax kron",
    "7B@16 btp lax sp",
    "7B@16 btp sp",
)
ROWS = {r.name: r for r in gpu_rows.ROWS if isinstance(r, TrainRow) and r.name in ROW_NAMES}
# The ratios the table ends with: the goals of issues 40 and 41 that a block's time speaks to.
RATIOS = (
    ("1B LaX", "1B CoLA"),
    ("1B LaX kron", "1B CoLA"),
    ("1B dense", "1B CoLA"),
    ("7B@16 btp lax", "7B@16 btp"),
    ("7B@16 btp lax kron", "7B@16 btp"),
    ("7B@16 btp lax sp", "7B@16 btp"),
    ("7B@16 btp sp", "7B@16 btp"),
    ("7B@16 megatron", "7B@16 btp"),
)


def roofline_s(nbytes: float, flops: float) -> float:
    """One kernel's modeled seconds: bound by memory or by compute, whichever takes longer."""
    return max(nbytes / BANDWIDTH, flops / PEAK)


def _attention_flops(node) -> int:
    """A CPU attention kernel's FLOPs (inductor estimates none for it): torch's SDPA counts, halved."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    shapes = [[int(s) for s in x.get_size()] for x in node.node.inputs]
    if "backward" in str(node.node.op_overload):
        return sdpa_backward_flop_count(*shapes[:4]) // 2
    return sdpa_flop_count(*shapes[:3]) // 2


def graph_cost(scheduler_nodes) -> dict:
    """The modeled seconds, bytes and FLOPs of one compiled graph, GEMM and attention apart from the rest."""
    cost = dict(library_s=0.0, fused_s=0.0, fused_bytes=0, flops=0, kernels=0)
    for node in scheduler_nodes:
        kernel = str(getattr(node.node, "op_overload", ""))
        if kernel.startswith("_c10d_functional."):
            continue  # a collective or its wait: the network's time, which this model leaves out
        nbytes = node.get_read_write_buffers_sizes()
        flops = node.estimate_flops() or 0
        if "scaled_dot_product" in kernel:
            flops = _attention_flops(node)
        if not nbytes and not flops:
            continue  # a view or a no-op: no kernel runs
        cost["kernels"] += 1
        if node.is_extern() and flops:
            cost["library_s"] += roofline_s(nbytes, flops)
        else:
            cost["fused_s"] += roofline_s(nbytes, flops)
            cost["fused_bytes"] += nbytes
        cost["flops"] += flops
    return cost


@contextmanager
def recording(out: Path) -> Iterator[None]:
    """Inside, every graph inductor compiles appends its :func:`graph_cost` to ``out`` (a JSON line)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as inductor_config
    import torch._inductor.graph as inductor_graph

    count_bytes = inductor_graph.GraphLowering.count_bytes
    level = compile_fx.inductor_metrics_log.level

    def counted(graph):
        result = count_bytes(graph)
        with out.open("a") as f:
            f.write(json.dumps({"backward": graph.is_backward, **graph_cost(graph.scheduler.nodes)}) + "\n")
        return result

    # A graph served from a cache is not scheduled again, and inductor counts bytes only with its
    # metrics log on.
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        compile_fx.inductor_metrics_log.setLevel(logging.INFO)
        inductor_graph.GraphLowering.count_bytes = counted
        try:
            yield
        finally:
            inductor_graph.GraphLowering.count_bytes = count_bytes
            compile_fx.inductor_metrics_log.setLevel(level)


def block_cost(graphs: list[dict]) -> dict:
    """The block's forward and backward graphs (each the one with the most FLOPs), summed."""
    pair = [max((g for g in graphs if g["backward"] == b), key=lambda g: g["flops"]) for b in (False, True)]
    total = {k: sum(g[k] for g in pair) for k in ("library_s", "fused_s", "fused_bytes", "flops", "kernels")}
    return {**total, "block_s": total["library_s"] + total["fused_s"]}


def run_row(row: TrainRow, seq_len: int, timeout_s: int) -> dict:
    """Dry-run ``row`` for one step in a child process that records its graphs; the block's cost."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "graphs.jsonl"
        run_train, row_env = replace(row, steps=1).command(tmp)
        # what run_train.sh adds with DRY_RUN=1, in the child that records: the config, the fake group
        argv = [
            *(sys.executable, "-m", "bench.compiled_cost", "--record", str(out)),
            *("--job.config_file", row_env["CONFIG_FILE"], "--comm.mode", DRY_RUN_COMM_MODE),
            *run_train[1:],
            *("--training.seq_len", str(seq_len), "--training.local_batch_size", "1"),
        ]
        env = {**os.environ, **row_env, "DRY_RUN": "1"}
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"{row.name}: the dry run failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
            )
        graphs = [json.loads(line) for line in out.read_text().splitlines()]
    return {"name": row.name, "tokens": seq_len, **block_cost(graphs)}


def table(results: list[dict]) -> str:
    """The markdown table of ``results`` and the ratios of :data:`RATIOS` among them."""
    lines = [
        "| row | block µs (modeled) | GEMM + attention µs | fused kernels µs | fused kernels' MB | GFLOP | kernels |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['name']} | {r['block_s'] * 1e6:.1f} | {r['library_s'] * 1e6:.1f} | {r['fused_s'] * 1e6:.1f} "
            f"| {r['fused_bytes'] / 1e6:.1f} | {r['flops'] / 1e9:.1f} | {r['kernels']} |"
        )
    by_name = {r["name"]: r for r in results}
    ratios = [(a, b) for a, b in RATIOS if a in by_name and b in by_name]
    if ratios:
        lines += ["", "| ratio of block times | modeled |", "|---|---|"]
        lines += [f"| {a} / {b} | {by_name[a]['block_s'] / by_name[b]['block_s']:.2f}× |" for a, b in ratios]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--record"]:  # the child: record, then be torchtitan_ext.start (its dry run stays here)
        sys.argv = ["torchtitan_ext.start", *argv[2:]]
        with recording(Path(argv[1])):
            runpy.run_module("torchtitan_ext.start", run_name="__main__")
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", default=list(ROW_NAMES), help="row names (default: all)")
    p.add_argument(
        "--seq-len", type=int, default=4096, help="tokens a step: one sequence (the TOMLs' length)"
    )
    p.add_argument("--timeout-s", type=int, default=900, help="a row's limit")
    p.add_argument("--json", type=Path, help="also write the rows here")
    a = p.parse_args(argv)
    unknown = [n for n in a.rows if n not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {list(ROW_NAMES)}")
    results = []
    for name in a.rows:
        results.append(run_row(ROWS[name], a.seq_len, a.timeout_s))
        print(f"{name}: block {results[-1]['block_s'] * 1e6:.1f} µs (modeled)", flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()

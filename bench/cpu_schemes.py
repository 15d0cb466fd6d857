"""End to end on CPU/gloo: megatron (dense), vanilla and btp (CoLA) side by side in one run.

    python -m bench.cpu_schemes --tp 2 --flavor 60M --seq 256 --batch 4 --reps 5

Every repetition runs one step of each scheme in turn (interleaved), after warm-up steps; the
table gives medians and the ratio per pair. Same model size per row (the flavor), same tokens.
A second table splits one more step per scheme (torch.profiler, rank 0, self CPU time) into GEMMs,
attention, waiting on collectives and everything else: where the step time goes, and so what
bounds each ratio.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

import torch

from bench.harness import (
    build,
    compile_blocks,
    count_step,
    median,
    mesh_of,
    spawn,
    threads_per_rank,
    train_step,
)
from bench.plots import pyplot, save
from bench.run_command import command_as_run
from boost.runtime.cli_types import positive_int

SCHEMES = (("megatron", "full", False), ("vanilla", "cola", False), ("btp", "cola", True))


def _body(rank, world_size, flavor, seq, batch, reps, warmup, compiled):
    mesh = mesh_of(world_size)
    tokens = torch.randint(0, 2048, (batch, seq), generator=torch.Generator().manual_seed(0))
    runs = {
        name: build(flavor, kind, name, mesh, grouped=grouped, seq=seq) for name, kind, grouped in SCHEMES
    }
    comm = {
        name: count_step(*runs[name], tokens) for name in runs
    }  # eager: a dispatch mode cannot be compiled
    if compiled:
        for name, kind, grouped in SCHEMES:
            model, opt = build(flavor, kind, name, mesh, grouped=grouped, seq=seq)
            runs[f"{name} compiled"] = (compile_blocks(model), opt)
    times = {name: [] for name in runs}
    for _ in range(warmup):  # the first compiled step compiles
        for name in runs:
            train_step(*runs[name], tokens)
    for _ in range(reps):
        for name in runs:
            times[name].append(train_step(*runs[name], tokens)[0])
    split = {name: _profile_step(*runs[name], tokens) for name in runs}
    return {
        name: (
            median(times[name]),
            comm[name.split()[0]].total_count(),
            comm[name.split()[0]].total_bytes(),
            split[name],
        )
        for name in runs
    }


_GEMM = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}
# every op of the c10d namespaces is communication (a collective, its wait, a barrier): a set of names missed
# btp's final gather (c10d::allgather_into_tensor_coalesced_), whose time landed in "other"
_COMM_NAMESPACES = ("c10d::", "_c10d_functional::", "c10d_functional::")


def category(op: str) -> str:
    """Where a profiler event's self time goes in the split: GEMM, attention, collectives or other."""
    if op in _GEMM:
        return "GEMM"
    if "scaled_dot_product" in op:
        return "attention"
    if op.startswith(_COMM_NAMESPACES):
        return "collectives"
    return "other"


def _profile_step(model, opt, tokens) -> dict[str, float]:
    """Seconds of one step's self CPU time by category (GEMM, attention, collective wait, other)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_step(model, opt, tokens, fence=False)
    split = {"GEMM": 0.0, "attention": 0.0, "collectives": 0.0, "other": 0.0}
    for event in prof.key_averages():
        split[category(event.key)] += event.self_cpu_time_total / 1e6
    return split


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tp", type=positive_int, nargs="+", default=[2, 4])
    p.add_argument("--flavor", default="60M")
    p.add_argument("--seq", type=positive_int, default=256)
    p.add_argument("--batch", type=positive_int, default=4)
    p.add_argument("--reps", type=positive_int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--png", default="", help="also draw step time per scheme and TP degree (needs matplotlib)"
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="also run each scheme with its blocks compiled (inductor), interleaved with the eager ones",
    )
    return p


def header(p: argparse.ArgumentParser, a: argparse.Namespace) -> list[str]:
    """The table's title and the machine and command it ran on: every option the run changed."""
    return [
        f"# CPU/gloo step time by TP scheme — {a.flavor}, seq {a.seq}, batch {a.batch}, {a.reps} interleaved reps",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, threads a rank "
        + ", ".join(f"{threads_per_rank(tp)} at TP={tp}" for tp in a.tp)
        + f", torch {torch.__version__}; "
        f"date {datetime.date.today()}; command: {command_as_run('bench.cpu_schemes', p, a)}",
    ]


def main(argv: list[str] | None = None) -> None:
    p = parser()
    a = p.parse_args(argv)
    lines = [
        *header(p, a),
        "",
        "| TP | scheme | step s (median) | collectives/step | MiB/step | btp speed-up |",
        "|---|---|---|---|---|---|",
    ]
    splits = [
        "",
        "one profiled step, rank 0, self CPU seconds:",
        "",
        "| TP | scheme | GEMM | attention | collectives (wait) | other |",
        "|---|---|---|---|---|---|",
    ]
    step_times: dict[int, dict[str, float]] = {}
    for tp in a.tp:
        res = spawn(_body, tp, a.flavor, a.seq, a.batch, a.reps, a.warmup, a.compile)
        step_times[tp] = {name: r[0] for name, r in res.items()}
        for name, (t, count, nbytes, split) in res.items():
            ratio = res[name][0] / res["btp compiled" if name.endswith("compiled") else "btp"][0]
            lines.append(f"| {tp} | {name} | {t:.3f} | {count} | {nbytes / 2**20:.1f} | {ratio:.2f}× |")
            splits.append(f"| {tp} | {name} | " + " | ".join(f"{v:.3f}" for v in split.values()) + " |")
    if a.compile:
        splits += [
            "",
            "eager vs compiled (inductor, per block), median step seconds:",
            "",
            "| TP | scheme | eager | compiled | compiled speed-up | btp speed-up eager | btp speed-up compiled |",
            "|---|---|---|---|---|---|---|",
        ]
        for tp, t in step_times.items():
            for name, _, _ in SCHEMES:
                c = f"{name} compiled"
                splits.append(
                    f"| {tp} | {name} | {t[name]:.3f} | {t[c]:.3f} | {t[name] / t[c]:.2f}× | "
                    f"{t[name] / t['btp']:.2f}× | {t[c] / t['btp compiled']:.2f}× |"
                )
    print("\n".join(lines + splits))
    if a.png:
        _draw(step_times, f"{a.flavor}, seq {a.seq}, batch {a.batch}, CPU/gloo", a.png)


def _draw(step_times: dict[int, dict[str, float]], title: str, path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(SCHEMES)
    for i, (name, _, _) in enumerate(SCHEMES):
        xs = [j + i * width for j in range(len(step_times))]
        ax.bar(xs, [step_times[tp][name] for tp in step_times], width, label=name)  # eager
    ax.set_xticks([j + width for j in range(len(step_times))], [f"TP={tp}" for tp in step_times])
    ax.set_ylabel("seconds per step (median)")
    ax.set_title(title)
    ax.legend()
    save(fig, path)


if __name__ == "__main__":
    main()

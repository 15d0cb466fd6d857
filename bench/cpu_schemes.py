"""End to end on CPU/gloo: megatron (dense), vanilla and btp (CoLA) side by side in one run.

    python -m bench.cpu_schemes --tp 2 --flavour 60M --seq 256 --batch 4 --reps 5

Every repetition runs one step of each scheme in turn (interleaved), after warm-up steps; the
table gives medians and the ratio per pair. Same model size per row (the flavour), same tokens.
"""

from __future__ import annotations

import argparse
import datetime
import platform

import torch

from bench.harness import build, count_step, median, mesh_of, spawn, train_step

SCHEMES = (("megatron", "full", False), ("vanilla", "cola", False), ("btp", "cola", True))


def _body(rank, world_size, flavour, seq, batch, reps, warmup):
    mesh = mesh_of(world_size)
    tokens = torch.randint(0, 2048, (batch, seq), generator=torch.Generator().manual_seed(0))
    runs = {name: build(flavour, kind, name, mesh, grouped=grouped, seq=seq) for name, kind, grouped in SCHEMES}
    times = {name: [] for name in runs}
    comm = {name: count_step(*runs[name], tokens) for name in runs}
    for _ in range(warmup):
        for name in runs:
            train_step(*runs[name], tokens)
    for _ in range(reps):
        for name in runs:
            times[name].append(train_step(*runs[name], tokens)[0])
    return {name: (median(times[name]), comm[name].total_count(), comm[name].total_bytes()) for name in runs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tp", type=int, nargs="+", default=[2, 4])
    p.add_argument("--flavour", default="60M")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args()
    lines = [
        f"# CPU/gloo step time by TP scheme — {a.flavour}, seq {a.seq}, batch {a.batch}, {a.reps} interleaved reps",
        f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"date {datetime.date.today()}; command: python -m bench.cpu_schemes --tp {' '.join(map(str, a.tp))} "
        f"--flavour {a.flavour} --seq {a.seq} --batch {a.batch} --reps {a.reps}",
        "",
        "| TP | scheme | step s (median) | collectives/step | MiB/step | btp speed-up |",
        "|---|---|---|---|---|---|",
    ]
    for tp in a.tp:
        res = spawn(_body, tp, a.flavour, a.seq, a.batch, a.reps, a.warmup)
        for name, (t, count, nbytes) in res.items():
            ratio = res[name][0] / res["btp"][0]
            lines.append(f"| {tp} | {name} | {t:.3f} | {count} | {nbytes / 2**20:.1f} | {ratio:.2f}× |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

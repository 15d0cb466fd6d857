"""The three system optimisations on and off, measured in one run on CPU/gloo at TP=2.

    python -m bench.ablations --flavor 60M --seq 256 --batch 8 --reps 5

Rows: grouping on/off (online norm), online vs sync norm (grouped), activation checkpointing
none / full / lowrank. Columns: collectives and bytes per step (counted), median step time over
interleaved repetitions, forward-held activation memory (RSS delta, see boost.runtime.memory).
The last block gives ΔMemory/ΔTime of lowrank and full AC against none.
"""

from __future__ import annotations

import argparse
import datetime

import torch

from bench.harness import build, count_step, median, mesh_of, spawn, train_step
from bench.run_command import command_as_run
from boost.runtime.cli_types import positive_int

VARIANTS = {
    "grouped + online (BOOST)": dict(grouped=True, norm="online", ac="none"),
    "ungrouped (norm sync)": dict(grouped=False, norm="online", ac="none"),
    "grouped + sync norm": dict(grouped=True, norm="sync", ac="none"),
    "AC full": dict(grouped=True, norm="online", ac="full"),
    "AC lowrank": dict(grouped=True, norm="online", ac="lowrank"),
}


def _body(rank, world_size, flavor, seq, batch, reps, warmup):
    mesh = mesh_of(world_size)
    tokens = torch.randint(0, 2048, (batch, seq), generator=torch.Generator().manual_seed(0))
    out = {}
    comm = {}
    runs = {}
    for name, kw in VARIANTS.items():
        runs[name] = build(flavor, "cola", "btp", mesh, seq=seq, **kw)
        comm[name] = count_step(*runs[name], tokens)
    times = {name: [] for name in runs}
    held = {name: [] for name in runs}
    for _ in range(warmup):
        for name in runs:
            train_step(*runs[name], tokens)
    for _ in range(reps):
        for name in runs:
            t, h = train_step(*runs[name], tokens, measure_memory=True)
            times[name].append(t)
            held[name].append(h)
    for name in runs:
        out[name] = (
            comm[name].total_count(),
            comm[name].total_bytes(),
            median(times[name]),
            median(held[name]),
        )
    return out


def ac_rate_lines(res: dict[str, tuple[int, int, float, float]]) -> list[str]:
    """The AC block: ΔMemory/ΔTime of full and lowrank AC against none, and their ratio. A ΔTime at or below 0
    is timing noise (AC cannot make a step faster): no rate is given for it, and no ratio (an ``inf`` there
    read as the target met)."""
    base_t, base_m = res["grouped + online (BOOST)"][2], res["grouped + online (BOOST)"][3]
    lines = ["", "| AC mode | ΔMemory MiB | ΔTime s | ΔMemory/ΔTime (MiB/s) |", "|---|---|---|---|"]
    rate: dict[str, float | None] = {}
    for mode in ("AC full", "AC lowrank"):
        dm, dt = (base_m - res[mode][3]) / 2**20, res[mode][2] - base_t
        rate[mode] = dm / dt if dt > 0 else None
        shown = f"{rate[mode]:.1f}" if rate[mode] is not None else "— (ΔTime ≤ 0: below the timing noise)"
        lines.append(f"| {mode} | {dm:.1f} | {dt:.3f} | {shown} |")
    below = [mode for mode, r in rate.items() if r is None]
    if below:
        lines.append(
            f"\nlowrank/full rate ratio: not measured: {' and '.join(below)} took no longer than no AC, "
            "below the timing noise (more --reps, or a larger --batch/--seq)"
        )
    elif rate["AC full"] != 0:
        lines.append(
            f"\nlowrank/full rate ratio: {rate['AC lowrank'] / rate['AC full']:.2f}× (target ≥ 1.5×)"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.ablations", description=__doc__)
    p.add_argument("--tp", type=positive_int, default=2)
    p.add_argument("--flavor", default="60M")
    p.add_argument("--seq", type=positive_int, default=256)
    p.add_argument("--batch", type=positive_int, default=8)
    p.add_argument("--reps", type=positive_int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args(argv)
    res = spawn(_body, a.tp, a.flavor, a.seq, a.batch, a.reps, a.warmup)
    lines = [
        f"# Ablations at TP={a.tp} on CPU/gloo — CoLA {a.flavor}, seq {a.seq}, batch {a.batch}, "
        f"{a.reps} interleaved reps",
        f"date {datetime.date.today()}; command: {command_as_run('bench.ablations', p, a)}",
        "",
        "| variant | collectives/step | MiB/step | step s (median) | activation MiB (fwd-held, rank 0) |",
        "|---|---|---|---|---|",
    ]
    for name, (count, nbytes, t, held) in res.items():
        lines.append(f"| {name} | {count} | {nbytes / 2**20:.2f} | {t:.3f} | {held / 2**20:.1f} |")
    lines += ac_rate_lines(res)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

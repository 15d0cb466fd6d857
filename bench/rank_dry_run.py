"""One rank's compute at real scale: a shipped config dry-run as rank 0 of ``NGPU`` on one device, for
the three TP schemes, bf16 and compiled as shipped: step time and peak memory of that rank.

    python -m bench.rank_dry_run --config 7B --ngpu 16 --steps 8     # on one GPU (bench.gpu_report runs these rows)

``DRY_RUN=1`` (torchtitan's fake process group) runs the real layout, the rank's real shard and real
steps, with every collective a no-op: the table is the compute part of the reference paper's step
times (DESIGN §7), the communication left to ``bench.comm_table`` and ``boost.planning.perf_model``. Rows: the
TOML as shipped (CoLA, btp); vanilla low-rank TP on the same model (ungrouped, sync norm, full AC:
what vanilla takes); the dense baseline with Megatron TP and full AC (the TOML header's override).
Tokens/s is torchtitan's, per device: the rank's tokens per second divided by tp·pp·cp (the ranks
that share a sample); it is the median over the steps after the first two (compilation, warm-up), and
the step time follows from it: the rank's tokens per step / (tokens/s · tp·pp·cp). Memory is
torchtitan's peak (the device's allocator on a GPU, RSS on a CPU). On a CPU it runs too (small shapes,
``-- --compile.backend aot_eager``), to check the command, not to time anything.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import train_log
from bench.gpu_rows import ROOT, SCHEMES, dry


def summarize(log: str) -> dict:
    """A finished run's row: tokens/s per device (median of the steps after the first two: compilation,
    warm-up), the step's seconds from it (:func:`bench.train_log.step_seconds`), peak memory, layout."""
    done = train_log.steps(log)
    shape = train_log.layout(log)
    if not done or shape is None:
        raise ValueError("no step line or no layout in the log")
    tps = statistics.median(s.tps for s in (done[2:] or done[-1:]))
    return dict(
        tps=tps,
        step_s=train_log.step_seconds(tps, shape),
        mem=max(s.memory_gib for s in done),
        layout=shape.short(),
        precision=train_log.precision(log) or "?",
    )


def run(config: str, scheme: str, ngpu: int, steps: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="rank_dry_run_") as dump:
        cmd, env = dry(config, ngpu, scheme, timeout_s=3600, steps=steps, extra=tuple(extra)).command(dump)
        env = dict(os.environ, **env, PYTHON=sys.executable)
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    log = train_log.clean(proc.stdout + proc.stderr)
    if proc.returncode:
        raise SystemExit(f"{config} {scheme}: exit {proc.returncode}\n{log[-4000:]}")
    return dict(scheme=scheme, **summarize(log))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="7B", help="train_configs/<config>.toml")
    p.add_argument("--ngpu", type=int, default=16, help="the world size rank 0 plays")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES))
    p.add_argument(
        "--out",
        type=Path,
        help="append the table to this file (not bench/results/gpu.md: bench.gpu_report writes that one)",
    )
    p.add_argument(
        "overrides", nargs="*", help="after --: more trainer overrides (e.g. --training.seq_len 256)"
    )
    a = p.parse_args()
    rows = [run(a.config, s, a.ngpu, a.steps, a.overrides) for s in a.schemes]
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (command check only)"
    lines = [
        f"## Rank dry run: {a.config} as rank 0 of {a.ngpu}, on {device}, {datetime.date.today()}",
        "",
        f"`python -m bench.rank_dry_run --config {a.config} --ngpu {a.ngpu} --steps {a.steps}"
        + (f" -- {' '.join(a.overrides)}`" if a.overrides else "`"),
        "",
        "| scheme | layout | computes in | tokens/s per device | step s | peak memory GiB |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['scheme']} | {r['layout']} | {r['precision']} | {r['tps']:,.0f} | {r['step_s']:.3f} | "
        f"{r['mem']:.2f} |"
        for r in rows
    ]
    if "btp" in a.schemes:
        base = next(r for r in rows if r["scheme"] == "btp")
        lines += [""] + [
            f"btp vs {r['scheme']}: {r['step_s'] / base['step_s']:.2f}× (compute only)"
            for r in rows
            if r is not base
        ]
    text = "\n".join(lines)
    print(text)
    if a.out:
        with a.out.open("a") as f:
            f.write(text + "\n\n")


if __name__ == "__main__":
    main()

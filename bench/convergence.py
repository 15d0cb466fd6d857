"""Convergence: dense vs svd / cola / lax on the default corpus, same tokens, schedule and seed,
plus cola with ``only_lr_act`` false (SwiGLU's full-width SiLU kept, the CoLA authors' 60M/130M form),
cola under BTP at TP=2 overlaid on the single-process cola curve, svd trained by LORO (its authors'
recipe and schedule, scaled to the run's length: the one row with another optimizer and schedule), and
cola with its documents masked (``boost.attn_mask_type = "block_causal"``).

    python -m bench.convergence --flavor debug --steps 300 [--png bench/results/convergence.png]
    python -m bench.convergence --flavor debug --steps 600 --runs svd cola "svd + LORO"
    # causal against block-causal on packed short documents (several to a window), train and validation
    python -m bench.convergence --flavor debug --steps 300 --corpus packed --runs cola "cola (block_causal)"

Runs the real trainer (run_train.sh) for each, reads the losses and validation losses from the
logs, prints loss against tokens and against wall time (time-to-loss), and draws the curves.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.plots import pyplot, save
from bench.run_command import command_as_run
from boost.runtime.cli_types import positive_int
from boost.training.rules import KINDS

ROOT = Path(__file__).resolve().parents[1]
# (label, kind, processes, overrides); cola with only_lr_act false keeps SwiGLU's full-width SiLU, as the
# CoLA authors' 60M/130M configs do: what the switch costs in loss and time
RUNS = [
    ("full", "full", 1, []),
    ("svd", "svd", 1, []),
    ("cola", "cola", 1, []),
    ("cola (only_lr_act false)", "cola", 1, ["--boost.no-only-lr-act"]),
    ("lax", "lax", 1, []),  # the LaX authors' crossing, their default tensorized gate
    ("lax (linear gate)", "lax", 1, ["--boost.lax_gate", "linear"]),
    ("lax (no gate)", "lax", 1, ["--boost.lax_gate", "none"]),
    (
        "cola (btp, TP=2)",
        "cola",
        2,
        ["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1"],
    ),
    ("svd + LORO", "svd", 1, "LORO"),
    # a token attends only within its own document (validation scores with the run's own mask)
    ("cola (block_causal)", "cola", 1, ["--boost.attn_mask_type", "block_causal"]),
]
# --corpus packed: the standard library's paragraphs (40-400 characters) as documents, so a 256-token window
# packs several; the default corpus's documents are whole source files, longer than a window
PACKED_DOCUMENTS = {"training": ("train", 10**6), "validation": ("validation", 10**6)}  # every such paragraph


def packed_corpus(out: Path) -> list[str]:
    """Write the packed corpus's two ``local`` files under ``out``; the overrides that read them."""
    import json

    from boost.training.data.stdlib_corpus import stdlib_paragraphs

    out.mkdir(parents=True, exist_ok=True)
    overrides = []
    for section, (split, count) in PACKED_DOCUMENTS.items():
        path = out / f"packed_{split}.jsonl"
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in stdlib_paragraphs(split, count)))
        overrides += [f"--{section}.dataset", "local", f"--{section}.dataset_path", str(path)]
    return overrides


def loro_overrides(steps: int) -> list[str]:
    """The LORO authors' 60M recipe (train_configs/loro/60M.toml) scaled from 10 000 steps to ``steps``:
    exact step, refresh and schedule cycle every 5% of the run, warmup 10% (shifted back by as much),
    re-warmup 1% of a cycle (at least 1 step); lr 0.01, betas (0.9, 0.999), eps 1e-6, no weight decay, no clipping."""
    cycle, warmup = max(1, steps // 20), max(1, steps // 10)
    return [
        *("--optimizer.name LORO --optimizer.lr 0.01 --optimizer.beta2 0.999 --optimizer.eps 1e-6".split()),
        *(
            "--optimizer.weight_decay 0 --training.max_norm inf --lr_scheduler.decay_type cosine_restart".split()
        ),
        *(f"--optimizer.loro_freq {cycle} --optimizer.loro_refresh_freq {cycle}".split()),
        *(f"--lr_scheduler.restart_every {cycle} --lr_scheduler.warmup_steps {warmup}".split()),
        *(f"--lr_scheduler.restart_adjust_steps -{warmup}".split()),
        *(f"--lr_scheduler.restart_warmup_steps {max(1, cycle // 100)}".split()),
    ]


def train(
    kind: str, ngpu: int, extra: list[str], args, out: Path
) -> tuple[list[tuple[int, float, float]], float]:
    cmd = [
        "./run_train.sh",
        "--job.dump_folder",
        str(out),
        "--boost.linear",
        kind,
        "--model.flavor",
        args.flavor,
        "--training.steps",
        str(args.steps),
        "--checkpoint.no-enable",
        "--metrics.log_freq",
        "10",
        "--validation.freq",
        str(max(10, args.steps // 10)),
        *extra,
    ]
    if ngpu > 1:
        cmd += ["--boost.tp_scheme", KINDS[kind].tp_scheme]
    start = time.time()
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=dict(os.environ, NGPU=str(ngpu), PYTHON=sys.executable),
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
    log = proc.stdout + proc.stderr
    stamps = re.findall(
        r"(\d\d):(\d\d):(\d\d),(\d+) - root - INFO - \S*validate step:\s+(\d+)\s+\S*loss:\s+([\d.]+)", log
    )
    points, t0 = [], None
    for h, m, sec, ms, step, loss in stamps:
        clock = int(h) * 3600 + int(m) * 60 + int(sec) + int(ms) / 1000
        t0 = clock if t0 is None else t0
        points.append((int(step), float(loss), (clock - t0) % 86400))  # seconds since the first validation
    return points, time.time() - start


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.convergence", description=__doc__)
    p.add_argument("--flavor", default="debug")
    p.add_argument("--steps", type=positive_int, default=300)
    p.add_argument("--png", default="")
    p.add_argument("--out", default="outputs/convergence")
    labels = [label for label, *_ in RUNS]
    # choices: a misspelt label is refused by name (it was dropped silently, or all of them ended in max() of nothing)
    p.add_argument("--runs", nargs="+", choices=labels, default=labels, metavar="LABEL", help=f"of {labels}")
    p.add_argument(
        "--corpus",
        choices=("stdlib", "packed"),
        default="stdlib",
        help="packed: short documents, several a window",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    a = p.parse_args(argv)
    corpus = packed_corpus(Path(a.out)) if a.corpus == "packed" else []
    tokens_per_step = 8 * 256  # debug.toml's local_batch_size × seq_len (DP degree 1 in every run)
    results = {}
    for label, kind, ngpu, extra in RUNS:
        if label not in a.runs:
            continue
        extra = [*(loro_overrides(a.steps) if extra == "LORO" else extra), *corpus]
        folder = "".join(c if c.isalnum() or c in "=_" else "_" for c in label)
        results[label] = train(kind, ngpu, extra, a, Path(a.out) / folder)
    # time-to-loss: the first validation at or below a loss every run reaches (the worst final loss)
    target = max(points[-1][1] for points, _ in results.values())
    where = (
        "the stdlib corpus" if a.corpus == "stdlib" else "packed stdlib paragraphs (40-400 characters each)"
    )
    print(f"# Convergence on {where} — {a.flavor}, {a.steps} steps, same tokens, schedule and seed\n")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
        f"date {datetime.date.today()}"
    )
    print(f"command: {command_as_run('bench.convergence', p, a)}\n")
    print(
        f"| run | final val loss | tokens | wall s | tokens to val loss {target:.3f} | s to val loss {target:.3f} |"
    )
    print("|---|---|---|---|---|---|")
    for label, (points, wall) in results.items():
        step, loss, _ = points[-1]
        hit = next((s, t) for s, v, t in points if v <= target)
        print(
            f"| {label} | {loss:.4f} | {step * tokens_per_step:,} | {wall:.0f} | {hit[0] * tokens_per_step:,} | "
            f"{hit[1]:.0f} |"
        )
    print("\nvalidation loss by step:\n")
    steps = [s for s, _, _ in next(iter(results.values()))[0]]
    print("| step | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for i, step in enumerate(steps):
        row = [f"{points[i][1]:.4f}" if i < len(points) else "" for points, _ in results.values()]
        print(f"| {step} | " + " | ".join(row) + " |")
    if a.png:
        plt = pyplot()
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
        for label, (points, _) in results.items():
            ax1.plot(
                [s * tokens_per_step for s, _, _ in points],
                [v for _, v, _ in points],
                marker=".",
                label=label,
            )
            ax2.plot([t for *_, t in points], [v for _, v, _ in points], marker=".", label=label)
        ax1.set_xlabel("tokens")
        ax2.set_xlabel("wall seconds (CPU)")
        for ax in (ax1, ax2):
            ax.set_ylabel("validation loss")
            ax.legend()
        save(fig, a.png)


if __name__ == "__main__":
    main()

"""One rank's compute at real scale: a shipped config dry-run as rank 0 of ``NGPU`` on one device, for
the three TP schemes, bf16 and compiled as shipped: step time and peak memory of that rank.

    python -m bench.rank_dry_run --config 7B --ngpu 16 --steps 8     # on one GPU -> bench/results/gpu.md

``DRY_RUN=1`` (torchtitan's fake process group) runs the real layout, the rank's real shard and real
steps, with every collective a no-op: the table is the compute part of the reference paper's step
times (DESIGN §7), the communication left to ``bench.comm_table`` and ``boost.perf_model``. Rows: the
TOML as shipped (CoLA, btp); vanilla low-rank TP on the same model (ungrouped, sync norm, full AC:
what vanilla takes); the dense baseline with Megatron TP and full AC (the TOML header's override).
Step time is the median over the steps after the first two (compilation, warm-up), from torchtitan's
tokens/s; memory is torchtitan's peak (the device's allocator on a GPU, RSS on a CPU). On a CPU it runs
too (small shapes, ``--compile-backend aot_eager``), to check the command, not to time anything.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from torchtitan_ext.config import linear_kind_overrides

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = {
    "btp": lambda toml: [],
    "vanilla": lambda toml: [
        "--boost.tp_scheme",
        "vanilla",
        "--boost.no-group-linears",
        "--boost.norm",
        "sync",
        "--boost.activation_checkpoint",
        "full",
    ],
    "megatron": lambda toml: linear_kind_overrides("full", toml),
}


def run(config: str, scheme: str, ngpu: int, steps: int, extra: list[str]) -> dict:
    toml = tomllib.loads((ROOT / "train_configs" / f"{config}.toml").read_text())
    with tempfile.TemporaryDirectory(prefix="rank_dry_run_") as dump:
        cmd = [
            "./run_train.sh",
            "--training.steps",
            str(steps),
            "--metrics.log_freq",
            "1",
            "--checkpoint.no-enable",
            "--validation.no-enable",
            "--job.dump_folder",
            dump,
            *SCHEMES[scheme](toml),
            *extra,
        ]
        env = dict(
            os.environ,
            DRY_RUN="1",
            NGPU=str(ngpu),
            CONFIG_FILE=f"train_configs/{config}.toml",
            PYTHON=sys.executable,
        )
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    log = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    if proc.returncode:
        raise SystemExit(f"{config} {scheme}: exit {proc.returncode}\n{log[-4000:]}")
    tps = [float(v.replace(",", "")) for v in re.findall(r"tps:\s+([\d,]+)", log)]
    memory = [float(v) for v in re.findall(r"memory:\s+([\d.]+)GiB", log)]
    layout = re.search(r"Building device mesh with parallelism: (.*)", log)
    precision = re.search(r"BOOST computes in (.*)", log)
    seq, batch = (
        int(re.search(rf"--training.{f} (\d+)", " ".join(cmd)).group(1))
        if f"--training.{f}" in cmd
        else toml["training"][f]
        for f in ("seq_len", "local_batch_size")
    )
    steady = tps[2:] or tps[-1:]
    return dict(
        scheme=scheme,
        tps=statistics.median(steady),
        step_s=seq * batch / statistics.median(steady),
        mem=max(memory),
        layout=layout.group(1) if layout else "?",
        precision=precision.group(1).strip() if precision else "?",
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="7B", help="train_configs/<config>.toml")
    p.add_argument("--ngpu", type=int, default=16, help="the world size rank 0 plays")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES))
    p.add_argument("--out", type=Path, help="append the table to this file (e.g. bench/results/gpu.md)")
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
        "| scheme | layout | computes in | tokens/s (rank) | step s | peak memory GiB |",
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

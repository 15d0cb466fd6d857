"""bf16 against fp32 under BTP: the same run (debug CoLA, online norm, TP 2 and 4, data-parallel degree 1)
in each precision through the real trainer, loss side by side.

    python -m bench.precision --steps 40 --tp 2 4     # -> bench/results/precision.md

bf16 here is what the shipped configs train in: FSDP2's mixed precision (bf16 parameters and
activations, fp32 gradient reduction and optimizer), at a shard degree of 1 under plain TP; the online
norm's statistic rides as a bf16 mean square beside the bf16 latent (``boost.training.parallel.norms``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "precision.md"
SMALL = [
    "--training.seq_len",
    "128",
    "--training.local_batch_size",
    "4",
    "--metrics.log_freq",
    "1",
    "--checkpoint.no-enable",
    "--validation.no-enable",
    "--debug.seed",
    "0",
]


def losses(tp: int, precision: str, steps: int) -> tuple[dict[int, float], str]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "./run_train.sh",
            "--job.dump_folder",
            tmp,
            "--training.steps",
            str(steps),
            *SMALL,
            "--parallelism.tensor_parallel_degree",
            str(tp),
            "--parallelism.data_parallel_shard_degree",
            "1",
            "--training.mixed_precision_param",
            precision,
        ]
        env = dict(os.environ, NGPU=str(tp), PYTHON=sys.executable)
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    log = out.stdout + out.stderr
    if out.returncode:
        raise SystemExit(log[-4000:])
    found = {int(s): float(v) for s, v in re.findall(r"step:\s+(\d+)\s+\S*loss:\s+([\d.]+)", log)}
    comm = re.search(r"comm/step: (.*?), host syncs", log)
    return found, comm.group(1) if comm else "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--tp", type=int, nargs="+", default=[2, 4])
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args()
    lines = [
        f"# bf16 vs fp32 under BTP (debug CoLA, online norm), {datetime.date.today()}",
        "",
        f"`python -m bench.precision --steps {a.steps} --tp {' '.join(map(str, a.tp))}`",
        "",
    ]
    for tp in a.tp:
        fp32, comm32 = losses(tp, "float32", a.steps)
        bf16, comm16 = losses(tp, "bfloat16", a.steps)
        rel = {s: abs(bf16[s] - fp32[s]) / fp32[s] for s in fp32}
        shown = sorted({1, 2, 5, 10, 20, a.steps} & set(fp32))
        lines += [
            f"## TP {tp}",
            "",
            f"comm/step fp32: {comm32}; bf16: {comm16}",
            "",
            "| step | fp32 loss | bf16 loss | relative difference |",
            "|---|---|---|---|",
        ]
        lines += [f"| {s} | {fp32[s]:.5f} | {bf16[s]:.5f} | {rel[s]:.1e} |" for s in shown]
        lines += [
            "",
            f"max relative difference over {len(rel)} steps: {max(rel.values()):.1e}; "
            f"mean: {sum(rel.values()) / len(rel):.1e}",
            "",
        ]
    text = "\n".join(lines)
    print(text)
    a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

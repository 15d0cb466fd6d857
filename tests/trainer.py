"""Run BOOST's trainer the way a user does: ``run_train.sh`` with overrides, on CPU (gloo); read its losses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# short sequences and batches: a step of the debug model takes well under a second on CPU
SMALL = [
    "--training.seq_len",
    "64",
    "--training.local_batch_size",
    "4",
    "--metrics.log_freq",
    "1",
    "--validation.seq_len",
    "64",
    "--validation.steps",
    "2",
    "--validation.freq",
    "1000",
]


def run_train(
    tmp_path: Path, *overrides: str, ngpu: int = 1, steps: int = 10, log_rank: int = 0, folder: str = "out"
) -> str:
    log_dir = tmp_path / f"{folder}-rank-logs"
    env = dict(
        os.environ,
        NGPU=str(ngpu),
        PYTHON=sys.executable,
        BOOST_CACHE=str(tmp_path.parent / "boost-cache"),
        LOG_RANK=str(log_rank),
        LOG_DIR=str(log_dir),
    )
    cmd = [
        "./run_train.sh",
        "--job.dump_folder",
        str(tmp_path / folder),
        "--training.steps",
        str(steps),
        *SMALL,
        *overrides,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:] + _other_ranks_errors(log_dir, log_rank)
    return out


def _other_ranks_errors(log_dir: Path, shown: int) -> str:
    """The end of every other rank's stderr: the console shows only LOG_RANK's."""
    tails = []
    for err in sorted(log_dir.rglob("stderr.log")):
        if err.parent.name != str(shown) and err.stat().st_size:
            tails.append(f"\n--- {err.relative_to(log_dir)} ---\n" + err.read_text(errors="replace")[-2000:])
    return "".join(tails)


def losses(log: str) -> dict[int, float]:
    """Training loss by step (not the validator's ``validate step: N  loss: ...`` lines)."""
    return {
        int(s): float(v) for s, v in re.findall(r"(?<!validate )step:\s+(\d+)\s+\S*loss:\s+([\d.]+)", log)
    }

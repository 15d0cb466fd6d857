"""Real torchtitan training steps through ``run_train.sh`` on CPU (gloo), 1 and 2 processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--training.seq_len", "64", "--training.local_batch_size", "4", "--metrics.log_freq", "1",
         "--validation.seq_len", "64", "--validation.steps", "2", "--validation.freq", "1000"]


def run_train(tmp_path: Path, *overrides: str, ngpu: int = 1, steps: int = 10) -> str:
    env = dict(os.environ, NGPU=str(ngpu), PYTHON=sys.executable, BOOST_CACHE=str(tmp_path.parent / "boost-cache"),
               LOG_RANK="0")
    cmd = ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), "--training.steps", str(steps), *SMALL,
           *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    return out


def losses(log: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"step:\s+(\d+)\s+\S*loss:\s+([\d.]+)", log)}


@pytest.mark.slow
def test_default_job_trains_writes_and_resumes(tmp_path):
    log = run_train(tmp_path, "--checkpoint.interval", "10", steps=20)
    curve = losses(log)
    assert curve[20] < curve[1] - 1.0, curve  # loss falls clearly
    assert (tmp_path / "out" / "checkpoint" / "step-20").is_dir()
    events = list((tmp_path / "out" / "tb").rglob("events.out.tfevents.*"))
    assert events, "no tensorboard event file"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"loss_metrics/global_avg_loss", "throughput(tps)", "mfu(%)"} <= tags, tags

    # a second start resumes from the checkpoint instead of starting over
    log2 = run_train(tmp_path, "--checkpoint.interval", "10", steps=25)
    assert "Training starts at step 21" in log2
    assert min(losses(log2)) >= 21


@pytest.mark.slow
def test_two_process_data_parallel(tmp_path):
    log = run_train(tmp_path, "--checkpoint.no-enable", ngpu=2, steps=5)
    assert "Applied FSDP to the model" in log
    assert 5 in losses(log)


@pytest.mark.slow
@pytest.mark.parametrize("scheme,kind", [("btp", "cola"), ("vanilla", "cola"), ("megatron", "full")])
def test_tensor_parallel_schemes_train_and_log_communication(tmp_path, scheme, kind):
    log = run_train(tmp_path, "--checkpoint.no-enable", "--parallelism.tensor_parallel_degree", "2",
                    "--parallelism.data_parallel_shard_degree", "1", "--boost.tp_scheme", scheme,
                    "--boost.linear", kind, ngpu=2, steps=5)
    assert f"Applied {scheme} tensor parallelism (degree 2" in log
    assert re.search(r"comm/step: .*all_reduce \d+× [\d.]+ [KM]iB", log), log[-3000:]
    curve = losses(log)
    assert curve[5] < curve[1]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next((tmp_path / "out" / "tb").rglob("events.out.tfevents.*")).parent))
    acc.Reload()
    comm = acc.Scalars("boost/comm_bytes_per_step")
    assert comm and comm[-1].value > 0

"""Real torchtitan training steps through ``run_train.sh`` on CPU (gloo): the default job, resume, compile and
profile. Every scheme × layout × compile × AC combination: tests/test_feature_matrix.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--training.seq_len", "64", "--training.local_batch_size", "4", "--metrics.log_freq", "1",
         "--validation.seq_len", "64", "--validation.steps", "2", "--validation.freq", "1000"]


def run_train(tmp_path: Path, *overrides: str, ngpu: int = 1, steps: int = 10, log_rank: int = 0,
              folder: str = "out") -> str:
    log_dir = tmp_path / f"{folder}-rank-logs"
    env = dict(os.environ, NGPU=str(ngpu), PYTHON=sys.executable, BOOST_CACHE=str(tmp_path.parent / "boost-cache"),
               LOG_RANK=str(log_rank), LOG_DIR=str(log_dir))
    cmd = ["./run_train.sh", "--job.dump_folder", str(tmp_path / folder), "--training.steps", str(steps), *SMALL,
           *overrides]
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


def _close(a: dict[int, float], b: dict[int, float], rtol: float) -> None:
    assert a.keys() == b.keys() and a, (a, b)
    for step in a:
        assert abs(a[step] - b[step]) <= rtol * abs(b[step]), f"step {step}: {a[step]} vs {b[step]}"


@pytest.mark.slow
def test_one_process_checkpoint_resumes_as_fsdp_and_fsdp_times_tp_on_one_curve(tmp_path):
    # 1 process -> fsdp=2 and -> fsdp=2 x tp=2: DCP reshards model and optimizer; the data position
    # cannot follow a new data-parallel degree, so both restart their data shards (and warn). Both
    # then have DP degree 2 and see the same samples: their curves must agree to f32 rounding.
    common = ["--validation.no-enable", "--lr_scheduler.warmup_steps", "5", "--checkpoint.interval", "100"]
    one = losses(run_train(tmp_path, *common, steps=6, folder="one"))
    for folder in ("a", "b"):
        shutil.copytree(tmp_path / "one" / "checkpoint", tmp_path / folder / "checkpoint")
    fsdp_log = run_train(tmp_path, *common, "--parallelism.data_parallel_shard_degree", "2", ngpu=2, steps=9,
                         folder="a")
    fsdp_tp = run_train(tmp_path, *common, "--parallelism.data_parallel_shard_degree", "2",
                        "--parallelism.tensor_parallel_degree", "2", ngpu=4, steps=9, folder="b")
    assert "Applied FSDP to the model" in fsdp_tp and "Applied btp tensor parallelism" in fsdp_tp
    for log in (fsdp_log, fsdp_tp):
        assert "Training starts at step 7" in log and "data-parallel degree changed from 1 (checkpoint) to 2" in log
    fsdp = losses(fsdp_log)
    _close(losses(fsdp_tp), fsdp, 1e-5)
    assert fsdp[7] < one[1] - 0.5, (one, fsdp)  # the trained weights, not a fresh model


@pytest.mark.slow
def test_resume_continues_the_same_curve(tmp_path):
    # world size 1 here; tp=2 resume onto the same curve is test_fault_tolerance's SIGKILL test
    ngpu, tp = 1, []
    common = ["--validation.no-enable", "--lr_scheduler.total_steps", "20", "--lr_scheduler.warmup_steps", "5",
              "--checkpoint.interval", "10", *tp]
    straight = losses(run_train(tmp_path, *common, ngpu=ngpu, steps=20, folder="straight"))
    run_train(tmp_path, *common, ngpu=ngpu, steps=10, folder="resumed")
    second = run_train(tmp_path, *common, ngpu=ngpu, steps=20, folder="resumed")
    assert "Training starts at step 11" in second
    resumed = losses(second)
    assert resumed == {s: v for s, v in straight.items() if s > 10}  # bit-identical on CPU


@pytest.mark.slow
def test_compile_and_profile_workflow_writes_traces(tmp_path):
    # the README's workflow 3, at TP=2 with BTP; aot_eager keeps the compile cheap on CPU
    log = run_train(tmp_path, "--checkpoint.no-enable", "--validation.no-enable", "--compile.enable",
                    "--compile.backend", "aot_eager", "--profiling.enable_profiling", "--profiling.profile_freq", "4",
                    "--profiling.profiler_warmup", "1", "--profiling.profiler_active", "1",
                    "--profiling.enable_memory_snapshot", "--parallelism.tensor_parallel_degree", "2",
                    "--parallelism.data_parallel_shard_degree", "1", ngpu=2, steps=4)
    assert "Compiling each TransformerBlock with torch.compile" in log
    # step 1 is counted eagerly, the compiled steps after it report the same numbers
    assert re.search(r"comm/step: .*all_reduce \d+×", log), log[-3000:]
    traces = list((tmp_path / "out" / "profile_traces" / "iteration_4").glob("rank*_trace.json"))
    assert {t.name for t in traces} == {"rank0_trace.json", "rank1_trace.json"}
    assert (tmp_path / "out" / "memory_snapshot" / "iteration_4" / "rank0_memory_snapshot.pickle").is_file()

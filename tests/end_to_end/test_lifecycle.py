"""A run's life on a cluster, on real CPU runs: the launcher killed, SIGTERM/SIGINT stops, resume.

The signalled runs go through ``run_train.sh`` (its launcher is what is signalled); the runs they are
compared with, and the restarts, are the trainer's ranks alone (``tests/trainer.py``'s ``train``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.end_to_end.test_fault_tolerance import COMMON
from tests.suite_once import once_per_suite
from tests.trainer import ROOT, SMALL, losses, train

STEPS = 24
# the killed run's: killed after its step-3 checkpoint, it has 9 bigger steps to go (seconds)
KILLED_STEPS = 12


def _start(tmp_path: Path, folder: str, *overrides: str, steps: int = STEPS) -> tuple[subprocess.Popen, Path]:
    """``run_train.sh`` at NGPU=2 in a session of its own (a terminal's job); console to a file."""
    env = dict(os.environ, NGPU="2", PYTHON=sys.executable, BOOST_CACHE=str(tmp_path.parent / "boost-cache"))
    console = tmp_path / f"{folder}.console"
    cmd = [
        "./run_train.sh",
        "--job.dump_folder",
        str(tmp_path / folder),
        "--training.steps",
        str(steps),
        *SMALL,
        *COMMON,
        *overrides,
    ]
    with open(console, "w") as f:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    return proc, console


def _descendants(pid: int) -> list[int]:
    """All processes below ``pid`` (torchrun starts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _complete(folder: Path) -> set[int]:
    return {int(p.parent.name.split("-")[1]) for p in (folder / "checkpoint").glob("step-*/.metadata")}


def _wait_for_step(proc: subprocess.Popen, folder: Path, step: int) -> None:
    deadline = time.time() + 120
    while step not in _complete(folder):
        assert proc.poll() is None and time.time() < deadline, f"run ended before its step-{step} checkpoint"
        time.sleep(0.05)


def _alive(pids: list[int]) -> list[int]:
    def running(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    return [p for p in pids if running(p)]


def _gone_within(pids: list[int], seconds: float) -> float:
    start = time.time()
    while _alive(pids) and time.time() - start < seconds:
        time.sleep(0.05)
    assert not _alive(pids), f"still running after {seconds} s: {_alive(pids)}"
    return time.time() - start


@pytest.mark.slow
def test_sigkill_to_the_launcher_ends_its_ranks_and_the_run_resumes_at_one_process_on_the_same_curve(
    tmp_path,
):
    # tp=2, bigger steps than the other tests (the kill must land while the run is still going), a
    # checkpoint every step (one may be in flight at the kill)
    big = ["--training.seq_len", "256", "--training.local_batch_size", "8"]
    tp = ["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1", *big]
    proc, console = _start(tmp_path, "killed", *tp, "--checkpoint.interval", "1", steps=KILLED_STEPS)
    _wait_for_step(proc, tmp_path / "killed", 3)
    ranks = _descendants(proc.pid)
    assert len(ranks) >= 2 and proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)  # the launcher alone: the ranks are in sessions of their own
    proc.wait()
    at_kill = _complete(tmp_path / "killed")
    _gone_within(ranks, 5)
    time.sleep(1)
    # at most the save in flight at the kill completes (none does: SIGKILL lands mid-step)
    assert _complete(tmp_path / "killed") <= at_kill | {max(at_kill) + 1}, console.read_text()[-3000:]

    # resumed at 1 process: DCP reshards the tp=2 checkpoint (same data-parallel degree, same samples),
    # 3 steps on, against an uninterrupted tp=2 run to the same step (COMMON fixes the LR schedule's
    # length, so a run's --training.steps does not change it)
    first = max(_complete(tmp_path / "killed")) + 1
    assert 4 <= first < KILLED_STEPS
    end = first + 2
    straight = losses(
        train(tmp_path, *COMMON, *tp, "--checkpoint.no-enable", ngpu=2, steps=end, folder="straight")
    )
    log = train(tmp_path, *COMMON, *big, "--checkpoint.interval", "1", ngpu=1, steps=end, folder="killed")
    resumed = losses(log)
    assert resumed, log[-3000:]
    assert f"Training starts at step {first}" in log and min(resumed) == first
    # TP=2 and 1 process agree to f32 rounding (the all-reduces sum in another order), not to the bit
    assert resumed.keys() == {s for s in straight if s >= first}
    for step, loss in resumed.items():
        assert abs(loss - straight[step]) <= 1e-5 * straight[step], (step, loss, straight[step])


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> dict[int, float]:
    """The uninterrupted run the stopped runs resume onto (same layout, seed and data): its losses, once a
    suite (``tests/suite_once.py``)."""
    _, log = once_per_suite(
        tmp_path_factory,
        "lifecycle-straight",
        lambda folder: train(
            folder, *COMMON, "--checkpoint.no-enable", ngpu=2, steps=STEPS, folder="straight"
        ),
    )
    return losses(log)


def _stopped_then_resumed(tmp_path, straight, send, check_every: int = 2) -> tuple[int, str, int]:
    """Signal a run after its step-3 checkpoint with ``send(launcher_pid, rank_pids)``; return its exit code,
    console, and the step it stopped at, and check that the restart lands on the uninterrupted curve."""
    # interval 3, agreement every 2 steps: the stop's checkpoint is one the interval would not write
    opts = ["--checkpoint.interval", "3", "--boost.stop_check_every", str(check_every)]
    proc, console = _start(tmp_path, "stopped", *opts)
    _wait_for_step(proc, tmp_path / "stopped", 3)
    send(proc.pid, _descendants(proc.pid))
    sent = time.time()
    rc = proc.wait(timeout=60)
    took = time.time() - sent
    text = console.read_text()
    stopped = max(_complete(tmp_path / "stopped"))
    assert 3 < stopped < STEPS and stopped % check_every == 0 and stopped % 3, text[-3000:]
    assert took < 30, took

    resumed = losses(train(tmp_path, *COMMON, *opts, ngpu=2, steps=STEPS, folder="stopped"))
    assert min(resumed) == stopped + 1
    # same layout, same seed, same data position: the resumed steps are the uninterrupted ones
    for step, loss in resumed.items():
        assert abs(loss - straight[step]) <= 1e-6 * straight[step], (step, loss, straight[step])
    return rc, text, stopped


@pytest.mark.slow
def test_sigterm_to_every_process_saves_and_resumes_on_the_same_curve(tmp_path, straight):
    def slurm(launcher, ranks):  # Slurm signals every process of the job, launcher and ranks alike
        for pid in [launcher, *ranks]:
            os.kill(pid, signal.SIGTERM)

    rc, text, stopped = _stopped_then_resumed(tmp_path, straight, slurm)
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    assert f"BOOST: stopped by SIGTERM after step {stopped}: checkpoint" in text
    assert "Traceback" not in text and "SignalException" not in text, text[-3000:]
    assert text.rstrip().splitlines()[-1].startswith("BOOST launcher: SIGTERM received")


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_a_second_one_at_once(tmp_path, straight):
    rc, text, stopped = _stopped_then_resumed(
        tmp_path, straight, lambda launcher, ranks: os.killpg(launcher, signal.SIGINT)
    )
    assert rc == 128 + signal.SIGINT
    assert f"BOOST: stopped by SIGINT after step {stopped}: checkpoint" in text
    assert "Traceback" not in text, text[-3000:]

    # a stop that cannot reach its boundary (agreement every 1000 steps): the second Ctrl-C ends it
    proc, console = _start(
        tmp_path, "twice", "--checkpoint.interval", "2", "--boost.stop_check_every", "1000"
    )
    _wait_for_step(proc, tmp_path / "twice", 2)
    ranks = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(1.5)
    before = _complete(tmp_path / "twice")
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=10) == 128 + signal.SIGINT
    _gone_within(ranks, 5)
    assert _complete(tmp_path / "twice") == before
    # torchrun turns the second Ctrl-C into SIGTERM for its ranks
    assert "stopped at once, without a checkpoint" in console.read_text()

"""A run's life on a cluster, on real CPU runs: the launcher killed, SIGTERM/SIGINT stops, resume.

The signalled runs go through ``run_train.sh`` (its launcher is what is signalled); the runs they are
compared with, and the restarts, are the trainer's ranks alone (``tests/trainer.py``'s ``train``).
Every signal lands where it means to: the ranks wait at a step boundary (``step_hold``) while the test
signals, so what a run has done by then, and where it stops, is the same on any machine at any load.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.end_to_end.test_fault_tolerance import COMMON
from tests.suite_once import once_per_suite
from tests.trainer import ROOT, SMALL, losses, train
from torchtitan_ext.guards.graceful_stop import _SAME_REQUEST_S
from torchtitan_ext.guards.step_hold import HOLD_ENV

STEPS = 24
NGPU = 2
STOPPING = "stopping at the next agreed step boundary"  # rank 0's line once it has taken a stop signal
# A bound on waits that end on a state (a rank at its hold, a line, a process gone): reached only by a
# run that hangs, never by a slow one (the suite's other runs are bounded alike, tests/trainer.py).
HANG_GUARD_S = 600


def _start(
    tmp_path: Path,
    folder: str,
    *overrides: str,
    steps: int = STEPS,
    hold_after: int | None = None,
    ngpu: int = NGPU,
) -> tuple[subprocess.Popen, Path]:
    """``run_train.sh`` at NGPU=``ngpu`` in a session of its own (a terminal's job); console to a file. With
    ``hold_after``, every rank waits after that step at its FIFO ``<tmp_path>/<folder>-hold.<rank>``."""
    env = dict(
        os.environ, NGPU=str(ngpu), PYTHON=sys.executable, BOOST_CACHE=str(tmp_path.parent / "boost-cache")
    )
    if hold_after is not None:
        for rank in range(ngpu):
            os.mkfifo(tmp_path / f"{folder}-hold.{rank}")
        env[HOLD_ENV] = f"{hold_after}:{tmp_path / f'{folder}-hold'}"
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


def _until(done, proc: subprocess.Popen, console: Path, what: str):
    """Poll ``done()`` until it answers; fail at once if ``proc`` ends first (``HANG_GUARD_S`` for a hang)."""
    guard = time.monotonic() + HANG_GUARD_S
    while not (answer := done()):
        assert proc.poll() is None, f"the run ended before {what}:\n{console.read_text()[-3000:]}"
        assert time.monotonic() < guard, f"no {what} after {HANG_GUARD_S} s"
        time.sleep(0.05)
    return answer


def _held(tmp_path: Path, folder: str, proc: subprocess.Popen, console: Path, ngpu: int = NGPU) -> list[int]:
    """Once every rank waits at its FIFO (``step_hold``): the FIFOs opened for writing. Until they are
    closed, no rank moves on; closing them lets the run go on."""
    held = []
    for rank in range(ngpu):
        fifo = tmp_path / f"{folder}-hold.{rank}"
        held.append(_until(lambda fifo=fifo: _open_if_read(fifo), proc, console, f"rank {rank} at its hold"))
    return held


def _open_if_read(fifo: Path) -> int | None:
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno != errno.ENXIO:  # ENXIO: no reader yet
            raise
        return None


def _release(held: list[int]) -> None:
    for fd in held:
        os.close(fd)


def _alive(pids: list[int]) -> list[int]:
    def running(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    return [p for p in pids if running(p)]


def _gone(pids: list[int]) -> None:
    guard = time.monotonic() + HANG_GUARD_S
    while _alive(pids):
        assert time.monotonic() < guard, f"still running after {HANG_GUARD_S} s: {_alive(pids)}"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_to_the_launcher_ends_its_ranks_and_the_run_resumes_at_one_process_on_the_same_curve(
    tmp_path,
):
    # tp=2, a checkpoint every step; killed while every rank waits after step 3, its checkpoint saved
    tp = ["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1"]
    proc, console = _start(tmp_path, "killed", *tp, "--checkpoint.interval", "1", hold_after=3)
    held = _held(tmp_path, "killed", proc, console)
    try:
        ranks = _descendants(proc.pid)
        assert len(ranks) >= 2, ranks
        os.kill(proc.pid, signal.SIGKILL)  # the launcher alone: the ranks are in sessions of their own
        proc.wait()
        _gone(ranks)  # ended by the kernel with their launcher (PR_SET_PDEATHSIG)
    finally:
        _release(held)
    assert max(_complete(tmp_path / "killed")) == 3, console.read_text()[-3000:]

    # resumed at 1 process: DCP reshards the tp=2 checkpoint (same data-parallel degree, same samples),
    # 3 steps on, against an uninterrupted tp=2 run to the same step (COMMON fixes the LR schedule's
    # length, so a run's --training.steps does not change it)
    first, end = 4, 6
    straight = losses(
        train(tmp_path, *COMMON, *tp, "--checkpoint.no-enable", ngpu=2, steps=end, folder="straight")
    )
    log = train(tmp_path, *COMMON, "--checkpoint.interval", "1", ngpu=1, steps=end, folder="killed")
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


def _terminated_while_held(
    tmp_path: Path, folder: str, *overrides: str, **start
) -> tuple[subprocess.Popen, Path]:
    """``_start`` a run, SIGTERM every process of it (as Slurm signals a job) once every rank waits after
    ``hold_after``, and let it go on once rank 0 has taken the request: its stop lands on a known boundary."""
    proc, console = _start(tmp_path, folder, *overrides, **start)
    held = _held(tmp_path, folder, proc, console, ngpu=start.get("ngpu", NGPU))
    try:
        for pid in [proc.pid, *_descendants(proc.pid)]:
            os.kill(pid, signal.SIGTERM)
        _until(lambda: STOPPING in console.read_text(), proc, console, "rank 0's stop line")
    finally:
        _release(held)
    return proc, console


def _stopped_then_resumed(tmp_path, straight, send, check_every: int = 2) -> tuple[int, str, int]:
    """Signal a run with ``send(launcher_pid, rank_pids)`` while its ranks wait after step 3 (its
    checkpoint saved); return its exit code, console, and the step it stopped at, and check that the
    restart lands on the uninterrupted curve."""
    # interval 3, agreement every 2 steps: the stop's checkpoint is one the interval would not write
    opts = ["--checkpoint.interval", "3", "--boost.stop_check_every", str(check_every)]
    proc, console = _start(tmp_path, "stopped", *opts, hold_after=3)
    held = _held(tmp_path, "stopped", proc, console)
    try:
        send(proc.pid, _descendants(proc.pid))
        # rank 0 has the request before the ranks go on: the agreement after step 4 sees it
        _until(lambda: STOPPING in console.read_text(), proc, console, "rank 0's stop line")
    finally:
        _release(held)
    rc = proc.wait(timeout=HANG_GUARD_S)
    text = console.read_text()
    stopped = max(_complete(tmp_path / "stopped"))
    # the first agreed boundary after the signal, not a step later: the stop is as prompt as check_every
    assert stopped == (3 // check_every + 1) * check_every and stopped % 3, text[-3000:]

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
def test_a_stop_of_a_run_started_at_a_load_step_says_to_resume_at_the_stops_step(tmp_path):
    # the same command would load its checkpoint.load_step again, not the stop's checkpoint
    opts = [*COMMON, "--checkpoint.interval", "2", "--boost.stop_check_every", "1"]
    train(tmp_path, *opts, steps=2, folder="pinned")  # a full step-2 (debug.toml keeps the last save full)
    proc, console = _terminated_while_held(
        tmp_path, "pinned", *opts, "--checkpoint.load_step", "2", steps=6, hold_after=3, ngpu=1
    )
    assert proc.wait(timeout=HANG_GUARD_S) == 128 + signal.SIGTERM
    text = console.read_text()
    stop = re.search(r"BOOST: stopped by SIGTERM after step (\d+): checkpoint \S+ saved; (.*)", text)
    assert stop and stop.group(1) == "3", text[-3000:]
    assert stop.group(2) == "run the same command with --checkpoint.load_step 3 to resume"
    # what it says: the run goes on after the stop's step
    log = train(tmp_path, *opts, "--checkpoint.load_step", "3", steps=6, folder="pinned")
    assert "Training starts at step 4" in log and min(losses(log)) == 4


@pytest.mark.slow
def test_a_stop_at_the_last_step_says_the_training_is_done(tmp_path):
    # torchtitan's last save keeps the model alone here: "run the same command to resume" would have
    # named it a resume point, and the next run trained the last steps again from step 2
    opts = [*COMMON, "--checkpoint.interval", "2", "--boost.stop_check_every", "1"]
    proc, console = _terminated_while_held(
        tmp_path, "ended", *opts, "--checkpoint.last_save_model_only", steps=3, hold_after=3, ngpu=1
    )
    proc.wait(timeout=HANG_GUARD_S)
    text = console.read_text()
    stop = re.search(r"BOOST: stopped by SIGTERM after step (\d+): (.*)", text)
    assert stop and stop.group(1) == "3", text[-3000:]
    assert stop.group(2) == "the run had reached training.steps = 3: its training is done"


@pytest.mark.slow
def test_a_stop_after_a_non_finite_step_saves_no_checkpoint(tmp_path):
    # lr 1e30 makes step 2 on non-finite; no log step (and no interval save) until step 100, so the guard's
    # only read of the norm is the stop's own, at its agreed boundary after step 4 (a save there would hold
    # NaN weights, and the next start would resume from them)
    overrides = ["--optimizer.lr", "1e30", "--lr_scheduler.warmup_steps", "1", "--training.max_norm", "1e30"]
    overrides += [
        "--metrics.log_freq",
        "100",
        "--checkpoint.interval",
        "100",
        "--boost.stop_check_every",
        "2",
    ]
    proc, console = _terminated_while_held(tmp_path, "diverged", *overrides, hold_after=3)
    assert proc.wait(timeout=HANG_GUARD_S) != 0
    text = console.read_text()
    assert "non-finite loss/gradients at step 4" in text, text[-3000:]
    assert _complete(tmp_path / "diverged") == set() and "saved; run the same command" not in text


@pytest.mark.slow
@pytest.mark.long
def test_ctrl_c_stops_cleanly_and_a_second_one_at_once(tmp_path, straight):
    rc, text, stopped = _stopped_then_resumed(
        tmp_path, straight, lambda launcher, ranks: os.killpg(launcher, signal.SIGINT)
    )
    assert rc == 128 + signal.SIGINT
    assert f"BOOST: stopped by SIGINT after step {stopped}: checkpoint" in text
    assert "Traceback" not in text, text[-3000:]

    # a stop that cannot reach its boundary (agreement every 1000 steps): the second Ctrl-C ends it
    proc, console = _start(
        tmp_path, "twice", "--checkpoint.interval", "2", "--boost.stop_check_every", "1000", hold_after=2
    )
    held = _held(tmp_path, "twice", proc, console)
    try:
        ranks = _descendants(proc.pid)
        before = _complete(tmp_path / "twice")  # held: no rank can save another
        os.killpg(proc.pid, signal.SIGINT)
        _until(lambda: STOPPING in console.read_text(), proc, console, "rank 0's stop line")
        # the rank took the first signal before its line: from here on a second one is a second request
        time.sleep(_SAME_REQUEST_S)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=HANG_GUARD_S) == 128 + signal.SIGINT
        _gone(ranks)
    finally:
        _release(held)
    assert _complete(tmp_path / "twice") == before == {2}
    # torchrun turns the second Ctrl-C into SIGTERM for its ranks
    assert "stopped at once, without a checkpoint" in console.read_text()


@pytest.mark.slow
def test_a_rank_that_dies_on_a_signal_prints_where_it_was(tmp_path):
    # A segfault or an abort in NCCL, gloo, CUDA or a compiled kernel ends a rank with no Python
    # traceback; torchrun alone reports "exitcode -11". The rank's Python stack says where it was.
    env = dict(
        os.environ,
        NGPU="1",
        TRAIN_FILE="tests.end_to_end.native_crash_rank",
        PYTHON=sys.executable,
        BOOST_CACHE=str(tmp_path / "boost-cache"),
    )
    env.pop("PYTHONFAULTHANDLER", None)
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), *COMMON],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    # torchrun prefixes each piece a rank writes with "[rank0]:", and faulthandler writes its header in
    # pieces: the prefix can land inside "Fatal Python error: Segmentation fault"
    out = re.sub(r"\[rank\d+\]:", "", proc.stdout + proc.stderr)
    assert proc.returncode != 0, out[-3000:]
    assert "Fatal Python error: Segmentation fault" in out, out[-3000:]
    assert re.search(r'File ".*native_crash_rank.py", line \d+ in fault_in_native_code', out), out[-3000:]

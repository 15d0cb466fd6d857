"""Corrupt checkpoints, tampered checkpoint files and non-finite losses, on real CPU training runs. A run
killed mid-step (SIGKILL) and resumed: test_lifecycle.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.end_to_end.default_run import DEFAULT_RUN, DEFAULT_STEPS
from tests.trainer import ROOT, SMALL, train, train_ranks

# the LR schedule fixed at debug.toml's 300 steps, whatever a run's --training.steps (at most that: the
# preflight refuses a schedule that ends before the training does)
COMMON = ["--validation.no-enable", "--lr_scheduler.total_steps", "300", "--lr_scheduler.warmup_steps", "5"]


@pytest.mark.slow
def test_corrupt_checkpoint_is_skipped_and_the_previous_one_used(default_run, tmp_path):
    shutil.copytree(default_run.tmp / "out" / "checkpoint", tmp_path / "out" / "checkpoint")
    ckpt = tmp_path / "out" / "checkpoint"
    last, previous = f"step-{DEFAULT_STEPS}", f"step-{DEFAULT_STEPS - 2}"
    data = sorted((ckpt / last).glob("*.distcp"))
    assert data
    with open(data[0], "r+b") as f:  # truncate: a kill during the write, a full disk
        f.truncate(os.path.getsize(data[0]) // 2)
    intact = {p.name: p.stat().st_mtime_ns for p in (ckpt / previous).iterdir()}
    log = train(tmp_path, *DEFAULT_RUN, steps=DEFAULT_STEPS)
    assert "skipping checkpoint" in log and last in log and "truncated" in log
    assert f"Training starts at step {DEFAULT_STEPS - 1}" in log
    assert {p.name: p.stat().st_mtime_ns for p in (ckpt / previous).iterdir()} == intact  # never overwritten


def test_foreign_pickle_in_metadata_is_refused(tmp_path):
    import pickle

    from boost.runtime.checkpoint_folder import choose_checkpoint, inspect_checkpoint

    bad = tmp_path / "step-5"
    bad.mkdir()

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    (bad / ".metadata").write_bytes(pickle.dumps(Evil()))
    assert "refusing" in inspect_checkpoint(bad)
    assert choose_checkpoint(tmp_path) == (None, [(5, inspect_checkpoint(bad))])


class _RunsACommand:  # what a tampered checkpoint item would carry
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_checkpoint_items_outside_the_weights_only_allowlist_are_refused(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp

    from boost.runtime.checkpoint_folder import inspect_checkpoint

    plain = {"w": torch.arange(6.0), "train_state": {"step": 7, "losses": [1.5, 2.5]}}
    dcp.save(plain, checkpoint_id=tmp_path / "step-1", no_dist=True)
    assert inspect_checkpoint(tmp_path / "step-1") is None

    dcp.save({**plain, "train_state": _RunsACommand()}, checkpoint_id=tmp_path / "step-2", no_dist=True)
    reason = inspect_checkpoint(tmp_path / "step-2")
    assert reason is not None and "train_state" in reason and "weights-only" in reason

    # a torch-namespace gadget in .metadata is refused too, not only foreign modules
    import pickle

    import torch.utils.cpp_extension

    class Gadget:
        def __reduce__(self):
            return (torch.utils.cpp_extension.load_inline, ("x", ""))

    (tmp_path / "step-3").mkdir()
    (tmp_path / "step-3" / ".metadata").write_bytes(pickle.dumps(Gadget()))
    assert "refusing torch.utils.cpp_extension.load_inline" in inspect_checkpoint(tmp_path / "step-3")


@pytest.mark.slow
def test_non_finite_loss_stops_with_the_step_and_keeps_good_checkpoints(tmp_path):
    codes, logs = train_ranks(
        tmp_path,
        "--validation.no-enable",
        "--checkpoint.interval",
        "1",
        "--optimizer.lr",
        "1e30",
        "--lr_scheduler.warmup_steps",
        "1",
        "--training.max_norm",
        "1e30",
        "--boost.no-log-comm",  # the guard stands with the comm metrics off too
        steps=30,
    )
    assert codes[0] != 0, logs[0][-3000:]
    match = re.search(r"non-finite loss/gradients at step (\d+)", logs[0])
    assert match, logs[0][-4000:]
    assert "this is a dry run" not in logs[0]
    bad_step = int(match.group(1))
    saved = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "out" / "checkpoint").glob("step-*"))
    assert saved and max(saved) == bad_step - 1  # the failed step saved nothing


@pytest.mark.slow
def test_a_dry_run_that_goes_non_finite_says_its_numbers_are_not_a_models(tmp_path):
    """A dry run's collectives hand each rank its own data back: its gradients can overflow where the
    model's would not (the dense 7B@16 on the H100 at step 8). The guard still stops it, and says so."""
    env = dict(os.environ, DRY_RUN="1", NGPU="4", PYTHON=sys.executable, BOOST_CACHE=str(tmp_path / "cache"))
    overrides = ["--optimizer.lr", "1e30", "--lr_scheduler.warmup_steps", "1", "--training.max_norm", "1e30"]
    overrides += ["--checkpoint.no-enable"]  # a dry run saves none (the preflight refuses it)
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), "--training.steps", "30", *SMALL, *overrides],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert re.search(
        r"non-finite loss/gradients at step \d+ .*; this is a dry run \(comm.mode = fake_backend\)", out
    ), out[-3000:]

"""run_train.sh refuses a bad job in one line before any process starts: the preflight's refusals as the
launcher prints them, the config file it reads (CONFIG_FILE or --job.config_file), NGPU and LOG_RANK."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.trainer import ROOT, stderr_lines


@pytest.mark.slow
def test_run_train_refuses_before_starting_any_process(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, NGPU="2")
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path), "--parallelism.tensor_parallel_degree", "3"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "BOOST config error: parallelism" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written
    # NGPU = 0 reaches the preflight (before the launcher's arithmetic divides by it): one line, no traceback.
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path)],
        cwd=ROOT,
        env=dict(env, NGPU="0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "BOOST config error: NGPU = 0: must be at least 1 (processes on this node)"
    )
    # the fake process group by hand, without DRY_RUN=1: each of NGPU processes would play rank 0
    proc = subprocess.run(
        [
            "./run_train.sh",
            "--job.dump_folder",
            str(tmp_path),
            "--comm.mode",
            "fake_backend",
            "--checkpoint.no-enable",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "BOOST config error: comm.mode = 'fake_backend'" in proc.stderr, (
        proc.stderr
    )
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_run_train_uses_or_refuses_a_config_file_given_as_an_argument(tmp_path):
    """``--job.config_file X`` (torchtitan's CLI form) is the config run_train.sh runs, never ignored for the
    default."""
    env = {k: v for k, v in os.environ.items() if k != "CONFIG_FILE"} | {
        "PYTHON": sys.executable,
        "NGPU": "1",
    }
    # A config only this file makes invalid: its refusal shows the file is the one read.
    zero_steps = tmp_path / "zero_steps.toml"
    zero_steps.write_text(
        (ROOT / "train_configs" / "debug.toml").read_text().replace("steps = 300", "steps = 0")
    )
    missing = str(tmp_path / "missing.toml")
    expected = [
        (
            {},
            ["--job.config_file", str(zero_steps)],
            "BOOST config error: training.steps = 0: must be at least 1",
        ),
        (
            {},
            [f"--job.config-file={missing}"],
            f"BOOST config error: job.config_file = {missing!r}: no such file; pass an existing "
            "TOML (see train_configs/)",
        ),
        (
            {"CONFIG_FILE": missing},
            [],
            f"BOOST config error: job.config_file = {missing!r}: no such file; pass an existing "
            "TOML (see train_configs/)",
        ),
        (  # run_train.sh reads a relative path from the repository's root, and the refusal says so
            {"CONFIG_FILE": "my.toml"},
            [],
            f"BOOST config error: job.config_file = 'my.toml': no such file ({ROOT.resolve() / 'my.toml'}); pass an "
            "existing TOML (see train_configs/)",
        ),
        (
            {"CONFIG_FILE": "train_configs/debug.toml"},
            ["--job.config_file", str(zero_steps)],
            f"BOOST config error: job.config_file = {str(zero_steps)!r}: a second config file, after "
            f"'train_configs/debug.toml' (CONFIG_FILE, or an earlier --job.config_file); torchtitan reads the first "
            f"alone: name one, as CONFIG_FILE={zero_steps} or --job.config_file {zero_steps}",
        ),
    ]
    for extra_env, args, message in expected:
        proc = subprocess.run(
            ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), *args],
            cwd=ROOT,
            env=env | extra_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert proc.stderr.strip().splitlines() == [message]  # one line, before any process started
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_run_train_refuses_log_ranks_that_are_not_its_ranks(tmp_path):
    """``LOG_RANK`` is checked as ``DRY_RUN_RANK`` is, before any process starts: torchrun stops on a
    non-integer with a traceback, and a rank beyond NGPU would leave the console silent."""
    from torchtitan_ext.preflight.check import log_ranks

    assert log_ranks("0, 1", 2) == "0,1" and log_ranks("", 2) is None and log_ranks(None, 2) is None
    env = dict(os.environ, PYTHON=sys.executable, NGPU="1")
    for raw, shown in (("x", "'x'"), ("5", "'5'"), ("0,-1", "'0,-1'")):
        proc = subprocess.run(
            ["./run_train.sh", "--job.dump_folder", str(tmp_path)],
            cwd=ROOT,
            env=dict(env, LOG_RANK=raw),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert stderr_lines(proc.stderr) == [
            f"BOOST config error: LOG_RANK = {shown}: must be ranks of this node's NGPU = 1 processes: "
            "comma-separated integers from 0 to 0"
        ]
    assert not any(tmp_path.iterdir())

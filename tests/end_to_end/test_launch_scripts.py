"""The launch scripts' own choices, before any process starts: the interpreter they run
(``scripts/python_choice.sh``) and the preflight before torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer import ROOT

# training.steps = 0 is refused by the preflight: the launcher ran, and started no process
REFUSED = ["--training.steps", "0"]
REFUSAL = "BOOST config error: training.steps = 0: must be at least 1"


def _marking_python(tmp_path: Path) -> Path:
    """A Python that says it ran, then is the real one."""
    wrapper = tmp_path / "marking_python"
    wrapper.write_text(f'#!/bin/sh\necho "MARKING PYTHON RAN" >&2\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.slow
def test_run_train_runs_the_python_it_is_given(tmp_path):
    """``PYTHON`` is run as given, also where no virtual environment is active and the checkout has a
    .venv (which is the choice only where ``PYTHON`` is unset)."""
    assert (ROOT / ".venv" / "bin" / "python").exists(), "the case needs the checkout's .venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONFIG_FILE")}
    env |= {"NGPU": "1", "PYTHON": str(_marking_python(tmp_path))}
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), *REFUSED],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == ["MARKING PYTHON RAN", REFUSAL], (
        proc.stderr
    )


@pytest.mark.slow
def test_node_script_runs_the_preflight_at_the_world_size_and_the_python_it_is_given(tmp_path):
    """scripts/node_train.sh chooses its Python as run_train.sh does, and runs the preflight at NGPU × NNODES
    before torchrun: a bad job is one line, exit 2, no rendezvous."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONFIG_FILE")}
    env |= {"NNODES": "2", "NGPU": "1", "RDZV_HOST": "localhost", "PYTHON": str(_marking_python(tmp_path))}
    dump = ["--job.dump_folder", str(tmp_path / "out")]
    # tp 2 fills the world of 2 nodes × 1 process, and would not fit one node's 1
    layout = ["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "2"]
    proc = subprocess.run(
        ["bash", "scripts/node_train.sh", *dump, *layout],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "MARKING PYTHON RAN",
        "BOOST config error: parallelism.data_parallel_shard_degree = 2: tp×pp×dp_replicate×cp×dp_shard = 4 must "
        "equal the world size 2 (NGPU × NNODES); set data_parallel_shard_degree = -1 to fill the rest",
    ]
    assert not (tmp_path / "out").exists()


def test_node_script_reads_a_config_given_as_an_argument(tmp_path):
    """``--job.config_file X`` among node_train.sh's arguments is the config it runs, as run_train.sh takes it:
    the default was passed as well, and the preflight refused the pair as two config files."""
    zero_steps = tmp_path / "zero_steps.toml"
    zero_steps.write_text(
        (ROOT / "train_configs" / "debug.toml").read_text().replace("steps = 300", "steps = 0")
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONFIG_FILE")}
    env |= {"NNODES": "2", "NGPU": "1", "RDZV_HOST": "localhost", "PYTHON": sys.executable}
    for config in (["--job.config_file", str(zero_steps)], [f"--job.config-file={zero_steps}"]):
        proc = subprocess.run(
            ["bash", "scripts/node_train.sh", "--job.dump_folder", str(tmp_path / "out"), *config],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines() == [REFUSAL]  # this file's refusal: the file was read


def test_the_slurm_job_submitted_outside_the_checkout_says_where_to_submit(tmp_path):
    # Slurm runs a copy of the script from the folder it was submitted in: scripts/node_train.sh was not found
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm_train.sbatch")],
        cwd=tmp_path, env=dict(os.environ, SLURM_SUBMIT_DIR=str(tmp_path)), capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (
        f"BOOST: {tmp_path} holds no scripts/node_train.sh: submit from the BOOST checkout's root, or set BOOST_DIR\n"
    )

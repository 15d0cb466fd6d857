"""scripts/: the Slurm job's per-node part run as two "nodes" on one machine, Slurm's variables set by
hand (no srun here: ``slurm_train.sbatch`` only starts ``node_train.sh`` once per node)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.end_to_end.test_multi_node import _free_port
from tests.trainer import ROOT, losses

STEPS = 3


@pytest.mark.slow
def test_node_script_under_slurm_variables_trains_two_nodes(tmp_path):
    env = dict(
        os.environ,
        SLURM_JOB_NUM_NODES="2",
        SLURM_JOB_NODELIST="localhost",
        SLURM_JOB_ID="4242",
        NGPU="1",
        RDZV_PORT=str(_free_port()),
        PYTHON=sys.executable,
        OMP_NUM_THREADS="1",
        BOOST_CACHE=str(tmp_path.parent / "boost-cache"),
    )
    overrides = [
        "--training.steps",
        str(STEPS),
        "--job.dump_folder",
        str(tmp_path / "out"),
        "--checkpoint.no-enable",
        "--validation.no-enable",
        "--training.seq_len",
        "64",
        "--training.local_batch_size",
        "4",
        "--metrics.log_freq",
        "1",
    ]
    nodes = [
        subprocess.Popen(
            ["bash", "scripts/node_train.sh", *overrides],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    logs = [node.communicate(timeout=300)[0] for node in nodes]
    for node, log in zip(nodes, logs):
        assert node.returncode == 0, log[-4000:]
    assert max(len(losses(log)) for log in logs) == STEPS  # rank 0, on one of the two nodes


def test_first_host_of_a_slurm_nodelist():
    def first(nodelist):
        script = (ROOT / "scripts/node_train.sh").read_text()
        fn = re.search(r"first_host\(\) \{.*?\n\}\n", script, re.S).group(0)
        return subprocess.run(
            ["bash", "-c", f"{fn}first_host '{nodelist}'"], capture_output=True, text=True, check=True
        ).stdout.strip()

    assert first("localhost") == "localhost"
    assert first("node1,node2") == "node1"
    assert first("gpu[07-09,12],cpu3") == "gpu07"
    assert first("cpu3,gpu[07-09]") == "cpu3"
    # text after a bracket, and several brackets: scontrol's first host (the text after one was dropped)
    assert first("n[001-004]x") == "n001x"
    assert first("rack[1-2]-node[01-04],login") == "rack1-node01"
    assert first("gpu[12,07-09]") == "gpu12"


def test_slurm_signal_lead_covers_the_default_grace():
    from boost.training.options import BoostOptions

    sbatch = (ROOT / "scripts/slurm_train.sbatch").read_text()
    lead = int(re.search(r"#SBATCH --signal=TERM@(\d+)", sbatch).group(1))
    assert lead > BoostOptions().stop_grace_s
    assert "srun" in sbatch and "scripts/node_train.sh" in sbatch

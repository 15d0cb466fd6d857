"""Multi-node is torchrun's: two launchers on this machine ("nodes") meet through a c10d rendezvous,
with the README's command; TP inside a node, FSDP across. The losses equal the single-launcher run."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer import losses, train

ROOT = Path(__file__).resolve().parents[2]
# tp=2 over a node's 2 processes (torchtitan's mesh puts TP innermost: ranks 2k, 2k+1), FSDP over the nodes
LAYOUT = [
    "--parallelism.tensor_parallel_degree",
    "2",
    "--parallelism.data_parallel_shard_degree",
    "2",
    "--checkpoint.no-enable",
    "--validation.no-enable",
    "--training.seq_len",
    "64",
    "--training.local_batch_size",
    "4",
    "--metrics.log_freq",
    "1",
]
STEPS = 4


def readme_multi_node_command(nodes: int, per_node: int, endpoint: str, config: str) -> list[str]:
    """The README's multi-node command, filled in."""
    text = (ROOT / "README.md").read_text()
    template = re.search(r"`(torchrun --nnodes N [^`]*)`", text)
    assert template, "README.md lost its multi-node torchrun command"
    command = (
        template.group(1)
        .replace("--nnodes N", f"--nnodes {nodes}")
        .replace("--nproc_per_node 8", f"--nproc_per_node {per_node}")
        .replace("HOST:PORT", endpoint)
        .replace("X.toml", config)
    )
    assert "N" not in command.split() and "HOST:PORT" not in command, command
    return shlex.split(command)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.long
def test_two_torchrun_nodes_match_one_launcher(tmp_path):
    command = readme_multi_node_command(2, 2, f"localhost:{_free_port()}", "train_configs/debug.toml")
    command[0] = str(Path(sys.executable).parent / "torchrun")  # the venv's torchrun
    overrides = [*LAYOUT, "--training.steps", str(STEPS), "--job.dump_folder", str(tmp_path / "nodes")]
    env = dict(os.environ, OMP_NUM_THREADS="1", BOOST_CACHE=str(tmp_path.parent / "boost-cache"))
    nodes = [
        subprocess.Popen(
            [*command, *overrides],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    logs = [node.communicate(timeout=600)[0] for node in nodes]
    for node, log in zip(nodes, logs):
        assert node.returncode == 0, log[-4000:]
    # each launcher logs its own two workers; rank 0 is on one of them
    multi = [losses(log) for log in logs]
    multi_node = max(multi, key=len)

    single = losses(train(tmp_path, *LAYOUT, ngpu=4, steps=STEPS, folder="single"))  # one launcher's ranks
    assert len(single) == STEPS
    assert multi_node == single, (multi_node, single)  # same ranks, same collectives: bit-identical

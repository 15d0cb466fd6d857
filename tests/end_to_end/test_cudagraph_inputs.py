"""What ``boost.cudagraphs`` needs of the compiled blocks, checked where no GPU is: a CUDA graph replays its
kernels on the addresses it recorded, so every weight a block's graph reads must be an input inductor
treats as static (the same memory every step), and no graph may write into its inputs. On a GPU, a
block that breaks either stops the run (``torchtitan_ext.torch_private.cudagraphs_or_error``); here the
same graphs are compiled and inductor's record of their inputs is read
(``torch_private.record_compiled_graphs``).

The layout is the GPU rows' (``bench/gpu_rows.py``, 7B@16 btp with SimpleFSDP and CUDA graphs) at the
debug model's size: rank 0 of 4 on the fake process group (tp 2 × FSDP 2), BTP with low-rank AC, bf16
through SimpleFSDP, inductor (the blocks; the loss uncompiled), one step, in a fresh process. Its
control, compiled by the same function in the same process: a block that writes into a buffer, whose
record must name that input (else "no graph writes into its inputs" would hold of any record).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest
import torch

from tests.trainer import ROOT

ARGS = [
    "--job.config_file", "train_configs/debug.toml",
    "--comm.mode", "fake_backend",
    "--parallelism.tensor_parallel_degree", "2",
    "--training.mixed_precision_param", "bfloat16",
    "--training.seq_len", "32",
    "--training.local_batch_size", "2",
    "--training.steps", "1",
    "--compile.enable",
    "--compile.components", "model",
    "--boost.activation_checkpoint", "lowrank",
    "--boost.fsdp", "simple_fsdp",
    "--parallelism.fsdp_reshard_after_forward", "default",
    "--boost.cudagraphs",
    "--checkpoint.no-enable",
    "--validation.no-enable",
]  # fmt: skip
WORLD_SIZE = 4


class BufferWritingBlock(torch.nn.Module):
    """The control: a block whose forward writes into a buffer (as BatchNorm's running statistics do),
    an input its compiled graph mutates. ``calls`` has a shape no other input of its graph has."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(8, 8))
        self.register_buffer("calls", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x @ self.weight


def probe() -> None:
    """The child: train, print the compiled graphs' records and a block's parameter count as JSON, and the
    records of the control compiled the same way (``apply_compile_with_cudagraphs``) and run forward."""
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(WORLD_SIZE), NGPU=str(WORLD_SIZE))
    from torchtitan.config import ConfigManager
    from torchtitan.config.job_config import Compile

    from torchtitan_ext.infra.cudagraphs import apply_compile_with_cudagraphs
    from torchtitan_ext.torch_private import record_compiled_graphs
    from torchtitan_ext.train import BoostTrainer
    from torchtitan_ext.train_spec import register_boost_train_spec

    register_boost_train_spec()
    with tempfile.TemporaryDirectory() as dump, record_compiled_graphs() as graphs:
        trainer = BoostTrainer(ConfigManager().parse_args([*ARGS, "--job.dump_folder", dump]))
        block_params = len(list(trainer.model_parts[0].layers["0"].parameters()))
        trainer.train()
        trainer.close()
    control_model = torch.nn.Module()
    control_model.layers = torch.nn.ModuleDict({"0": BufferWritingBlock()})
    apply_compile_with_cudagraphs(control_model, Compile(enable=True, backend="inductor"))
    with record_compiled_graphs() as control:
        control_model.layers["0"](torch.ones(4, 8))
    print("PROBE " + json.dumps(dict(graphs=graphs, block_params=block_params, control=control)))


@pytest.mark.slow  # passed on torch 2.11.0 (what GPU images ship) and 2.14.1 too, 2026-11-26
def test_compiled_blocks_read_their_weights_as_static_inputs_and_write_none(tmp_path):
    # Its own inductor cache: the graphs recorded are this run's own compiles. (A shared cache once handed
    # a graph compiled here, on the fake process group, to a gloo run of the same layout, which stopped on
    # a process group it does not have: AOTAutograd's cache, now off for multi-rank runs,
    # torch_private.keep_ranks_compiled_graphs_apart.)
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.end_to_end.test_cudagraph_inputs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-6000:]
    probe_result = json.loads(lines[-1].removeprefix("PROBE "))
    blocks = [g for g in probe_result["graphs"] if g["cudagraphs"]]
    forwards = [g for g in blocks if not g["backward"]]
    backwards = [g for g in blocks if g["backward"]]
    assert forwards and backwards, probe_result["graphs"]
    for graph in blocks:
        assert graph["mutated"] == [], graph  # a replay would write into memory it does not own
    for graph in forwards:
        # every weight (a DTensor shard: one inner tensor each) and buffer at a fixed address; what
        # a replay copies in is the block's input activation and RoPE's table slice
        assert len(graph["static"]) >= probe_result["block_params"], graph
        assert graph["inputs"] - len(graph["static"]) <= 2 + graph["shapes"].count(None), graph
    for graph in backwards:
        # the saved activations and weights are static; copied in: the gradient of the block's output
        assert graph["inputs"] - len(graph["static"]) <= 1 + graph["shapes"].count(None), graph
    # the control: the record does see a graph that writes into its input, the buffer of shape (3,)
    (control,) = probe_result["control"]
    assert control["cudagraphs"] and not control["backward"], control
    assert [control["shapes"][i] for i in control["mutated"]] == [[3]], control


if __name__ == "__main__":
    probe()

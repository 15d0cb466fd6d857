"""What ``boost.cudagraphs`` needs of the compiled blocks, checked where no GPU is: a CUDA graph replays its
kernels on the addresses it recorded, so every weight a block's graph reads must be an input inductor
treats as static (the same memory every step), and no graph may write into its inputs. On a GPU, a
block that breaks either stops the run (``torchtitan_ext.torch_private.cudagraphs_or_error``); here the
same graphs are compiled and inductor's record of their inputs is read
(``torch_private.record_compiled_graphs``).

The run is ``test_feature_matrix.py``'s GPU rows' layout (rank 0 of tp 2 × FSDP 2 on gloo, BTP with
low-rank AC, SimpleFSDP under inductor, ``boost.cudagraphs``), whose rank 0 trains through ``probe``
(``tests/rank_server.py``'s ``PROBE_ENV``) rather than in a process of its own: one inductor compile of
the layout serves both checks. It trains in float32 where the GPU rows train in bf16; the records are the
same (SimpleFSDP's mixed precision casts the gathered weights inside the graph, whose inputs stay the
float32 shards; measured 2026-11-28 in both: a block's forward 26 inputs, 22 static, its backward 28, 27
static, none mutated). The control, compiled by the same function in the same process: a block that writes
into a buffer, whose record must name that input (else "no graph writes into its inputs" would hold of
any record).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

PROBE = "tests.end_to_end.compiled_graphs_probe:probe"
# where rank 0 writes its records (JSON)
RECORD_ENV = "BOOST_TEST_COMPILED_GRAPHS"


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


def probe(main: Callable[[type], None]) -> None:
    """Rank 0: train through ``main`` (``torchtitan_ext.train.main``) recording the compiled graphs and a
    block's parameter count, then compile the control the way the blocks were
    (``apply_compile_with_cudagraphs``) and run it forward; all three to ``RECORD_ENV``'s file."""
    from torchtitan.config.job_config import Compile

    from torchtitan_ext.infra.cudagraphs import apply_compile_with_cudagraphs
    from torchtitan_ext.torch_private import record_compiled_graphs
    from torchtitan_ext.train import BoostTrainer

    block_params: list[int] = []

    class CountingTrainer(BoostTrainer):
        def __init__(self, job_config) -> None:
            super().__init__(job_config)
            block_params.append(len(list(self.model_parts[0].layers["0"].parameters())))

    with record_compiled_graphs() as graphs:
        main(CountingTrainer)
    control_model = torch.nn.Module()
    control_model.layers = torch.nn.ModuleDict({"0": BufferWritingBlock()})
    apply_compile_with_cudagraphs(control_model, Compile(enable=True, backend="inductor"))
    with record_compiled_graphs() as control:
        control_model.layers["0"](torch.ones(4, 8))
    Path(os.environ[RECORD_ENV]).write_text(
        json.dumps(dict(graphs=graphs, block_params=block_params[0], control=control))
    )


def assert_replayable(record: dict[str, Any]) -> None:
    """``probe``'s record: each block graph reads its weights at fixed addresses and writes no input, and
    the record does see the control's write."""
    blocks = [g for g in record["graphs"] if g["cudagraphs"]]
    forwards = [g for g in blocks if not g["backward"]]
    backwards = [g for g in blocks if g["backward"]]
    assert forwards and backwards, record["graphs"]
    for graph in blocks:
        assert graph["mutated"] == [], graph  # a replay would write into memory it does not own
    for graph in forwards:
        # every weight (a DTensor shard: one inner tensor each) and buffer at a fixed address; what
        # a replay copies in is the block's input activation and RoPE's table slice
        assert len(graph["static"]) >= record["block_params"], graph
        assert graph["inputs"] - len(graph["static"]) <= 2 + graph["shapes"].count(None), graph
    for graph in backwards:
        # the saved activations and weights are static; copied in: the gradient of the block's output
        assert graph["inputs"] - len(graph["static"]) <= 1 + graph["shapes"].count(None), graph
    # the control: the record does see a graph that writes into its input, the buffer of shape (3,)
    (control,) = record["control"]
    assert control["cudagraphs"] and not control["backward"], control
    assert [control["shapes"][i] for i in control["mutated"]] == [[3]], control

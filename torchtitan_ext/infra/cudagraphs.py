"""CUDA graphs over the compiled blocks (``boost.cudagraphs``): each block's forward and backward replay
as one graph launch, where the host issued every kernel of them (``docs/design.md`` §10).

Each block is compiled as torchtitan compiles it (``torch.compile(block, fullgraph=True)``, one block at
a time), with inductor's ``triton.cudagraphs`` on: its cudagraph trees record each compiled graph at its
first runs and replay it afterwards, one tree for the blocks' forwards and backwards in a step. What the
validation (``boost.training.rules.cudagraphs_problem``) refuses is what a replay cannot hold: weights
that move (FSDP2 gathers into new memory every step; SimpleFSDP gathers inside the graphs), outputs
still held when their graph replays (a second micro-batch, a pipeline schedule, HSDP's replica all-reduce).

Nothing falls back silently on a GPU: a compiled block inductor would run without CUDA graphs (an op a
graph cannot capture, a mutated input) stops the run naming why (``cudagraphs_or_error``). On a CPU
inductor records no graphs: the blocks run as they would without the switch, the same numbers, and the
trainer's first-step line says so.
"""

from __future__ import annotations

import os

import torch
from torch import nn
from torchtitan.config.job_config import Compile as CompileConfig

from torchtitan_ext.torch_private import cudagraph_skips, cudagraphs_or_error

# NCCL registering a CUDA graph's buffers with expandable segments (run_train.sh's allocator) ends in
# illegal memory accesses (pytorch/pytorch#158029); torchtitan's CUDA-graph runs turn it off too.
NCCL_ENV = {"NCCL_GRAPH_REGISTER": "0"}


def apply_compile_with_cudagraphs(model: nn.Module, compile_config: CompileConfig) -> None:
    """torchtitan's ``apply_compile`` (each transformer block compiled on its own, ``fullgraph``) with
    inductor's CUDA graphs on for the blocks; the compiled loss keeps its own graph without them.

    Copied rather than called: torchtitan's takes no inductor options. ``mark_step`` begins each step.
    """
    cudagraphs_or_error()
    for layer_id, block in model.layers.named_children():
        compiled = torch.compile(
            block, backend=compile_config.backend, fullgraph=True, options={"triton.cudagraphs": True}
        )
        model.layers.register_module(layer_id, compiled)


def set_nccl_env() -> None:
    """Before the process group starts: NCCL's settings for collectives inside CUDA graphs (``NCCL_ENV``),
    where the environment does not set them."""
    for name, value in NCCL_ENV.items():
        os.environ.setdefault(name, value)


def mark_step() -> None:
    """A training step begins: the previous step's graph outputs (activations, gradients) may be reused.

    torch's cudagraph trees otherwise infer steps from the calls they see; torch's own advice for a
    training loop is to say it."""
    torch.compiler.cudagraph_mark_step_begin()


def first_step_line() -> str:
    """What the first step's compiled blocks got: CUDA graphs, or the count inductor ran without them."""
    skipped = cudagraph_skips()
    if skipped == 0:
        return "boost.cudagraphs: the compiled blocks run as CUDA graphs (recorded in their first runs, then replayed)"
    return (
        f"boost.cudagraphs: the blocks' compiled graphs run without CUDA graphs here ({skipped} skipped by "
        "inductor, which records them for a GPU's graphs only: these run on a CPU, with the same numbers "
        "as without the switch)"
    )

"""BTP's collectives as torch.compile traces them: each one waited once in the graph. ``funcol`` puts the
wait in itself while tracing; a second ``wait_tensor`` is one more host call per collective a step, inside
every compiled block (on the 2026-11-27 H100 the 7B@16 rank's host, not its GPU, set the pace)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from boost.training.parallel.collectives import all_gather_rows, all_reduce_sum, reduce_scatter_rows


@pytest.fixture
def fake_group():
    """Rank 1 of 2 on the fake process group (no fills: only the graph's shape is read here)."""
    dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=2)
    try:
        yield dist.group.WORLD.group_name
    finally:
        dist.destroy_process_group()
        torch._dynamo.reset()


def _collective_ops(fn, x: torch.Tensor) -> list[str]:
    """The functional-collective ops, in order, of the graph dynamo traces for ``fn(x)``."""
    ops: list[str] = []

    def record(gm: torch.fx.GraphModule, example_inputs):
        ops.extend(
            str(n.target).split(".")[1]
            for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("_c10d_functional.")
        )
        return gm.forward

    torch.compile(fn, backend=record, fullgraph=True)(x)
    return ops


@pytest.mark.parametrize(
    "collective,name",
    [
        (all_reduce_sum, "all_reduce"),
        (reduce_scatter_rows, "reduce_scatter_tensor"),
        (all_gather_rows, "all_gather_into_tensor"),
    ],
)
def test_each_traced_collective_is_waited_once(fake_group, collective, name):
    ops = _collective_ops(lambda x: collective(x, fake_group) * 2, torch.ones(4, 3))
    assert ops == [name, "wait_tensor"], ops


def test_eager_collectives_hand_back_plain_waited_tensors(fake_group):
    for collective in (all_reduce_sum, reduce_scatter_rows, all_gather_rows):
        out = collective(torch.ones(4, 3), fake_group)
        assert type(out) is torch.Tensor, (collective.__name__, type(out))

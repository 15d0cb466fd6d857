"""``CommCounter`` on the collectives torch registers outside ``c10d`` / ``_c10d_functional``'s plain ops: DTensor's
``_dtensor.shard_dim_alltoall`` and the functional ``batch_p2p_ops``, and on the functional coalesced all-gather
(sized from its inputs), dispatched on the fake process group (the counter reads the op and its arguments;
``tests/multiprocess/test_comm_counter.py`` runs them on gloo)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.testing._internal.distributed.fake_pg import FakeStore

from boost.runtime.comm_counter import CommCounter, NcclRuleError

WORLD = 4


@pytest.fixture
def group_name():
    """Rank 0 of 4 on the fake process group."""
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    try:
        yield dist.group.WORLD.group_name
    finally:
        dist.destroy_process_group()


def _batch(ops: list[str], tensors: list[torch.Tensor], group_name: str) -> None:
    peers = [1 + i % (WORLD - 1) for i in range(len(ops))]
    outs = torch.ops._c10d_functional.batch_p2p_ops(ops, peers, [0] * len(ops), tensors, group_name)
    for t in [*outs, *tensors]:  # torch registers the work on the sent tensors too: waited, no exit warning
        torch.ops._c10d_functional.wait_tensor(t)


def test_shard_dim_alltoall_counts_as_one_all_to_all_of_its_input(group_name):
    x = torch.randn(4, 8)
    with CommCounter() as c:
        out = torch.ops._dtensor.shard_dim_alltoall(x, 0, 1, group_name)
    assert out.shape == (4 * WORLD, 8 // WORLD)
    assert dict(c.counts) == {"all_to_all": 1} and c.bytes["all_to_all"] == x.numel() * x.element_size()
    (r,) = c.records
    assert (r.op, r.shape, r.group_size) == ("_dtensor.shard_dim_alltoall", (4, 8), WORLD)
    # the op copies each chunk contiguous itself: a transposed input is what DTensor may pass, and runs
    with c:
        torch.ops._dtensor.shard_dim_alltoall(torch.randn(8, 4).t(), 0, 1, group_name)
    assert c.counts["all_to_all"] == 2
    # the rules other collectives get: a CPU tensor beside a GPU model is refused before it runs
    with (
        CommCounter(device="cuda") as c,
        pytest.raises(NcclRuleError, match="shard_dim_alltoall: a cpu tensor"),
    ):
        torch.ops._dtensor.shard_dim_alltoall(x, 0, 1, group_name)
    assert c.records == []


@pytest.mark.skipif(
    not hasattr(torch.ops._c10d_functional, "batch_p2p_ops"),
    reason="this torch (2.11) has no functional batch_p2p_ops",
)
def test_batch_p2p_ops_counts_its_sends_and_receives_by_op_list(group_name):
    sends = [torch.ones(8), torch.ones(3, 2, dtype=torch.bfloat16)]
    recv = torch.empty(5, dtype=torch.float64)
    with CommCounter() as c:
        # mixed dtypes: NCCL groups separate sends and receives, each of its own dtype
        _batch(["isend", "irecv", "isend"], [sends[0], recv, sends[1]], group_name)
    assert dict(c.counts) == {"send": 1, "recv": 1}
    assert c.bytes["send"] == 8 * 4 + 6 * 2 and c.bytes["recv"] == 5 * 8
    assert [(r.kind, r.shapes, r.group_size) for r in c.records] == [
        ("send", ((8,), (3, 2)), WORLD),
        ("recv", ((5,),), WORLD),
    ]
    with CommCounter(), pytest.raises(NcclRuleError, match="batch_p2p_ops: a non-contiguous input"):
        _batch(["isend"], [torch.ones(4, 6).t()], group_name)


def test_a_coalesced_functional_all_gather_counts_each_gathered_output(group_name):
    pieces = [torch.ones(3, 2), torch.ones(5)]  # one dtype a call, as NCCL asks (the counter refuses two)
    with CommCounter() as c:
        outs = funcol.all_gather_into_tensor_coalesced(pieces, dist.group.WORLD)
        outs = [funcol.wait_tensor(t) for t in outs]
    # all_gather's size is its full output: each input's dim 0 gathered from the group's ranks, once a rank
    assert [tuple(t.shape) for t in outs] == [(3 * WORLD, 2), (5 * WORLD,)]
    (r,) = c.records
    assert (r.kind, r.shapes, r.group_size) == ("all_gather", tuple(tuple(t.shape) for t in outs), WORLD)
    assert c.bytes["all_gather"] == WORLD * (3 * 2 + 5) * 4

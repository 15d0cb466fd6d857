"""``CommCounter`` on real gloo process groups: every path that issues a collective is counted once,
sized as the un-sharded payload on one rank. Expected sizes come from the shapes built in each test."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from boost.runtime.comm_counter import CommCounter, NcclRuleError
from tests.distributed import run_distributed

F32 = torch.float32.itemsize


def _nbytes(shape, dtype=torch.float32) -> int:
    return torch.Size(shape).numel() * dtype.itemsize


def _c10d_body(rank: int, ws: int) -> None:
    x = torch.randn(3, 5)
    full = (ws * x.shape[0], *x.shape[1:])  # the gathered / scattered tensor
    with CommCounter() as c:
        dist.all_reduce(x)
    assert dict(c.counts) == {"all_reduce": 1} and c.bytes["all_reduce"] == _nbytes(x.shape)
    (r,) = c.records
    assert (r.shape, r.dtype, r.group_size, r.backward, r.op) == (
        (3, 5),
        torch.float32,
        ws,
        False,
        "c10d.allreduce_",
    )
    assert c.summary() == f"all_reduce 1× {_nbytes(x.shape)} B"

    c.reset()
    with c:
        dist.all_reduce(torch.ones(3, 5, dtype=torch.float64))
        dist.all_gather_into_tensor(torch.empty(full), x)
        dist.all_gather([torch.empty_like(x) for _ in range(ws)], x)  # list form: one tensor of `full`
        dist.reduce_scatter_tensor(torch.empty_like(x), torch.randn(full))
        dist.all_to_all_single(torch.empty(full), torch.randn(full))
        dist.broadcast(x, src=0)
    assert dict(c.counts) == {
        "all_reduce": 1,
        "all_gather": 2,
        "reduce_scatter": 1,
        "all_to_all": 1,
        "broadcast": 1,
    }
    assert c.bytes["all_reduce"] == _nbytes(x.shape, torch.float64)
    assert c.bytes["all_gather"] == 2 * _nbytes(full) and c.elements["all_gather"] == 2 * ws * x.numel()
    # gloo runs the reduce-scatter as all-reduce + chunk inside the op: still one reduce_scatter
    assert c.bytes["reduce_scatter"] == c.bytes["all_to_all"] == _nbytes(full)
    assert c.bytes["broadcast"] == _nbytes(x.shape)
    assert [r.shape for r in c.records] == [x.shape, full, full, full, full, x.shape]
    assert c.total_count() == 6 and c.total_bytes() == sum(r.bytes for r in c.records)
    assert len(c.summary().split(", ")) == 5

    # Functional collectives: the op counts, its wait_tensor does not; a coalesced op counts once.
    c.reset()
    group = dist.group.WORLD
    with c:
        funcol.all_reduce(x, "sum", group).wait()
        pair = [torch.ones(2), torch.ones(3, 4)]
        for out in funcol.all_reduce_coalesced(pair, "sum", group):
            out.wait()
        funcol.all_to_all_single(torch.randn(full), None, None, group).wait()
        # the autograd variant: its _c10d_functional_autograd op is not seen, only the
        # all_to_all_single it issues in forward and in backward
        leaf = torch.randn(full, requires_grad=True)
        funcol.all_to_all_single_autograd(leaf, None, None, group).sum().backward()
    assert dict(c.counts) == {"all_reduce": 2, "all_to_all": 3}
    assert c.elements["all_reduce"] == x.numel() + sum(t.numel() for t in pair)
    assert c.records[1].shapes == tuple(t.shape for t in pair)
    assert c.elements["all_to_all"] == 3 * ws * x.numel()
    assert [r.backward for r in c.records if r.kind == "all_to_all"] == [False, False, True]

    # Collectives registered outside those namespaces: DTensor's Shard(i) -> Shard(j) on a GPU mesh, and the
    # functional batch_isend_irecv (sends and receives counted apart, as c10d.send / recv_ are)
    c.reset()
    other, grid = (rank + 1) % ws, (ws * 2, ws * 3)
    sent, received = torch.full((7,), float(rank)), torch.empty(7)
    batch = hasattr(torch.ops._c10d_functional, "batch_p2p_ops")  # not on torch 2.11
    with c:
        out = torch.ops._dtensor.shard_dim_alltoall(torch.randn(grid), 0, 1, group.group_name)
        if batch:
            outs = torch.ops._c10d_functional.batch_p2p_ops(
                ["isend", "irecv"], [other, (rank - 1) % ws], [0, 0], [sent, received], group.group_name
            )
            [funcol.wait_tensor(t) for t in outs]
    assert out.shape == (ws * grid[0], grid[1] // ws)
    assert [(r.kind, r.shapes, r.group_size) for r in c.records] == [
        ("all_to_all", (grid,), ws),
        *([("send", ((7,),), ws), ("recv", ((7,),), ws)] if batch else []),
    ]
    assert not batch or received.eq((rank - 1) % ws).all()


class _AllGatherForward(torch.autograd.Function):
    """fwd all-gather of the dim-0 shards, bwd reduce-scatter of the full gradient (a conjugate pair)."""

    @staticmethod
    def forward(ctx, x):
        out = x.new_empty(dist.get_world_size() * x.shape[0], *x.shape[1:])
        dist.all_gather_into_tensor(out, x.contiguous())
        return out

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_empty(grad.shape[0] // dist.get_world_size(), *grad.shape[1:])
        dist.reduce_scatter_tensor(out, grad.contiguous())
        return out


class _AllReduceBoth(torch.autograd.Function):
    """All-reduce in forward and in backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def _autograd_and_scope_body(rank: int, ws: int) -> None:
    x = torch.randn(3, 5, requires_grad=True)
    counter = CommCounter()
    dist.all_reduce(torch.ones(4))  # before the `with`: not counted
    with counter:
        _AllReduceBoth.apply(x).sum().backward()
    dist.all_reduce(torch.ones(4))  # after it: not counted
    assert dict(counter.counts) == {"all_reduce": 2} and counter.bytes["all_reduce"] == 2 * _nbytes(x.shape)
    assert [r.backward for r in counter.records] == [False, True]
    assert counter.direction(backward=True) == {"all_reduce": (1, x.numel())}

    counter.reset()
    assert counter.total_count() == counter.total_bytes() == 0 and counter.records == []
    assert counter.summary() == "none"
    with counter:
        _AllGatherForward.apply(x).pow(2).sum().backward()
    full = (ws * x.shape[0], *x.shape[1:])
    assert [(r.kind, r.shape, r.backward) for r in counter.records] == [
        ("all_gather", full, False),
        ("reduce_scatter", full, True),
    ]

    # Counts accumulate across `with` blocks until reset; nested counters each see every collective.
    with counter, CommCounter() as inner:
        dist.all_reduce(torch.ones(4))
    assert counter.total_count() == 3 and inner.total_count() == 1


def _dtensor_body(rank: int, ws: int) -> None:
    mesh = init_device_mesh("cpu", (ws,))
    shape = (4, 6)  # divisible by ws ∈ {2, 4}: gloo aborts on uneven shards
    g = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with CommCounter() as c:
        sharded = distribute_tensor(g, mesh, [Shard(0)])  # scattered from rank 0
        distribute_tensor(g, mesh, [Replicate()])  # broadcast from rank 0
    assert (
        dict(c.counts) == {"scatter": 1, "broadcast": 1} and c.records[0].shape == c.records[1].shape == shape
    )

    c.reset()
    with c:
        out = sharded.redistribute(mesh, [Replicate()])
    torch.testing.assert_close(out.to_local(), g)  # all-gather of the same values: exact
    assert dict(c.counts) == {"all_gather": 1} and c.bytes["all_gather"] == _nbytes(shape)
    assert c.records[0].shape == shape and c.records[0].group_size == ws

    partial = DTensor.from_local(torch.randn(shape), mesh, [Partial()])
    c.reset()
    with c:
        partial.redistribute(mesh, [Replicate()])
    assert dict(c.counts) == {"all_reduce": 1} and c.bytes["all_reduce"] == _nbytes(shape)

    c.reset()
    with c:
        partial.redistribute(mesh, [Shard(0)])
    assert dict(c.counts) == {"reduce_scatter": 1} and c.records[0].shape == shape

    # DTensor on a CPU mesh turns Shard(0) -> Shard(1) (an all-to-all) into all-gather + chunk
    c.reset()
    with c:
        sharded.redistribute(mesh, [Shard(1)])
    assert dict(c.counts) == {"all_gather": 1} and c.bytes["all_gather"] == _nbytes(shape)

    # Collectives DTensor issues inside an op's dispatch: row-parallel mm leaves a Partial (no
    # collective), tanh cannot act on a Partial and all-reduces the (4, 8) output first.
    a = distribute_tensor(g, mesh, [Shard(1)])
    w = distribute_tensor(torch.randn(6, 8), mesh, [Shard(0)])
    c.reset()
    with c:
        h = a @ w
        assert c.total_count() == 0 and h.placements == (Partial(),)
        torch.tanh(h)
    assert dict(c.counts) == {"all_reduce": 1} and c.records[0].shape == (shape[0], 8)

    # In backward: the sequence-parallel pair, all-gather forward / reduce-scatter of the grad.
    leaf = distribute_tensor(g, mesh, [Shard(0)]).requires_grad_()
    c.reset()
    with c:
        rep = leaf.redistribute(mesh, [Replicate()])
        rep.to_local(grad_placements=[Partial()]).sum().backward()
    assert [(r.kind, r.shape, r.backward) for r in c.records] == [
        ("all_gather", shape, False),
        ("reduce_scatter", shape, True),
    ]


def _fsdp_body(rank: int, ws: int) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 4))
    # dim 0 of every parameter divisible by ws: FSDP's flat buffers carry no padding
    child = sum(p.numel() for p in model[0].parameters())
    root = sum(p.numel() for p in model[2].parameters())
    fully_shard(model[0])  # reshards after forward: all-gathered again in backward
    fully_shard(model, reshard_after_forward=False)
    # fp32 without a divide factor reduce-scatters with ReduceOp.AVG, which gloo accepts. A
    # set_gradient_divide_factor(f != ws) would pick PREMUL_SUM, which gloo refuses, unless
    # set_force_sum_reduction_for_comms(True) (SUM, then divide): the same collectives either way.
    with CommCounter() as c:
        model(torch.randn(3, 8)).pow(2).sum().backward()
    forward, backward = c.direction(backward=False), c.direction(backward=True)
    assert forward == {"all_gather": (2, root + child)}
    assert backward == {"all_gather": (1, child), "reduce_scatter": (2, root + child)}
    assert c.bytes["reduce_scatter"] == F32 * (root + child)
    assert sorted(r.shape for r in c.records if r.kind == "reduce_scatter") == sorted([(root,), (child,)])
    assert {r.op for r in c.records} == {"c10d._allgather_base_", "c10d._reduce_scatter_base_"}
    assert {r.group_size for r in c.records} == {ws}


def _subgroups_body(rank: int, ws: int) -> None:
    mesh = init_device_mesh("cpu", (2, ws // 2), mesh_dim_names=("dp", "tp"))
    shape = (4, 6)
    g = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    d = distribute_tensor(g, mesh, [Shard(0), Shard(1)])
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates every group
    with CommCounter() as c:
        dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.ones(2), group=pairs[rank // 2])
        d.redistribute(mesh, [Shard(0), Replicate()])  # gathers over tp only
    assert [(r.kind, r.group_size) for r in c.records] == [
        ("all_reduce", ws),
        ("all_reduce", 2),
        ("all_gather", 2),
    ]
    # this dp row's full tensor, gathered over tp: half of g; a Shard(1) gather runs on dim 0 then
    # rearranges, so the gathered buffer has g's elements, not g's row shape
    assert c.records[2].elements == g.numel() // 2 and c.records[2].bytes == _nbytes(shape) // 2


def _nccl_rules_body(rank: int, ws: int) -> None:
    group = dist.group.WORLD
    h, s = torch.ones(4, 8, dtype=torch.bfloat16), torch.ones(4, 1)
    # negative control: the online norm's former CUDA call, [latent bf16, statistic fp32] coalesced,
    # which ProcessGroupNCCL refuses ("Tensors must have identical type"): refused here, on gloo,
    # before it reaches the backend (no record, both ranks alike)
    with CommCounter() as c, pytest.raises(NcclRuleError, match="one dtype per call.*bfloat16, float32"):
        funcol.all_reduce_coalesced([h, s], "sum", group)
    assert c.records == []
    with CommCounter(), pytest.raises(NcclRuleError, match="non-contiguous"):
        dist.all_reduce(torch.ones(4, 6).t())
    # a CPU tensor in a collective beside a model on the GPU (NCCL takes device tensors only)
    with (
        CommCounter(device="cuda"),
        pytest.raises(NcclRuleError, match="a cpu tensor where the model lives on cuda"),
    ):
        dist.all_reduce(torch.ones(3))
    # what NCCL accepts passes: one dtype (the online norm's [H | M] in bf16), contiguous, one device
    with CommCounter(device="cpu") as c:
        funcol.wait_tensor(funcol.all_reduce(torch.cat([h, s.bfloat16()], -1), "sum", group))
        [funcol.wait_tensor(t) for t in funcol.all_reduce_coalesced([h, h], "sum", group)]
    assert c.total_count() == 2 and c.host_syncs == 0
    with c:
        torch.ones(2).sum().item()
        bool(torch.ones(()) > 0)
    assert c.host_syncs == 2


@pytest.mark.slow
def test_nccl_rules_hold_on_gloo_with_a_negative_control():
    run_distributed(_nccl_rules_body, 2)


@pytest.mark.slow
def test_plain_c10d_and_functional_collectives():
    run_distributed(_c10d_body, 2)


@pytest.mark.slow
def test_autograd_function_forward_backward_and_scope():
    run_distributed(_autograd_and_scope_body, 2)


@pytest.mark.slow
def test_dtensor_redistributes():
    run_distributed(_dtensor_body, 2)


@pytest.mark.slow
def test_fsdp2_all_gather_and_reduce_scatter():
    run_distributed(_fsdp_body, 2)


@pytest.mark.slow
def test_subgroup_sizes_world_size_4():
    run_distributed(_subgroups_body, 4)


def test_summary_is_one_line_in_readable_units():
    counter = CommCounter()
    counter.counts.update(all_reduce=16, reduce_scatter=1, all_gather=0)
    counter.bytes.update(all_reduce=7 * 2**18, reduce_scatter=3 * 2**30)  # 1.75 MiB, 3 GiB
    assert counter.summary() == "all_reduce 16× 1.75 MiB, reduce_scatter 1× 3.00 GiB"

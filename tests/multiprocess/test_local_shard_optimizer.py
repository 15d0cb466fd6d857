"""Adam(W) stepping on local shards (``torchtitan_ext.torch_private.step_on_local_shards``) against torch's own
DTensor path: the same parameters and moments, bit for bit, over a few steps, for each implementation
torchtitan offers (fused, foreach, for-loop), on a 2-D mesh (FSDP × TP placements); a step whose
gradients hold a ``Partial`` placement left to DTensor's path; a gradient laid out other than its parameter."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from tests.distributed import run_distributed
from torchtitan_ext.torch_private import step_on_local_shards

LAYOUTS = [  # (placements on a (2, 2) mesh, global shape)
    ((Shard(0), Shard(1)), (6, 8)),
    ((Shard(0), Replicate()), (4, 3)),
    ((Replicate(), Shard(0)), (8,)),
    ((Replicate(), Replicate()), (5,)),
]


def _params(mesh) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    return [
        torch.nn.Parameter(distribute_tensor(torch.randn(shape, generator=g), mesh, list(placements)))
        for placements, shape in LAYOUTS
    ]


def _grads(params, step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    for p in params:
        full = torch.randn(p.shape, generator=g)
        p.grad = distribute_tensor(full, p.device_mesh, list(p.placements))


def _body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("fsdp", "tp"))
    for implementation in ("fused", "foreach", "for-loop"):
        flags = {"fused": implementation == "fused", "foreach": implementation == "foreach"}
        theirs, ours = _params(mesh), _params(mesh)
        torch_adam = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.1, **flags)
        local_adam = torch.optim.AdamW(ours, lr=1e-2, weight_decay=0.1, **flags)
        step_on_local_shards(local_adam)
        assert type(local_adam).__name__ == "LocalShardAdamW" and isinstance(local_adam, torch.optim.AdamW)
        for step in range(3):
            _grads(theirs, step)
            _grads(ours, step)
            torch_adam.step()
            local_adam.step()
        for a, b in zip(theirs, ours):
            assert isinstance(b, DTensor) and b.placements == a.placements
            assert torch.equal(a.to_local(), b.to_local()), implementation
            for key in ("exp_avg", "exp_avg_sq"):
                sa, sb = torch_adam.state[a][key], local_adam.state[b][key]
                assert isinstance(sb, DTensor) and torch.equal(sa.to_local(), sb.to_local()), (
                    implementation,
                    key,
                )

    # a Partial gradient (a sum still owed across ranks) is not elementwise-local: DTensor's path runs it
    one = torch.nn.Parameter(distribute_tensor(torch.ones(4), mesh, [Replicate(), Replicate()]))
    local_adam = torch.optim.AdamW([one], lr=1e-2)
    step_on_local_shards(local_adam)
    # signs that differ from their sum's on some ranks: Adam's first step is the gradient's sign, so the
    # local values would move those ranks' copy the other way
    local = torch.full((4,), rank - 1.5)
    one.grad = DTensor.from_local(local, mesh, [Partial(), Replicate()], run_check=False)
    reference = torch.nn.Parameter(distribute_tensor(torch.ones(4), mesh, [Replicate(), Replicate()]))
    reference.grad = one.grad.redistribute(mesh, [Replicate(), Replicate()])
    torch_adam = torch.optim.AdamW([reference], lr=1e-2)
    local_adam.step()
    torch_adam.step()
    torch.testing.assert_close(one.full_tensor(), reference.full_tensor(), rtol=0, atol=0)

    # a gradient laid out other than its parameter (a vocabulary-sharded embedding's comes back Replicate):
    # brought to the parameter's layout, as DTensor's in-place update does, for every implementation
    for implementation in ("fused", "foreach", "for-loop"):
        flags = {"fused": implementation == "fused", "foreach": implementation == "foreach"}
        placements = [Replicate(), Shard(0)]
        theirs, ours = (
            [torch.nn.Parameter(distribute_tensor(torch.arange(24.0).view(8, 3), mesh, placements))]
            for _ in range(2)
        )
        torch_adam = torch.optim.AdamW(theirs, lr=1e-2, **flags)
        local_adam = torch.optim.AdamW(ours, lr=1e-2, **flags)
        step_on_local_shards(local_adam)
        for step in range(2):
            full = torch.randn(8, 3, generator=torch.Generator().manual_seed(step))
            for p in (*theirs, *ours):
                p.grad = distribute_tensor(full, mesh, [Replicate(), Replicate()])
            torch_adam.step()
            local_adam.step()
        assert ours[0].placements == tuple(placements)
        assert torch.equal(theirs[0].to_local(), ours[0].to_local()), implementation


@pytest.mark.slow
def test_adamw_on_local_shards_equals_torchs_dtensor_path():
    run_distributed(_body, 4)

"""The gradient norm and its clipping on local shards (``boost.training.parallel.grad_norm``) against what
torchtitan's ``clip_grad_norm_`` does with the same DTensor gradients (torch's ``get_total_norm``, its
``full_tensor()``, torch's ``clip_grads_with_norm_``) and against the norm of the whole gradients."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from boost.training.parallel.grad_norm import clip_grads_with_norm_, local_grad_norm_applies, total_grad_norm
from tests.distributed import run_distributed

# (placements on a (2, 2) mesh, global shape): sharded on both dims, on one, on neither
LAYOUTS = [
    ((Shard(0), Shard(1)), (6, 8)),
    ((Shard(0), Replicate()), (4, 3)),
    ((Replicate(), Shard(0)), (8,)),
    ((Replicate(), Replicate()), (5,)),
    ((Shard(1), Shard(0)), (4, 2, 6)),
]


def _body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("fsdp", "tp"))
    g = torch.Generator().manual_seed(0)
    full = [torch.randn(shape, dtype=torch.float64, generator=g) for _, shape in LAYOUTS]
    dense_norm = torch.linalg.vector_norm(torch.cat([t.flatten() for t in full]))
    for max_norm in (1e9, 0.5):  # no clipping; clipping
        # clones: a Replicate DTensor may hold the very tensor it was made of, and clipping is in place
        ours = [distribute_tensor(t.clone(), mesh, list(p)) for t, (p, _) in zip(full, LAYOUTS)]
        theirs = [distribute_tensor(t.clone(), mesh, list(p)) for t, (p, _) in zip(full, LAYOUTS)]
        assert local_grad_norm_applies(ours, 2.0)
        total = total_grad_norm(ours)
        # sums of squares in another order than torch's: close, not exact
        torch.testing.assert_close(total.double(), dense_norm, rtol=1e-6, atol=0)
        clip_grads_with_norm_(ours, max_norm, total)
        params = [torch.nn.Parameter(t.clone()) for t in theirs]
        for p, t in zip(params, theirs):
            p.grad = t
        reference = torch.nn.utils.get_total_norm(theirs, 2.0, False, True).full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, reference, foreach=True)
        torch.testing.assert_close(total.double(), reference, rtol=1e-6, atol=0)
        for a, b in zip(ours, theirs):
            assert a.placements == b.placements
            torch.testing.assert_close(a.full_tensor(), b.full_tensor(), rtol=1e-6, atol=0)
        if max_norm < 1:
            clipped = torch.linalg.vector_norm(torch.cat([a.full_tensor().flatten() for a in ours]))
            torch.testing.assert_close(
                clipped, torch.tensor(max_norm, dtype=torch.float64), rtol=1e-5, atol=0
            )
    # Only the 2-norm is taken here, and no Partial gradient: its local shards are addends of the
    # gradient, not pieces of it, so their squares do not sum to its norm. Each case alone: the 2-norm
    # with one Partial among sharded gradients (what the trainer asks every step), another norm without.
    sharded = [distribute_tensor(t.clone(), mesh, list(p)) for t, (p, _) in zip(full, LAYOUTS)]
    for placements in ((Partial(), Shard(1)), (Replicate(), Partial())):
        partial = DTensor.from_local(full[0] / 2, mesh, list(placements), run_check=False)
        assert not local_grad_norm_applies([*sharded, partial], 2.0), placements
        assert total_grad_norm([partial]).double() != torch.linalg.vector_norm(partial.full_tensor())
    assert local_grad_norm_applies(sharded, 2.0)
    assert not local_grad_norm_applies(sharded, float("inf"))


@pytest.mark.slow
def test_local_shard_norm_matches_torch_and_the_whole_gradient():
    run_distributed(_body, 4)

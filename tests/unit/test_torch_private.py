"""What torch_private bridges across the supported torch range, on the torch this suite runs (the
compatibility tier runs it on each end): a dry run's fake process group gives every reduce-scatter a
defined output, this rank's chunk of its input, and every all-gather this rank's input repeated, as torch
≥ 2.13's fake backend does."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from boost.training.parallel.activation_checkpoint import keep_collective_outputs
from torchtitan_ext.torch_private import fake_filled_functional, fill_fake_collective_outputs

# the functional ones where the torch's fake backend does not fill them itself (2.11: the compatibility tier)
WRAPPED = (
    (dist, "reduce_scatter_tensor"),
    (dist, "reduce_scatter"),
    *((funcol, name) for name in fake_filled_functional()),
)


@contextlib.contextmanager
def fake_world(rank: int):
    """Rank ``rank`` of 4 on the fake process group, its collectives filled; after, torch as it was."""
    originals = [getattr(module, name) for module, name in WRAPPED]
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=4)
    try:
        fill_fake_collective_outputs()
        yield originals
    finally:
        dist.destroy_process_group()
        for (module, name), original in zip(WRAPPED, originals, strict=True):
            setattr(module, name, original)
        torch._dynamo.reset()


def test_fake_reduce_scatters_fill_their_outputs_with_this_ranks_chunk():
    with fake_world(rank=2) as originals:
        fill_fake_collective_outputs()  # idempotent: wrapped once
        assert [getattr(m, n).__wrapped__ for m, n in WRAPPED] == originals
        x = torch.arange(4 * 6, dtype=torch.float32).reshape(4, 6)
        out = torch.full((6,), float("nan"))
        dist.reduce_scatter_tensor(out, x.flatten())
        assert torch.equal(out, x[2])
        out = torch.full((6,), float("nan"))
        dist.reduce_scatter(out, list(x))
        assert torch.equal(out, x[2])
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))  # rank 2: tp rank 0
        y = torch.arange(3 * 4, dtype=torch.float32).reshape(3, 4)
        got = funcol.wait_tensor(funcol.reduce_scatter_tensor(y, "sum", 1, (mesh, 1)))
        assert torch.equal(got, y[:, :2])
        # btp's sequence parallelism: its rows reduce-scattered and gathered (boost.training.parallel.collectives)
        from boost.training.parallel.collectives import all_gather_rows, reduce_scatter_rows

        assert torch.equal(reduce_scatter_rows(y[:2], (mesh, 1)), y[:1])
        assert torch.equal(all_gather_rows(y, (mesh, 1)), torch.cat([y, y]))


def test_the_fills_trace_into_a_compiled_block():
    """btp's sequence parallelism gathers and reduce-scatters each latent's rows inside the compiled
    blocks, which torchtitan compiles whole (``fullgraph``). On torch 2.11 the fills' process-group lookup,
    a pybind function dynamo cannot trace, refused the 7B@16 sequence-parallel dry runs on the H100
    (2026-11-27); compiled, the fills give what they give eagerly, this rank's chunk (tp rank 1 here)."""
    from boost.training.parallel.collectives import all_gather_rows, group_name, reduce_scatter_rows

    with fake_world(rank=3):
        tp = group_name(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))["tp"])

        def rows(y):
            return reduce_scatter_rows(y, tp), all_gather_rows(y, tp)

        y = torch.arange(4 * 3, dtype=torch.float32).reshape(4, 3)
        eager = rows(y)
        compiled = torch.compile(rows, backend="aot_eager", fullgraph=True)(y)
        assert torch.equal(eager[0], y[2:]) and torch.equal(eager[1], torch.cat([y, y]))
        for got, want in zip(compiled, eager, strict=True):
            assert torch.equal(got, want)
        # low-rank AC keeps the collectives' outputs and recomputes the rest in backward; its cache refuses
        # a kept tensor written after it was stored (the fill once was, on torch 2.11)
        kept = create_selective_checkpoint_contexts(keep_collective_outputs)
        x = y.clone().requires_grad_()
        loss = checkpoint(
            lambda x: (rows(x * 2)[0] ** 2).sum(), x, use_reentrant=False, context_fn=lambda: kept
        )
        loss.backward()
        assert torch.isfinite(x.grad).all()

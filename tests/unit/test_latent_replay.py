"""Low-rank AC's record and replay of forward collective results (``boost.training.parallel.latent_replay``),
in one process: the lists themselves, and a backward collective beside them (on the fake process group)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.testing._internal.distributed.fake_pg import FakeStore

from boost.training.parallel.latent_replay import record_and_replay_collectives, replayed_or_recorded
from boost.training.parallel.norms import SyncRMSNorm


def _not_run() -> torch.Tensor:
    raise AssertionError("a replay ran the collective")


def test_each_recompute_replays_every_recorded_result_from_the_first():
    # a zero-bubble schedule's split backward recomputes a checkpointed block twice (input-, then weight-
    # gradient pass), entering the same replay context each time
    record, replay = record_and_replay_collectives()
    kept = [torch.arange(3.0), torch.ones(2)]
    with record:
        got = [replayed_or_recorded(lambda t=t: t) for t in kept]
    assert all(a is b for a, b in zip(got, kept, strict=True))  # the forward gets its own result back
    for _ in range(2):
        with replay:
            replayed = [replayed_or_recorded(_not_run) for _ in kept]
        assert all(torch.equal(a, b) for a, b in zip(replayed, kept, strict=True))
    # outside the contexts nothing is recorded or replayed
    assert torch.equal(replayed_or_recorded(lambda: torch.zeros(1)), torch.zeros(1))


def test_a_backward_collective_never_reads_the_replay_list():
    # SyncRMSNorm's backward all-reduce (Σ dy·γ·x) is no forward result: were a replay context open while it
    # runs, it must still communicate, not take a recorded forward result. One rank of the fake process group:
    # its all-reduce is the identity, so the norm is the dense one.
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    try:
        gen = torch.Generator().manual_seed(0)
        x, gamma, dy = (
            torch.randn(4, 8, generator=gen),
            torch.randn(8, generator=gen),
            torch.randn(4, 8, generator=gen),
        )
        x_ref, gamma_ref = x.clone().requires_grad_(), gamma.clone().requires_grad_()
        F.rms_norm(x_ref, (8,), gamma_ref, 1e-5).backward(dy)
        x.requires_grad_(), gamma.requires_grad_()
        y = SyncRMSNorm.apply(x, gamma, 1e-5, 8, dist.group.WORLD.group_name)
        record, replay = record_and_replay_collectives()
        with record:
            replayed_or_recorded(lambda: torch.full((4, 1), 1e3))  # some block's kept forward result
        with replay:
            y.backward(dy)
            assert replayed_or_recorded(_not_run).eq(1e3).all()  # still there for the recompute
        torch.testing.assert_close(x.grad, x_ref.grad)
        torch.testing.assert_close(gamma.grad, gamma_ref.grad)
    finally:
        dist.destroy_process_group()

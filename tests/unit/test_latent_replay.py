"""Low-rank AC's record and replay of forward collective results (``boost.training.parallel.latent_replay``),
in one process: the lists themselves, without a collective."""

from __future__ import annotations

import torch

from boost.training.parallel.latent_replay import record_and_replay_collectives, replayed_or_recorded


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

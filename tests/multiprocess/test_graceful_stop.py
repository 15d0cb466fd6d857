"""``GracefulStop.agreed``: a stop signal that reached one rank alone stops every rank, at the same boundary
(the end-to-end stops in tests/end_to_end/test_lifecycle.py signal every process, as Slurm does; a rank
signalled alone, as a node's OOM handler or a user's ``kill`` does, must not leave the others running on)."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from tests.distributed import run_distributed
from torchtitan_ext.guards.graceful_stop import GracefulStop


def _one_rank_signalled(rank: int, world_size: int) -> None:
    stop = GracefulStop(grace_s=600, check_every=2, device=torch.device("cpu"))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGTERM)  # this rank's handler takes it: a request, not an exit
    try:
        assert not stop.agreed(3), rank  # no agreement between multiples of check_every
        assert stop.agreed(4), rank  # the boundary after it: every rank, signalled or not
    finally:
        stop.done()


@pytest.mark.slow
def test_a_stop_signal_to_one_rank_stops_every_rank_at_the_next_agreed_boundary():
    run_distributed(_one_rank_signalled, 2)

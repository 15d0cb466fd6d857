"""A rendezvous for tests that signal a run: each rank waits at a step boundary until the test lets go.

A test that signals a training run must know where the signal lands. ``HOLD_ENV`` (``STEP:PATH``)
holds every rank at the boundary after step ``STEP`` (its checkpoint saved, before the ranks agree on
a stop): rank ``r`` opens the FIFO ``PATH.r`` for reading, which returns once the test has opened it
for writing, and reads to its end, which comes when the test closes it. A test that has opened every
rank's FIFO knows each rank's step and that none can move on; a signal it sends then lands there,
and the run goes on when it closes them. Unset (every real run), nothing is held.
"""

from __future__ import annotations

import os

HOLD_ENV = "BOOST_TRAIN_HOLD"


def hold_fifo(rank: int, step: int) -> str | None:
    """The FIFO rank ``rank`` waits at after ``step``, if ``HOLD_ENV`` asks for one there."""
    held = os.environ.get(HOLD_ENV)
    if not held:
        return None
    at, path = held.split(":", 1)
    return f"{path}.{rank}" if int(at) == step else None


def hold_at_step(step: int) -> None:
    """Wait at this rank's FIFO after ``step`` (``hold_fifo``) until the test closes it."""
    fifo = hold_fifo(int(os.environ.get("RANK", "0")), step)
    if fifo is not None:
        with open(fifo, "rb") as held:
            held.read()  # a signal meanwhile runs its handler and the read goes on (PEP 475)

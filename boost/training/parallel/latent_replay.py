"""Record and replay of the forward collectives' results: low-rank activation checkpointing in eager mode.

While a checkpointed block runs its forward, every forward all-reduce of ``boost.training.parallel.collectives``
appends its result to this thread's *record* list; when the block is recomputed in backward, the same
list is this thread's *replay* list and each collective takes its result from it, in order, instead
of communicating. ``torch.utils.checkpoint`` enters the pair from ``record_and_replay_collectives``
around the forward and the recompute (its ``context_fn``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

_latents = threading.local()


def next_replayed():
    """Under low-rank AC's recompute, the next recorded collective result (consumed); else ``None``."""
    replay = getattr(_latents, "replay", None)
    return replay.pop(0) if replay is not None else None


def recorded(result):
    """Keep a forward collective's result for low-rank AC's recompute, when it is recording."""
    record = getattr(_latents, "record", None)
    if record is not None:
        record.append([t.detach() for t in result] if isinstance(result, list) else result.detach())
    return result


def replayed_or_recorded(run: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Under low-rank AC's recompute, the next recorded result, with ``run`` not called (no collective, and
    no GEMM where ``run`` computes its input); else ``run()``'s result, recorded when recording."""
    replayed = next_replayed()
    return replayed if replayed is not None else recorded(run())


class _Using:
    """Make a list this thread's ``record`` or ``replay`` list while entered. Re-enterable: a split backward
    (a zero-bubble pipeline schedule's input- then weight-gradient pass) recomputes a block once in each,
    entering the same recompute context twice; each replay starts from the first recorded result."""

    def __init__(self, role: str, store: list):
        self.role, self.store, self.previous = role, store, []

    def __enter__(self) -> None:
        self.previous.append(getattr(_latents, self.role, None))
        setattr(_latents, self.role, self.store if self.role == "record" else list(self.store))

    def __exit__(self, *exc) -> None:
        setattr(_latents, self.role, self.previous.pop())


def record_and_replay_collectives() -> tuple:
    """Context pair for ``torch.utils.checkpoint``'s ``context_fn``: the forward records every
    forward all-reduce's result, the recompute replays them in order instead of communicating."""
    store: list[torch.Tensor] = []
    return _Using("record", store), _Using("replay", store)

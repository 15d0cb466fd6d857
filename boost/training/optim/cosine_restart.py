"""The LORO authors' ``cosine_restart`` learning-rate schedule, as a ``LambdaLR`` factor.

Their ``run_c4.py --scheduler cosine_restart`` (``peft_pretraining/training_utils.py``,
``get_cosine_schedule_with_multiple_warmups``): a linear warmup from ``min_lr_ratio`` to the cosine's
value, then a cosine decay to ``min_lr_ratio`` over the rest of training, with a short linear re-warmup
(from ``eps`` to the cosine's value at the cycle's start) at the start of every ``restart_every``-step
cycle. ``adjust_steps`` shifts the cycles and the cosine (their ``--lr_adjust_steps``; their recipes use
``-warmup_steps``). Steps are 0-based, as ``LambdaLR`` counts them (and as torchtitan's trainer steps it).

Example: their 60M recipe (10 000 steps, warmup 1 000, cycles of 500, re-warmup 5, min 0.1, shift −1 000)::

    >>> from functools import partial
    >>> f = partial(cosine_restart_factor, total_steps=10_000, warmup_steps=1000, restart_every=500,
    ...             restart_warmup_steps=5, min_lr_ratio=0.1, adjust_steps=-1000)
    >>> [round(f(s), 4) for s in (0, 999, 1000, 1500, 1502, 1505, 9999)]
    [0.1, 0.969, 0.9729, 0.0, 0.3973, 0.9933, 0.1272]
"""

from __future__ import annotations

import math


def cosine_restart_factor(
    step: int,
    *,
    total_steps: int,
    warmup_steps: int,
    restart_every: int,
    restart_warmup_steps: int,
    min_lr_ratio: float,
    adjust_steps: int = 0,
    jag_after_warmup: bool = False,
    eps: float = 1e-6,
) -> float:
    """The learning-rate factor of 0-based ``step``."""
    decay_steps = max(1, total_steps - warmup_steps)

    def cosine(progress: float) -> float:
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def rewarmup(cycle_step: int, target: float) -> float:
        return cycle_step / max(1, restart_warmup_steps) * (target - eps) + eps

    if step < warmup_steps:
        # the warmup climbs to the cosine's value where the (shifted) decay begins
        peak = 0.5 * (1.0 + math.cos(math.pi * -adjust_steps / decay_steps))
        cycle_step, cycle = step % restart_every, step // restart_every
        if cycle_step < restart_warmup_steps and cycle != 0 and not jag_after_warmup:
            target = cycle * restart_every / max(1, warmup_steps) * (peak - min_lr_ratio) + min_lr_ratio
            return rewarmup(cycle_step, target)
        return step / max(1, warmup_steps) * (peak - min_lr_ratio) + min_lr_ratio

    shifted = step + adjust_steps
    cycle_step, cycle = shifted % restart_every, shifted // restart_every
    if cycle_step < restart_warmup_steps and cycle > 0:
        return rewarmup(cycle_step, cosine((cycle * restart_every - warmup_steps) / decay_steps))
    return cosine((shifted - warmup_steps) / decay_steps)

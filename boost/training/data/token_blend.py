"""A weighted blend of prepared token folders: how it is written, and which folder each sample reads.

A blend is written as one string, the form ``training.dataset_path`` takes (torchtitan types it as
a string): ``DIR`` alone, or ``W1:DIR1,W2:DIR2,...`` with positive weights, normalised to sum 1
(Megatron's ``--data-path 0.7 /a 0.3 /b`` in one field). Weights are exact fractions
(``0.7`` is 7/10, ``1/3`` is 1/3), so the schedule below is integer arithmetic, identical on every rank
and machine.

The schedule gives source ``j`` ``c_j(P)`` of the first ``P`` samples of the global order, in closed
form: ``c_0(P) = round(q_0·P)`` with ``q_0 = w_0``, the rest of ``P`` shared the same way among the
sources after it (``q_j = w_j / (w_j + ... + w_last)``), the last taking what remains. Each ``c_j`` is
non-decreasing and steps by at most one (``q_j <= 1``), so every sample belongs to exactly one source,
and ``|c_j(P) - w_j·P| <= k/2`` for ``k`` sources: every prefix of the order holds each source's share
to within a few samples, as Megatron's greedy blend index does, but computed per position rather than
stored (Megatron builds and caches an index of every sample of the run).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from boost.training.config_error import refuse

BLEND_FORM = '"DIR", or "W1:DIR1,W2:DIR2,..." with positive weights (e.g. "0.7:/data/c4,0.3:/data/code")'


@dataclass(frozen=True)
class BlendPart:
    weight: Fraction
    """Share of the samples, the blend's weights normalised to sum 1."""
    folder: str


def _weight(text: str) -> Fraction | None:
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return None


def parse_blend(spec: str | None, field: str) -> tuple[BlendPart, ...]:
    """The folders of ``spec`` (``DIR`` or ``W1:DIR1,W2:DIR2,...``) and their normalised weights.

    A malformed spec is refused naming ``field``, the spec and the form it must take.

    Example::

        >>> [(str(p.weight), p.folder) for p in parse_blend("0.7:/a, 0.3:/b", "training.dataset_path")]
        [('7/10', '/a'), ('3/10', '/b')]
        >>> parse_blend("/data/c4", "training.dataset_path")[0].weight
        Fraction(1, 1)
    """
    if spec is None or not spec.strip():
        refuse(field, spec, f"names no prepared folder; write {BLEND_FORM}")
    items = [item.strip() for item in spec.split(",")]
    if any(not item for item in items):
        refuse(field, spec, f"has an empty entry (a stray comma); write {BLEND_FORM}")
    parts: list[tuple[Fraction, str]] = []
    for item in items:
        head, colon, tail = item.partition(":")
        weight = _weight(head) if colon else None
        if weight is None:
            if len(items) > 1:
                refuse(
                    field,
                    spec,
                    f"entry {item!r} has no weight: every folder of a blend needs one; write {BLEND_FORM}",
                )
            parts.append((Fraction(1), item))
            continue
        if weight <= 0 or not math.isfinite(weight):
            refuse(field, spec, f"entry {item!r} has weight {head.strip()}: weights must be positive")
        folder = tail.strip()
        if not folder:
            refuse(field, spec, f"entry {item!r} names no folder after its weight; write {BLEND_FORM}")
        parts.append((weight, folder))
    # one folder spelt two ways ("/x", "/x/", "./x") is still read twice, each with its own shuffle
    folders = [os.path.realpath(os.path.expanduser(folder)) for _, folder in parts]
    repeated = sorted({parts[i][1] for i, f in enumerate(folders) if folders.count(f) > 1})
    if repeated:
        refuse(field, spec, f"names {repeated[0]!r} twice: give each folder once, with its whole weight")
    total = sum(w for w, _ in parts)
    return tuple(BlendPart(w / total, folder) for w, folder in parts)


def describe_blend(parts: Sequence[BlendPart]) -> str:
    """``parts`` as the spec they parse from, weights as decimals (``0.7:/a,0.3:/b``); one folder alone."""
    if len(parts) == 1:
        return parts[0].folder
    return ",".join(f"{float(p.weight):.6g}:{p.folder}" for p in parts)


class BlendSchedule:
    """Which source each sample of a blend's global order reads (module docstring: the closed form).

    Example::

        >>> schedule = BlendSchedule([Fraction(3, 4), Fraction(1, 4)])
        >>> [schedule.source_of(p)[0] for p in range(8)]
        [0, 0, 1, 0, 0, 0, 1, 0]
        >>> schedule.counts(8)
        [6, 2]
    """

    def __init__(self, weights: Sequence[Fraction]):
        if not weights or any(w <= 0 for w in weights):
            raise ValueError(f"a blend needs positive weights, got {list(weights)}")
        total = sum(weights)
        self._shares = []  # q_j = w_j / (w_j + ... + w_last) as (numerator, denominator)
        rest = total
        for w in weights:
            q = Fraction(w) / rest
            self._shares.append((q.numerator, q.denominator))
            rest -= w

    def __len__(self) -> int:
        return len(self._shares)

    @staticmethod
    def _take(share: tuple[int, int], remaining: int) -> int:
        num, den = share
        return (2 * num * remaining + den) // (2 * den)  # round(q · remaining), halves up

    def counts(self, position: int) -> list[int]:
        """How many of the first ``position`` samples each source gives (they sum to ``position``)."""
        out, remaining = [], position
        for share in self._shares[:-1]:
            taken = self._take(share, remaining)
            out.append(taken)
            remaining -= taken
        out.append(remaining)
        return out

    def source_of(self, position: int) -> tuple[int, int]:
        """``(source, index)``: sample ``position`` is the ``index``-th sample its source gives."""
        before, after = position, position + 1  # what the sources from j on share, before and with it
        for j, share in enumerate(self._shares[:-1]):
            taken_before, taken_after = self._take(share, before), self._take(share, after)
            if taken_after > taken_before:
                return j, taken_before
            before, after = before - taken_before, after - taken_after
        return len(self._shares) - 1, before

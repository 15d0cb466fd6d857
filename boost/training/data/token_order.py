"""The global order of a run's samples over prepared token folders, and a data-parallel rank's part of it.

A sample is a window of ``seq_len + 1`` tokens of a split's stream, cut as torchtitan's packing cuts
the same stream: window ``w`` is tokens ``[w(s+1), (w+1)(s+1))``, windows do not overlap, and the tail
shorter than a window is not read. A split of ``T`` tokens holds ``N = T // (s+1)`` windows.

The global order is one sequence of samples, position ``P = 0, 1, 2, ...`` (Megatron's
``consumed_samples``). Position ``P`` is the ``m``-th sample of source ``j`` (``BlendSchedule``), in
that source's epoch ``e = m // N_j``, and reads window ``π_{seed,j,e}(m mod N_j)``: a new keyed
permutation (``KeyedPermutation``) for every epoch of every source. Nothing in it depends on the
data-parallel layout, and nothing is stored per sample: a rank holds a few integers per source.

Data-parallel ranks read the order in global micro-batches of ``D·b`` samples; rank ``r`` of ``D``
reads the ``r``-th ``b`` of each (``micro_batch_start``). A step of ``A`` accumulation micro-batches
per rank reads the global batch ``[S + kG, S + (k+1)G)``, ``G = A·D·b``: a fixed range of the order,
whatever ``D``, ``b`` and ``A`` are. After ``k`` steps every rank has consumed ``S + kG`` samples, the
one number a checkpoint keeps, and a resume at another degree or batch size continues from it with
no sample repeated or skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from boost.training.data.keyed_permutation import KeyedPermutation, derive_key
from boost.training.data.token_blend import BlendSchedule
from boost.training.data.token_folder import TokenSplit

if TYPE_CHECKING:  # torch loads with the splits it reads, not with the preflight's checks of an order
    import torch


def micro_batch_start(start: int, index: int, dp_rank: int, dp_degree: int, batch: int) -> int:
    """The global position of the first sample of rank ``dp_rank``'s ``index``-th micro-batch after ``start``.

    Example::

        >>> [micro_batch_start(0, i, r, 2, 3) for i in range(2) for r in range(2)]  # (i, r): 3 samples each
        [0, 3, 6, 9]
    """
    return start + (index * dp_degree + dp_rank) * batch


def unrepeated_length(schedule: BlendSchedule, windows: Sequence[int]) -> int:
    """The longest prefix of a blend's order in which no source gives more samples than its ``windows``.

    Example::

        >>> halves = BlendSchedule([Fraction(1, 2), Fraction(1, 2)])
        >>> unrepeated_length(halves, [10, 4])  # 5 of the first, 4 of the second
        9
    """
    low, high = 0, sum(windows)  # each source's count grows with the prefix: search the last that fits
    while low < high:
        mid = (low + high + 1) // 2
        if all(c <= n for c, n in zip(schedule.counts(mid), windows)):
            low = mid
        else:
            high = mid - 1
    return low


def order_identity(seq_len: int, seed: int, split_tokens: Sequence[int], weights: Sequence[Fraction]) -> dict:
    """What makes two global orders the same, as plain values (a checkpoint keeps it beside the position):
    the window length, the seed, and each source's token count and weight. Folder paths are not in
    it: a prepared folder may move."""
    return {
        "seq_len": seq_len,
        "seed": seed,
        "sources": [{"tokens": t, "weight": str(Fraction(w))} for t, w in zip(split_tokens, weights)],
    }


def order_differences(saved: dict, current: dict) -> list[str]:
    """How the order ``current`` describes differs from ``saved`` (``order_identity`` values), in words.

    Example::

        >>> a = order_identity(64, 0, [1000], [Fraction(1)])
        >>> order_differences(a, order_identity(128, 0, [1000], [Fraction(1)]))
        ['windows of seq_len + 1 = 65 tokens (checkpoint) against 129 (this job)']
    """
    found = []
    if saved["seq_len"] != current["seq_len"]:
        found.append(
            f"windows of seq_len + 1 = {saved['seq_len'] + 1} tokens (checkpoint) against "
            f"{current['seq_len'] + 1} (this job)"
        )
    if saved["seed"] != current["seed"]:
        found.append(f"shuffle seed {saved['seed']} (checkpoint) against {current['seed']} (this job)")
    old, new = saved["sources"], current["sources"]
    if len(old) != len(new):
        found.append(f"{len(old)} prepared folder(s) (checkpoint) against {len(new)} (this job)")
    else:
        for j, (a, b) in enumerate(zip(old, new)):
            if a["tokens"] != b["tokens"]:
                found.append(
                    f"folder {j + 1} holds {a['tokens']} tokens (checkpoint) against {b['tokens']} (this job)"
                )
            if a["weight"] != b["weight"]:
                found.append(
                    f"folder {j + 1} has weight {a['weight']} (checkpoint) against {b['weight']} (this job)"
                )
    return found


class TokenOrder:
    """The global order of windows over one or more token splits, blended and shuffled per epoch.

    Example::

        >>> order = TokenOrder([split], [Fraction(1)], seq_len=64, seed=0)  # doctest: +SKIP
        >>> order.read(0).shape  # the window at global position 0  # doctest: +SKIP
        torch.Size([65])
    """

    def __init__(self, splits: Sequence[TokenSplit], weights: Sequence[Fraction], seq_len: int, seed: int):
        if len(splits) != len(weights):
            raise ValueError(f"{len(splits)} splits for {len(weights)} weights")
        self.splits = list(splits)
        self.weights = [Fraction(w) for w in weights]
        self.seq_len = seq_len
        self.seed = seed
        self.window = seq_len + 1
        self.windows = [len(split) // self.window for split in self.splits]
        if min(self.windows) == 0:
            raise ValueError(
                f"a split holds fewer than seq_len + 1 = {self.window} tokens: no window to read"
            )
        self.schedule = BlendSchedule(self.weights)
        self._permutations: dict[int, tuple[int, KeyedPermutation]] = {}  # source -> (epoch, its permutation)

    def _permutation(self, source: int, epoch: int) -> KeyedPermutation:
        held = self._permutations.get(source)
        if held is None or held[0] != epoch:
            held = (epoch, KeyedPermutation(self.windows[source], derive_key(self.seed, source, epoch)))
            self._permutations[source] = held
        return held[1]

    def sample(self, position: int) -> tuple[int, int]:
        """``(source, window)`` read at global ``position``."""
        source, index = self.schedule.source_of(position)
        epoch, within = divmod(index, self.windows[source])
        return source, self._permutation(source, epoch)(within)

    def read(self, position: int) -> torch.Tensor:
        """The ``seq_len + 1`` token ids (int64) at global ``position``."""
        source, window = self.sample(position)
        return self.splits[source].read(window * self.window, self.window)

    def unrepeated_length(self) -> int:
        """The longest prefix of the order that reads no window twice (validation reads it once)."""
        return unrepeated_length(self.schedule, self.windows)

    def identity(self) -> dict:
        """``order_identity`` of this order."""
        return order_identity(self.seq_len, self.seed, [len(s) for s in self.splits], self.weights)

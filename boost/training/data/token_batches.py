"""A data-parallel rank's micro-batches of a ``TokenOrder``, as an iterable dataset with a checkpointable position.

Each item is one micro-batch in the form torchtitan's trainer and validator read:
``({"input": ids[:, :-1]}, ids[:, 1:])`` with ``ids`` the ``b`` windows (int64, ``[b, seq_len + 1]``)
this rank reads at the global positions ``token_order.micro_batch_start`` gives. Batching happens
here, not in a ``DataLoader``'s collate: the dataset must know ``b`` to know its positions.

Training (``infinite``) reads on from its position forever, through epochs; its state is the global
position (samples of the global order consumed by all ranks together) and the order's identity,
the same numbers on every rank at a step boundary, so a checkpoint keeps them once and a resume at
another data-parallel degree continues the order. Validation (not ``infinite``) reads the order's
unrepeated prefix from its start at every pass, the same windows every time, and stops after the
micro-batches every rank can fill alike (a rank that stopped early would leave the others waiting
in a collective).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset

from boost.training.data.token_order import TokenOrder, micro_batch_start, order_differences

logger = logging.getLogger(__name__)


class TokenBatches(IterableDataset):
    """Rank ``dp_rank`` of ``dp_degree``'s micro-batches of ``batch_size`` windows of ``order``.

    Example::

        >>> batches = TokenBatches(order, dp_rank=0, dp_degree=2, batch_size=4)  # doctest: +SKIP
        >>> inputs, labels = next(iter(batches))  # doctest: +SKIP
        >>> inputs["input"].shape, labels.shape  # doctest: +SKIP
        (torch.Size([4, 2048]), torch.Size([4, 2048]))
    """

    def __init__(
        self,
        order: TokenOrder,
        dp_rank: int,
        dp_degree: int,
        batch_size: int,
        *,
        infinite: bool = True,
        name: str = "tokens",
    ):
        if not 0 <= dp_rank < dp_degree:
            raise ValueError(f"data-parallel rank {dp_rank} of {dp_degree}")
        self.order = order
        self.dp_rank, self.dp_degree, self.batch_size = dp_rank, dp_degree, batch_size
        self.infinite = infinite
        self.name = name
        self.consumed = 0
        """Samples of the global order all ranks have consumed before this rank's next micro-batch."""

    @property
    def global_micro_batch(self) -> int:
        return self.dp_degree * self.batch_size

    def micro_batches_per_pass(self) -> int:
        """How many micro-batches each rank reads in a validation pass (every rank the same)."""
        return self.order.unrepeated_length() // self.global_micro_batch

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        start = self.consumed if self.infinite else 0
        limit = None if self.infinite else self.micro_batches_per_pass()
        index = 0
        while limit is None or index < limit:
            first = micro_batch_start(start, index, self.dp_rank, self.dp_degree, self.batch_size)
            if self.infinite:
                self._log_epoch_starts(start + index * self.global_micro_batch)
            ids = torch.stack([self.order.read(p) for p in range(first, first + self.batch_size)])
            index += 1
            if self.infinite:
                self.consumed = start + index * self.global_micro_batch
            yield {"input": ids[:, :-1].contiguous()}, ids[:, 1:].contiguous()

    def _log_epoch_starts(self, begin: int) -> None:
        """Log each source's epoch that starts inside the global micro-batch at ``begin`` (every rank
        logs it: each reads a part of every global micro-batch)."""
        end = begin + self.global_micro_batch
        schedule, windows = self.order.schedule, self.order.windows
        for source, (first, stop) in enumerate(zip(schedule.counts(begin), schedule.counts(end))):
            epoch = -(-first // windows[source])  # the first epoch starting at or after this source's index
            if epoch == 0 or epoch * windows[source] >= stop:
                continue
            position = next(
                p for p in range(begin, end) if schedule.source_of(p) == (source, epoch * windows[source])
            )
            where = f" ({self.order.splits[source].folder})" if len(windows) > 1 else ""
            logger.info(
                f"{self.name}{where}: epoch {epoch} begins at sample {position} of the global order, reshuffled"
            )

    def state_dict(self) -> dict:
        """The global position and the order's identity: equal on every rank at a step boundary."""
        return {"consumed_samples": self.consumed, **self.order.identity()}

    def load_state_dict(self, state: dict) -> None:
        """Continue at the saved global position; refuse (``ValueError``) a position in another order."""
        saved = {k: v for k, v in state.items() if k != "consumed_samples"}
        differences = order_differences(saved, self.order.identity())
        if differences:
            raise ValueError(
                f"{self.name}: the checkpoint's data position is in another order ({'; '.join(differences)})"
            )
        self.consumed = state["consumed_samples"]

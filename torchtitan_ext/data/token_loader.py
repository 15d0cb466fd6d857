"""The ``tokens`` dataset in torchtitan's trainer and validator: prepared folders, memory-mapped, in a global order.

``build_token_dataloader`` gives a rank its micro-batches of the global order
(``boost.training.data.token_order``, ``boost.training.data.token_batches``) through a ``GlobalOrderDataloader``:
torchtitan's ``ParallelAwareDataloader`` (torchdata's ``StatefulDataLoader``) whose checkpoint state
is the order's, not a rank's. torchtitan's own keys each rank's state ``dp_rank_<r>`` and asserts
on load that the data-parallel degree is unchanged (it cannot reshard a per-rank position); the
global position is the same number on every rank at a step boundary, so it is kept once, under
``token_order``, and any degree continues from it: rank ``r`` of the new ``D`` reads its part of
the next global batch. DCP writes that one entry once (equal keys of all ranks are deduplicated).

``build_token_validation_dataloader`` reads the validation sources' fixed shuffle from the start
at every validation, the same windows each time, and never goes into a checkpoint.
"""

from __future__ import annotations

import pickle
from dataclasses import asdict
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.tokenizer import BaseTokenizer
from torchtitan.config import JobConfig
from torchtitan.tools.logging import logger

from boost.training.data.token_batches import TokenBatches
from boost.training.data.token_blend import BlendPart, describe_blend
from boost.training.data.token_folder import TokenSplit
from boost.training.data.token_order import TokenOrder
from torchtitan_ext.data.token_sources import (
    DATASET_STATE,
    TOKEN_ORDER,
    VALIDATION_SEED,
    TokenSource,
    dataset_seed,
    training_sources,
    validation_sources,
)


class GlobalOrderDataloader(ParallelAwareDataloader):
    """torchtitan's ``ParallelAwareDataloader`` whose state is the global order's, kept once for every rank."""

    def state_dict(self) -> dict[str, Any]:
        # StatefulDataLoader's state holds the dataset's (the global position and the order's
        # identity) and counters that every rank shares at a step boundary. Pickled, as torchtitan does.
        return {
            TOKEN_ORDER: pickle.dumps(StatefulDataLoader.state_dict(self)),
            "world_size": self.dp_world_size,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        loader_state = pickle.loads(state_dict[TOKEN_ORDER])
        StatefulDataLoader.load_state_dict(self, loader_state)
        saved_degree = state_dict.get("world_size", self.dp_world_size)
        moved = (
            f" (saved at data-parallel degree {saved_degree}, read now at {self.dp_world_size})"
            if saved_degree != self.dp_world_size
            else ""
        )
        position = loader_state[DATASET_STATE]["consumed_samples"]
        logger.info(f"tokens: the global order resumes at sample {position}{moved}")


def _order(sources: tuple[TokenSource, ...], seq_len: int, seed: int) -> TokenOrder:
    splits = [TokenSplit(s.folder, s.manifest, s.split) for s in sources]
    return TokenOrder(splits, [s.weight for s in sources], seq_len, seed)


def _describe(sources: tuple[TokenSource, ...], order: TokenOrder) -> str:
    spec = describe_blend([BlendPart(s.weight, s.folder) for s in sources])
    splits = "/".join(sorted({s.split for s in sources}))
    return (
        f"{spec} ({splits}): {sum(order.windows)} windows of seq_len + 1 = {order.window} tokens "
        f"({sum(len(s) for s in order.splits):,} tokens)"
    )


def build_token_dataloader(
    dp_world_size: int,
    dp_rank: int,
    tokenizer: BaseTokenizer | None,
    job_config: JobConfig,
    infinite: bool = True,
) -> GlobalOrderDataloader:
    """A rank's training loader over the ``tokens`` dataset (a train spec's ``build_dataloader_fn``;
    the ids are already tokens, so ``tokenizer`` is unused; the order has no end, so ``infinite`` is too)."""
    cfg = job_config.training
    sources = training_sources(job_config)
    order = _order(sources, cfg.seq_len, dataset_seed(job_config))
    logger.info(f"tokens: training reads {_describe(sources, order)}, shuffled with seed {order.seed}")
    batches = TokenBatches(order, dp_rank, dp_world_size, cfg.local_batch_size, infinite=True, name="tokens")
    return GlobalOrderDataloader(
        batches,
        dp_rank=dp_rank,
        dp_world_size=dp_world_size,
        **{**asdict(cfg.dataloader), "batch_size": None},
    )


def build_token_validation_dataloader(
    dp_world_size: int, dp_rank: int, tokenizer: BaseTokenizer | None, job_config: JobConfig
) -> ParallelAwareDataloader:
    """A rank's validation loader over the ``tokens`` dataset: the same windows at every validation."""
    cfg = job_config.validation
    sources = validation_sources(job_config)
    order = _order(sources, cfg.seq_len, VALIDATION_SEED)
    batches = TokenBatches(
        order, dp_rank, dp_world_size, cfg.local_batch_size, infinite=False, name="tokens validation"
    )
    left_out = order.unrepeated_length() % batches.global_micro_batch
    logger.info(
        f"tokens: validation reads {_describe(sources, order)}: {batches.micro_batches_per_pass()} "
        f"batches per rank per pass"
        + (f", the last {left_out} windows left out (batches are read whole)" if left_out else "")
    )
    return ParallelAwareDataloader(
        batches,
        dp_rank=dp_rank,
        dp_world_size=dp_world_size,
        **{**asdict(cfg.dataloader), "batch_size": None},
    )

"""A dry run's tokens, folded into rank 0's share of the vocabulary.

On the fake process group (``comm.mode = "fake_backend"``: rank 0 of ``NGPU``, one process) every
collective hands a rank its own data back. Where the embedding table is split over the vocabulary
(megatron and vanilla: torch's ``RowwiseParallel``), rank 0 looks up only the tokens of its own shard,
and the all-reduce that would bring every other token's row brings nothing: those tokens enter the
network as zero vectors, and a position whose whole prefix is such tokens stays zero through every
block (attention over zeros and SwiGLU of zero are zero). RMSNorm's gradient at zero is 1/sqrt(eps),
316× at eps 1e-5, twice a block: the dense 7B@16 dry run overflowed at step 8 on the H100, and the
debug model's gradient norm reached 6e4 on the CPU, where a real run's stays near 1.

Folding each token id into rank 0's share, ``[0, vocab_size / tp)``, gives every token its own row on
rank 0 and every target its logit there (loss parallel), so a dry run's activations and gradients keep
a model's scale and every scheme runs all its steps. The lookups and the loss cost what they cost with
any token ids; the fold applies to every scheme alike (btp shards the table on the embedding dim and
needs no fold, but its dry runs read the same tokens as the others'). A real run is never folded.
"""

from __future__ import annotations

import torch
from torchtitan.components.loss import IGNORE_INDEX


def dry_run_vocab_share(fake_backend: bool, vocab_size: int, tp: int) -> int | None:
    """The number of token ids a dry run folds into (rank 0's vocabulary shard), or ``None`` where
    nothing is folded: a real process group, or no tensor parallelism (the whole table is local)."""
    return vocab_size // tp if fake_backend and tp > 1 else None


def fold_tokens(tokens: torch.Tensor, labels: torch.Tensor, share: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``tokens`` and ``labels`` with every id taken modulo ``share``; ignored labels stay ignored."""
    return tokens % share, torch.where(labels == IGNORE_INDEX, labels, labels % share)

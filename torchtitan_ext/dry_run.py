"""What a dry run plays: its rank (the line that says which), and its tokens, folded into that rank's
share of the vocabulary.

On the fake process group (``comm.mode = "fake_backend"``: one process as one rank of ``NGPU``, rank 0
unless ``DRY_RUN_RANK`` says) every collective hands a rank its own data back. Where the embedding table
is split over the vocabulary (megatron and vanilla: torch's ``RowwiseParallel``), a rank looks up only
the tokens of its own shard, and the all-reduce that would bring every other token's row brings
nothing: those tokens enter the network as zero vectors, and a position whose whole prefix is such
tokens stays zero through every block (attention over zeros and SwiGLU of zero are zero). RMSNorm's
gradient at zero is 1/sqrt(eps), 316× at eps 1e-5, twice a block: the dense 7B@16 dry run overflowed
at step 8 on the H100, and the debug model's gradient norm reached 6e4 on the CPU, where a real run's
stays near 1.

Folding each token id into the rank's share, ``[j·vocab_size/tp, (j+1)·vocab_size/tp)`` at TP rank ``j``,
gives every token its own row on the rank and every target its logit there (loss parallel), so a dry
run's activations and gradients keep a model's scale and every scheme runs all its steps. The lookups
and the loss cost what they cost with any token ids; the fold applies to every scheme alike (btp shards
the table on the embedding dim and needs no fold, but its dry runs read the same tokens as the
others'). A real run is never folded.

Under context parallelism a rank holds its share of each window's loss, and the fake all-reduce over the
cp mesh adds no other share to it: a dry run divides by its share's tokens, not the window's
(``context_parallel.counted_labels``), so its loss is a real run's to what attention over the rank's own
keys changes (0.07 % at the debug size), and its gradient one share's mean, a smaller batch's (its norm
1.2× the real run's there), not half of either.
"""

from __future__ import annotations

import torch
from torchtitan.components.loss import IGNORE_INDEX


def dry_run_vocab_shard(fake_backend: bool, vocab_size: int, tp: int, tp_rank: int) -> range | None:
    """The token ids a dry run folds into (the vocabulary shard of its rank, TP rank ``tp_rank`` of ``tp``),
    or ``None`` where nothing is folded: a real process group, or no tensor parallelism (the whole table
    is local).

    Example::

        >>> dry_run_vocab_shard(True, 2048, tp=4, tp_rank=2), dry_run_vocab_shard(False, 2048, tp=4, tp_rank=2)
        (range(1024, 1536), None)
    """
    if not fake_backend or tp == 1:
        return None
    share = vocab_size // tp
    return range(tp_rank * share, (tp_rank + 1) * share)


def fold_tokens(
    tokens: torch.Tensor, labels: torch.Tensor, shard: range
) -> tuple[torch.Tensor, torch.Tensor]:
    """``tokens`` and ``labels`` with every id folded into ``shard``; ignored labels stay ignored."""
    size = len(shard)
    return shard.start + tokens % size, torch.where(
        labels == IGNORE_INDEX, labels, shard.start + labels % size
    )


def dry_run_line(rank: int, world_size: int, holds_the_loss: bool, loss_rank: int) -> str:
    """What a dry run plays: its rank and, where it holds no loss (a pipeline stage before the last),
    which rank does."""
    line = f"Dry run: rank {rank} of {world_size} on a fake process group"
    if not holds_the_loss:
        line += f" (its loss is -1: DRY_RUN_RANK={loss_rank} plays a rank holding the pipeline's last stage)"
    return line

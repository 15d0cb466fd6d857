"""The rank a dry run plays (``DRY_RUN_RANK``), the line that says so, and the tokens it reads: folded into
that rank's vocabulary shard. The dry run itself, playing a pipeline's last stage:
``tests/end_to_end/test_dry_run.py``."""

from __future__ import annotations

import pytest
import torch
from torchtitan.components.loss import IGNORE_INDEX

from torchtitan_ext.dry_run import dry_run_line, dry_run_vocab_shard, fold_tokens
from torchtitan_ext.preflight import ConfigError, dry_run_mode, dry_run_rank


@pytest.mark.parametrize("raw,rank", [(None, 0), ("", 0), ("0", 0), ("3", 3)])
def test_a_dry_run_plays_rank_0_or_the_one_named(raw, rank):
    assert dry_run_rank(raw, ngpu=4, dry_run=True) == rank


@pytest.mark.parametrize(
    "raw,dry_run,message",
    [
        ("4", True, "DRY_RUN_RANK = 4: must be one of the dry run's NGPU = 4 ranks, 0 to 3"),
        ("-1", True, "DRY_RUN_RANK = -1: must be one of the dry run's NGPU = 4 ranks, 0 to 3"),
        ("last", True, "DRY_RUN_RANK = 'last': must be one of the dry run's NGPU = 4 ranks, 0 to 3"),
        ("1", False, "DRY_RUN_RANK = '1': only a dry run plays a rank: set DRY_RUN=1 beside it, or unset it"),
    ],
)
def test_a_rank_no_dry_run_can_play_is_refused_naming_the_variable(raw, dry_run, message):
    with pytest.raises(ConfigError) as refused:
        dry_run_rank(raw, ngpu=4, dry_run=dry_run)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "mode,dry_run,message",
    [
        (
            "fake_backend",
            False,
            "comm.mode = 'fake_backend': a dry run is one process playing a rank: set DRY_RUN=1",
        ),
        (
            "default",
            True,
            "comm.mode = 'default': DRY_RUN=1 runs on the fake process group: drop --comm.mode",
        ),
    ],
)
def test_the_fake_process_group_goes_with_dry_run_alone(mode, dry_run, message):
    dry_run_mode("fake_backend", dry_run=True)
    dry_run_mode("default", dry_run=False)
    with pytest.raises(ConfigError) as refused:
        dry_run_mode(mode, dry_run=dry_run)
    assert str(refused.value).startswith(message)


def test_tokens_fold_into_the_played_ranks_vocabulary_shard():
    # megatron's embedding at tp 4 over 2048 ids: TP rank 2 holds rows 1024..1535, and looks up no other
    shard = dry_run_vocab_shard(True, 2048, tp=4, tp_rank=2)
    assert shard == range(1024, 1536)
    tokens = torch.arange(0, 2048, 7)
    labels = torch.where(tokens % 3 == 0, IGNORE_INDEX, tokens + 1)
    folded, folded_labels = fold_tokens(tokens, labels, shard)
    assert folded.min() >= 1024 and folded.max() < 1536
    kept = labels != IGNORE_INDEX
    assert (folded_labels[kept] >= 1024).all() and (folded_labels[kept] < 1536).all()
    assert (folded_labels[~kept] == IGNORE_INDEX).all()
    assert len(set(folded.tolist())) == len(set((tokens % 512).tolist()))  # ids stay told apart
    # a real process group, or no TP: nothing folded
    assert dry_run_vocab_shard(False, 2048, tp=4, tp_rank=2) is None
    assert dry_run_vocab_shard(True, 2048, tp=1, tp_rank=0) is None


def test_the_dry_run_line_says_which_rank_holds_the_loss_where_this_one_does_not():
    assert (
        dry_run_line(2, 4, holds_the_loss=True, loss_rank=2) == "Dry run: rank 2 of 4 on a fake process group"
    )
    assert dry_run_line(0, 16, holds_the_loss=False, loss_rank=12) == (
        "Dry run: rank 0 of 16 on a fake process group (its loss is -1: DRY_RUN_RANK=12 plays a rank holding "
        "the pipeline's last stage)"
    )

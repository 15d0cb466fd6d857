"""A run's loss metrics under context parallelism are one process's: ``global_max_loss`` is the largest
data-parallel rank's whole-window mean (a CP rank holds only its share of the window's loss), and
``n_tokens_seen`` counts each window once (every CP rank loads the whole window)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer import losses, train

CP2 = ("--parallelism.context_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1")
# 4 windows of 64 tokens a step (tests/trainer.py's SMALL)
TOKENS_A_STEP = 4 * 64


def tensorboard(folder: Path) -> dict[str, dict[int, float]]:
    """Every scalar the run's one TensorBoard writer logged, by tag and step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = {p.parent for p in folder.rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(events))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
def test_context_parallel_max_loss_and_tokens_seen_are_one_process_s(tmp_path):
    common = ("--checkpoint.no-enable", "--validation.no-enable", "--metrics.enable_tensorboard")
    one_log = train(tmp_path, *common, steps=2, folder="one")
    cp_log = train(tmp_path, *common, *CP2, ngpu=2, steps=2, folder="cp2")
    one, cp = tensorboard(tmp_path / "one" / "tb"), tensorboard(tmp_path / "cp2" / "tb")
    # the same windows, the same model: the step's loss to float32 reassociation (attention over two shards)
    for step in (1, 2):
        assert losses(cp_log)[step] == pytest.approx(losses(one_log)[step], rel=1e-5)
        # one data-parallel rank: its whole-window mean is the loss, the max equal to the average
        assert cp["loss_metrics/global_max_loss"][step] == pytest.approx(
            cp["loss_metrics/global_avg_loss"][step], rel=1e-6
        )
        assert cp["loss_metrics/global_max_loss"][step] == pytest.approx(
            one["loss_metrics/global_max_loss"][step], rel=1e-5
        )
        assert cp["n_tokens_seen"][step] == one["n_tokens_seen"][step] == step * TOKENS_A_STEP


@pytest.mark.slow
def test_data_parallel_max_loss_is_the_largest_rank_mean_not_a_rank_share_of_the_average(tmp_path):
    # two data-parallel ranks, every label counted: each rank's mean is its loss sum over its own tokens, the
    # average the mean of those two means, so the largest of them is at least the average (a rank's loss sum
    # over the global count, its share of the average, is about half of it)
    dp2 = ("--parallelism.data_parallel_shard_degree", "2", "--parallelism.context_parallel_degree", "1")
    common = ("--checkpoint.no-enable", "--validation.no-enable", "--metrics.enable_tensorboard")
    train(tmp_path, *common, *dp2, ngpu=2, steps=2)
    tb = tensorboard(tmp_path / "out" / "tb")
    for step in (1, 2):
        avg, top = tb["loss_metrics/global_avg_loss"][step], tb["loss_metrics/global_max_loss"][step]
        assert avg * (1 - 1e-6) <= top < 2 * avg, (step, avg, top)

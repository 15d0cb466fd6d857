"""The ``tokens`` dataset through the trainer: a corpus prepared by the real command, a run at one
process, resumed at two data-parallel ranks.

A C4-shaped ``.json.gz`` corpus is prepared with ``python -m boost.training.data.prepare --config
train_configs/debug.toml`` (the tokenizer the run trains with, a held-out split). One uninterrupted
run (one process, 4 windows a step, 4 steps, a checkpoint at step 2, validation at
steps 2 and 4 on the folder's held-out split) serves every assertion: its step-2 checkpoint, copied
into a second run folder, resumes at NGPU=2 (FSDP, 2 windows a rank, the same global batch of 4)
and must read the samples the uninterrupted order would. Losses are compared, so a sample repeated,
skipped or moved to another step would show: the training windows are real text, and their losses
differ by ~1e-2 from one batch to the next at this point, against float32 reassociation (~1e-6) of
the two ranks' FSDP reductions and of the validation loss summed over two ranks. The checkpoints
both runs write at step 4 hold one global position, 16 samples, whatever the degree.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil

import pytest

from boost.runtime.checkpoint_folder import read_bytes_item
from boost.training.data.stdlib_corpus import stdlib_texts
from boost.training.data.token_folder import read_manifest
from tests.token_folders import prepare_as_a_user
from tests.trainer import losses, run_train, train
from torchtitan_ext.data.token_checks import saved_token_position

VOCAB = 2048  # debug.toml's offline tokenizer
# float32 reassociation of two ranks' sums (FSDP's reduce-scatter, the validator's all-reduce) against one
# process's, ~1e-6 after two optimizer steps, below the log's rounding: training losses print 5 decimals
# (≤ 1e-5 apart when equal), validation losses 4 (≤ 1e-4 apart), on losses near 7
RTOL, VALIDATION_RTOL = 1e-5, 2e-5


def validation_losses(log: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"validate step:\s+(\d+)\s+\S*loss:\s+([\d.]+)", log)}


@pytest.mark.slow
def test_tokens_run_resumed_at_two_ranks_continues_the_global_order(tmp_path):
    # 16 documents of 200 characters: ~11 training windows of 65 tokens (an epoch ends inside the run's
    # 16 samples) and, held out by prepare's text hash, the 8 windows two validation steps read
    corpus = tmp_path / "c4-like.json.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        for i, text in enumerate(stdlib_texts("train")[:16]):
            f.write(
                json.dumps({"text": text[:200], "timestamp": "2019-04-25T12:57:54Z", "url": f"u/{i}"}) + "\n"
            )
    folder = tmp_path / "tokens"
    # the run's own tokenizer: tests/trainer.py points BOOST_CACHE at tmp_path.parent / "boost-cache"
    prepare_as_a_user(corpus, folder, tmp_path.parent / "boost-cache", "--validation-fraction", "0.4")
    manifest = read_manifest(folder, "training.dataset_path")
    windows = manifest.splits["train"].tokens // 65
    assert 4 <= windows < 16 and manifest.splits["validation"].tokens >= 8 * 65
    common = [
        "--training.dataset", "tokens", "--training.dataset_path", str(folder),
        "--validation.dataset", "tokens", "--validation.freq", "2",
        "--checkpoint.interval", "2", "--lr_scheduler.warmup_steps", "2",
    ]  # fmt: skip
    # 4 windows a step, in training and in each of validation's 2 steps, at both layouts
    one_rank = ["--training.local_batch_size", "4", "--validation.local_batch_size", "4"]
    two_ranks = ["--training.local_batch_size", "2", "--validation.local_batch_size", "2"]

    whole = run_train(tmp_path, *common, *one_rank, steps=4, folder="whole")
    assert f"tokens: epoch 1 begins at sample {windows} of the global order, reshuffled" in whole
    shutil.copytree(
        tmp_path / "whole" / "checkpoint" / "step-2", tmp_path / "resumed" / "checkpoint" / "step-2"
    )
    # the resume's ranks alone (no launcher): what it checks is the ranks' reading of the folder
    resumed = train(tmp_path, *common, *two_ranks, ngpu=2, steps=4, folder="resumed")
    assert "the data-parallel degree changed from 1 (checkpoint) to 2" in resumed
    assert (
        "tokens: the global order resumes at sample 8 (saved at data-parallel degree 1, read now at 2)"
        in resumed
    )

    expected, got = losses(whole), losses(resumed)
    assert sorted(got) == [3, 4]
    for step in (3, 4):
        assert got[step] == pytest.approx(expected[step], rel=RTOL), (step, got, expected)
    # the same held-out windows at every validation, whatever the layout
    assert validation_losses(resumed)[4] == pytest.approx(validation_losses(whole)[4], rel=VALIDATION_RTOL)
    # the two ranks' checkpoint holds one global position, where the one-rank run's stands at the same step
    for folder, degree in (("whole", 1), ("resumed", 2)):
        step4 = tmp_path / folder / "checkpoint" / "step-4"
        assert saved_token_position(step4)["consumed_samples"] == 16
        assert read_bytes_item(step4, "dataloader.world_size") == degree

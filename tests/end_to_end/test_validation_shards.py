"""Validation over data-parallel ranks whose shares of a text corpus differ in length (a corpus splits by
whole documents): every rank runs the same batches, or one leaves the loop while the others wait in a
collective it never joins (gloo stopped on a size mismatch; NCCL would hang until its timeout)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.trainer import train

WORDS = "the model reads every window of its share and scores the next token of each".split()


def _uneven_documents(path: Path) -> Path:
    """Two documents: rank 0's share (the first) fills a few 32-token windows, rank 1's many more."""
    with path.open("w") as f:
        for words in (60, 900):
            f.write(json.dumps({"text": " ".join(WORDS[i % len(WORDS)] for i in range(words))}) + "\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("steps", ["6", "-1"], ids=["steps_6", "whole_set"])
def test_validation_runs_on_uneven_shares_of_a_text_corpus(steps, tmp_path):
    corpus = _uneven_documents(tmp_path / "held_out.jsonl")
    log = train(
        tmp_path,
        "--checkpoint.no-enable",
        "--parallelism.data_parallel_shard_degree", "2",
        "--validation.dataset", "local",
        "--validation.dataset_path", str(corpus),
        "--validation.local_batch_size", "1",
        "--validation.seq_len", "32",
        "--validation.steps", steps,
        "--validation.freq", "2",
        ngpu=2,
        steps=2,
    )  # fmt: skip
    validated = [float(v) for v in re.findall(r"validate step:\s+2\s+\S*loss:\s+([\d.]+)", log)]
    assert len(validated) == 1 and math.isfinite(validated[0]) and validated[0] > 0, log[-3000:]


@pytest.mark.slow
def test_whole_set_validation_reads_whole_batches_under_every_layout(tmp_path):
    """The whole held-out set (``validation.steps = -1``) of a text corpus whose windows do not fill the last
    batch: the pipeline schedule splits every batch into ``validation.local_batch_size``'s fixed
    micro-batches, so a partial last one stopped pp 2 (its eval asserts the count). The loader reads whole
    batches under every layout: pp 2 validates, saying how many windows it left out, and scores what one
    process scores (the same windows; the schedule sums the micro-batches' losses: close, not exact)."""
    corpus = tmp_path / "held_out.jsonl"
    with corpus.open("w") as f:  # 9 windows of 33 tokens or so: 2 whole batches of 4, one left out
        f.write(json.dumps({"text": " ".join(WORDS[i % len(WORDS)] for i in range(300))}) + "\n")
    validation = ("--validation.dataset", "local", "--validation.dataset_path", str(corpus),
                  "--validation.local_batch_size", "4", "--validation.seq_len", "32", "--validation.steps", "-1",
                  "--validation.freq", "2", "--checkpoint.no-enable")  # fmt: skip
    pipeline = ("--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_microbatch_size",
                "2", "--training.local_batch_size", "4")  # fmt: skip
    logs = {
        "one process": train(
            tmp_path, *validation, "--training.local_batch_size", "4", steps=2, folder="one"
        ),
        "pp 2": train(tmp_path, *validation, *pipeline, ngpu=2, steps=2, log_rank=1, folder="pp"),
        # loss-parallel TP: each batch's loss a replicated DTensor, summed into the pass's total
        "tp 2": train(
            tmp_path,
            *validation,
            "--training.local_batch_size",
            "4",
            "--parallelism.tensor_parallel_degree",
            "2",
            "--parallelism.data_parallel_shard_degree",
            "1",
            ngpu=2,
            steps=2,
            folder="tp",
        ),  # fmt: skip
    }
    scores = {}
    for layout, log in logs.items():
        left_out = re.findall(
            r"Validation left out the last (\d+) of this rank's (\d+) held-out windows", log
        )
        assert left_out and int(left_out[0][0]) == int(left_out[0][1]) % 4 > 0, (layout, log[-3000:])
        scores[layout] = [float(v) for v in re.findall(r"validate step:\s+2\s+\S*loss:\s+([\d.]+)", log)]
        assert len(scores[layout]) == 1, (layout, log[-3000:])
    for layout in ("pp 2", "tp 2"):
        assert math.isclose(scores[layout][0], scores["one process"][0], rel_tol=1e-4), scores


@pytest.mark.slow
def test_data_parallel_validation_loss_is_the_token_mean_over_every_rank_s_tokens(tmp_path):
    """Two identical documents, one each rank's share at dp 2, both read by one process: the same text scored
    either way. Learning rate 1e-30 keeps step 1's model the initial one (below float32 rounding) whatever the
    data-parallel layout trained on. Not the same windows to the bit: one process packs the two documents into
    one stream (a window crosses between them), a rank its one document alone, so close (0.2% measured), not
    equal; a rank dividing its loss sum by its own tokens before the sum over ranks reports twice the loss."""
    corpus = tmp_path / "held_out.jsonl"
    with corpus.open("w") as f:
        for _ in range(2):
            f.write(json.dumps({"text": " ".join(WORDS[i % len(WORDS)] for i in range(200))}) + "\n")
    validation = ("--validation.dataset", "local", "--validation.dataset_path", str(corpus),
                  "--validation.local_batch_size", "1", "--validation.seq_len", "32", "--validation.steps", "-1",
                  "--validation.freq", "1", "--checkpoint.no-enable", "--optimizer.lr", "1e-30")  # fmt: skip
    one = train(tmp_path, *validation, steps=1, folder="one")
    dp2 = train(
        tmp_path, *validation, "--parallelism.data_parallel_shard_degree", "2", ngpu=2, steps=1, folder="dp2"
    )
    scores = {
        layout: [float(v) for v in re.findall(r"validate step:\s+1\s+\S*loss:\s+([\d.]+)", log)]
        for layout, log in (("one", one), ("dp2", dp2))
    }
    assert len(scores["one"]) == len(scores["dp2"]) == 1, (one[-2000:], dp2[-2000:])
    assert math.isclose(scores["dp2"][0], scores["one"][0], rel_tol=2e-2), scores

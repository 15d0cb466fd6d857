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

"""The validation loss is one mean over the held-out tokens a pass reads, whatever ``validation.local_batch_size``
groups them into: the whole set (``validation.steps = -1``) is read in whole batches, a last partial one left
out and said (a pipeline schedule cannot split it), and the batches' sums are divided once by their tokens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.trainer import train

WORDS = "the model reads every window of its share and scores the next token of each one it sees".split()


def _held_out(path: Path) -> Path:
    """One document of 7 windows of 64 tokens (the debug tokenizer): batches of 2 leave a partial one."""
    path.write_text(" ".join(f"{WORDS[i % len(WORDS)]}{i % 7}" for i in range(185)) + "\n")
    return path


def _validation(tmp_path: Path, corpus: Path, batch: int) -> tuple[float, str]:
    log = train(
        tmp_path,
        "--checkpoint.no-enable",
        "--validation.dataset", "local",
        "--validation.dataset_path", str(corpus),
        "--validation.local_batch_size", str(batch),
        "--validation.steps", "-1",
        "--validation.freq", "1",
        steps=1,
        folder=f"batch{batch}",
    )  # fmt: skip
    (loss,) = re.findall(r"validate step:\s+1\s+\S*loss:\s+([\d.]+)", log)
    return float(loss), log


@pytest.mark.slow
def test_validation_loss_is_the_token_mean_of_the_whole_batches_read(tmp_path):
    corpus = _held_out(tmp_path / "held_out.txt")
    # the same model at step 1 (same seed, same data) scores the same windows: equal to the printed 4 decimals
    every, _ = _validation(tmp_path, corpus, 7)  # one batch of the 7 windows
    assert _validation(tmp_path, corpus, 1)[0] == pytest.approx(every, abs=1.5e-4)  # 7 batches of 1
    six, _ = _validation(tmp_path, corpus, 6)  # one batch of 6, the 7th left out
    three, log = _validation(tmp_path, corpus, 3)  # 2 batches of 3, the 7th left out (it was a batch of 1)
    assert three == pytest.approx(six, abs=1.5e-4)
    assert "Validation left out the last 1 of this rank's 7 held-out windows" in log
    assert abs(six - every) > 1e-3  # the 7th window is not read: the two are other sets of windows

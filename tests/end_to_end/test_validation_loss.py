"""The validation loss is one mean over every held-out token, whatever ``validation.local_batch_size``: a
partial last batch (a text corpus keeps it with ``validation.steps = -1``) weighs its tokens, not a batch's."""

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


def _validation_loss(tmp_path: Path, corpus: Path, batch: int) -> float:
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
    return float(loss)


@pytest.mark.slow
def test_validation_loss_is_the_token_mean_whatever_the_batch_size(tmp_path):
    corpus = _held_out(tmp_path / "held_out.txt")
    # one batch holding every window: its loss is the token mean itself (one forward, one division)
    whole = _validation_loss(tmp_path, corpus, 7)
    for batch in (1, 2, 5):  # 2 and 5 leave a partial last batch
        # the same model at step 1 (same seed, same data), sums regrouped: equal to the printed 4 decimals
        assert _validation_loss(tmp_path, corpus, batch) == pytest.approx(whole, abs=1.5e-4), batch

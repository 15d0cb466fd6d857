"""Data-parallel replicas (``parallelism.data_parallel_replicate_degree``) through the trainer: FSDP2's HSDP
over ``(dp_replicate, dp_shard × cp)`` at a shard degree of 1, alone, beside TP and beside PP, each against
one process that reads the same samples.

The reference is one process reading the replicas' global batch. On the ``tokens`` dataset data-parallel
rank ``r`` reads the ``r``-th ``local_batch_size`` of each global micro-batch (docs/design.md, the global
order), so 2 replicas of 4 windows read the 8 windows one process of 8 reads, and both divide the loss by
the same global token count. The gradient norms are compared beside the losses: AdamW's update hardly
depends on the gradient's scale (clipping at max_norm 1 rescales it too), so a gradient off by a factor
leaves the curve almost as it was. torchtitan's DDP, which these layouts ran before, averaged the
replicas' gradients of a loss already divided by the global count (half the gradient: step 1's norm 0.62
against 1.24); beside TP its metrics found no parameter on a rank and stopped, and beside PP the first
stage's replicas drifted apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from boost.training.data.stdlib_corpus import stdlib_texts
from boost.training.rules import pipeline_loss_rank
from tests.end_to_end.test_feature_matrix import COMMON, RTOL, STEPS, assert_same_curve, grad_norms
from tests.suite_once import once_per_suite
from tests.token_folders import prepare_as_a_user
from tests.trainer import losses, train

# the unpipelined and pipelined runs' gradient norms, as the feature matrix compares them: float32 sums
# reassociated over ranks, printed to 4 decimals; a halved or drifting gradient is off by far more
NORM_RTOL = 1e-3
LOCAL_BATCH = 4
REPLICAS = 2
_REPLICATE = (
    "--parallelism.data_parallel_replicate_degree",
    str(REPLICAS),
    "--parallelism.data_parallel_shard_degree",
    "1",
)
LAYOUTS: dict[str, tuple[int, tuple[str, ...]]] = {  # name -> (processes, overrides)
    "replicate2": (2, _REPLICATE),
    "replicate2×tp2": (4, (*_REPLICATE, "--parallelism.tensor_parallel_degree", "2")),
    "replicate2×pp2": (4, (*_REPLICATE, "--parallelism.pipeline_parallel_degree", "2")),
}


def _tokens(folder: Path) -> list[str]:
    return ["--training.dataset", "tokens", "--training.dataset_path", str(folder)]


def _prepare_tokens(folder: Path) -> Path:
    """``folder/tokens``: 40 standard-library texts (~12k tokens, ~190 windows of 65) prepared by the real
    command with debug.toml's tokenizer, the one the runs train with (``tests/trainer.py``'s cache)."""
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t[:1000]}) + "\n" for t in stdlib_texts("train")[:40]))
    tokens = folder / "tokens"
    prepare_as_a_user(corpus, tokens, folder.parent / "boost-cache", "--workers", "1")
    return tokens


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, str]:
    """``(token folder, log)``: one process reading the replicas' global batch, once a suite."""

    def make(folder: Path) -> str:
        tokens = _prepare_tokens(folder)
        batch = ["--training.local_batch_size", str(LOCAL_BATCH * REPLICAS)]
        return train(folder, *COMMON, *_tokens(tokens), *batch, ngpu=1, steps=STEPS)

    folder, log = once_per_suite(tmp_path_factory, "replicate-reference", make)
    return folder / "tokens", log


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_replicas_train_the_one_process_curve(layout: str, reference, tmp_path: Path):
    tokens, reference_log = reference
    ngpu, overrides = LAYOUTS[layout]
    pp = 2 if "pp2" in layout else 1
    batch = ["--training.local_batch_size", str(LOCAL_BATCH)]
    log = train(
        tmp_path,
        *COMMON,
        *_tokens(tokens),
        *batch,
        *overrides,
        ngpu=ngpu,
        steps=STEPS,
        log_rank=pipeline_loss_rank("1F1B", pp, ngpu),
    )
    assert "Applied HSDP to the model" in log and "Applied DDP" not in log, log[-3000:]
    assert_same_curve(losses(log), losses(reference_log), RTOL)
    assert_same_curve(grad_norms(log), grad_norms(reference_log), NORM_RTOL)

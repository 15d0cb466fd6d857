"""LORO through the trainer (``run_train.sh``; the resume's ranks alone, ``tests/trainer.py``'s ``train``):
``optimizer.name = "LORO"`` with the ``cosine_restart`` schedule on the svd kind, its state in the DCP
checkpoint, a resume across exact steps onto another layout.

Two runs. The first trains under BTP at TP 2 for 6 steps (exact steps 3 and 6, each followed by a
refresh of every Adam moment; a checkpoint at step 2). The second starts from that checkpoint at one
process (TP 2 → 1: DCP reshards the factors and their moments) and runs steps 3-6, through both exact
steps: its losses must repeat the first run's to 1e-5 relative (the same model and data, summed in
another order; debug.toml computes in fp32). The exact steps and refreshes land on 3 and 6 only if the
cycle position came back with the moments: in one process, restarting the moments at step 3 moved the
losses of steps 4 and 5 by 3.1e-4 and 1.4e-4, restarting the cycle by 1.5e-4 and 1.6e-3 (relative).
"""

from __future__ import annotations

import shutil

import pytest

from tests.trainer import ROOT, losses, preflight_refusal, run_train, train

LORO = [
    "--boost.linear",
    "svd",
    "--optimizer.name",
    "LORO",
    # the authors' recipe: lr 0.01, betas (0.9, 0.999), eps 1e-6, no weight decay
    "--optimizer.lr",
    "0.01",
    "--optimizer.beta2",
    "0.999",
    "--optimizer.eps",
    "1e-6",
    "--optimizer.weight_decay",
    "0",
    "--optimizer.loro_freq",
    "3",
    "--optimizer.loro_refresh_freq",
    "3",
    "--lr_scheduler.decay_type",
    "cosine_restart",
    "--lr_scheduler.warmup_steps",
    "2",
    "--lr_scheduler.restart_every",
    "3",
    "--lr_scheduler.restart_warmup_steps",
    "1",
    "--lr_scheduler.restart_adjust_steps",
    "-2",
    "--validation.no-enable",
    "--checkpoint.interval",
    "2",
    "--checkpoint.keep_latest_k",
    "0",
]
TP2 = ["--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1"]


def _resume_from(tmp_path, step: int, folder: str) -> None:
    source = tmp_path / "straight" / "checkpoint" / f"step-{step}"
    shutil.copytree(source, tmp_path / folder / "checkpoint" / f"step-{step}")


@pytest.mark.slow
def test_loro_resumes_across_exact_steps_from_tp2_at_one_process(tmp_path):
    straight_log = run_train(tmp_path, *LORO, *TP2, ngpu=2, steps=6, folder="straight")
    assert "LORO: exact step every 3 steps" in straight_log
    straight = losses(straight_log)
    assert sorted(straight) == list(range(1, 7)) and straight[6] < straight[1], straight

    _resume_from(tmp_path, 2, "resharded")
    resharded_log = train(tmp_path, *LORO, ngpu=1, steps=6, folder="resharded")
    assert "Training starts at step 3" in resharded_log
    resharded = losses(resharded_log)
    assert resharded.keys() == {3, 4, 5, 6}, resharded
    for step, loss in resharded.items():
        assert abs(loss - straight[step]) <= 1e-5 * straight[step], (step, loss, straight[step])


@pytest.mark.slow
def test_a_resume_into_the_other_optimizer_is_refused_before_any_process(tmp_path, monkeypatch):
    """LORO's state (its factor groups) and torch's AdamW's do not load into each other: DCP stopped every
    rank, on metadata it could not load (LORO's into AdamW) or a missing key (``amsgrad``, the reverse).
    The preflight refuses either, naming the way on: a fresh optimizer and schedule, the model resumed."""
    train(tmp_path, *LORO, steps=2, folder="loro")
    adamw_svd = ["--boost.linear", "svd", "--validation.no-enable", "--checkpoint.interval", "2"]
    train(tmp_path, *adamw_svd, steps=2, folder="adamw")
    monkeypatch.chdir(ROOT)

    fresh = ("--checkpoint.exclude_from_loading", "optimizer,lr_scheduler")
    for folder, saved, job, wanted in (
        ("loro", "LORO", (*LORO, "--optimizer.name", "AdamW"), "AdamW"),
        ("adamw", "Adam/AdamW", LORO, "LORO"),
    ):
        refused = preflight_refusal(tmp_path, *job, monkeypatch=monkeypatch, dump=tmp_path / folder)
        assert refused.startswith(
            f"BOOST checkpoint error: {tmp_path / folder / 'checkpoint' / 'step-2'} holds {saved}'s optimizer "
            f"state, and this job's optimizer.name = '{wanted}' keeps another"
        ), refused
        assert (
            preflight_refusal(tmp_path, *job, *fresh, monkeypatch=monkeypatch, dump=tmp_path / folder) is None
        )
    # the same optimizer resumes
    assert preflight_refusal(tmp_path, *LORO, monkeypatch=monkeypatch, dump=tmp_path / "loro") is None
    assert preflight_refusal(tmp_path, *adamw_svd, monkeypatch=monkeypatch, dump=tmp_path / "adamw") is None

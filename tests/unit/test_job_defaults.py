"""The job-config defaults the after-training tools fill a TOML's gaps with are the trainer's: torchtitan's
``JobConfig`` merged with BOOST's, and the tools follow them (a TOML without ``[validation]`` is scored as the
trainer would validate it: torchtitan's c4_validation at seq_len 2048, refused offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from boost.after_training.evaluate import main as evaluate
from boost.after_training.job_defaults import JOB_DEFAULTS
from boost.after_training.trained_run import checkpoint_root, load_run
from tests.trained_runs import SEQ_LEN, make_run


def test_each_default_is_the_trainers():
    from torchtitan_ext.preflight.schema import job_config_class

    trainer = job_config_class("torchtitan_ext.config")()  # the JobConfig torchtitan fills for a BOOST run
    for (section, field), default in JOB_DEFAULTS.items():
        assert getattr(getattr(trainer, section), field) == default, f"{section}.{field}"


def test_a_run_without_job_dump_folder_is_read_from_torchtitans(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert checkpoint_root({}) == Path("outputs") / "checkpoint"


@pytest.fixture
def run_without_validation(tmp_path) -> Path:
    toml = make_run(tmp_path, "svd")
    toml.write_text(toml.read_text().split("[validation]")[0])  # no [validation]: the trainer's defaults
    return toml


def test_a_toml_without_validation_is_scored_as_the_trainer_validates_it(
    run_without_validation, tmp_path, capsys
):
    argv = ["--config", str(run_without_validation), "--batch-size", "1", "--max-tokens", "2048"]
    assert (
        evaluate(argv) == 2
    )  # torchtitan's c4_validation, not the stdlib split: refused offline as when set
    assert "validation.dataset = 'c4_validation' is not available offline here; pass --data FILE" in (
        capsys.readouterr().err
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("def main(argv):\n    return len(argv) + 1\n" * 400)
    assert len(load_run(run_without_validation).tokenizer.encode(notes.read_text())) > 2048 > SEQ_LEN
    assert evaluate([*argv, "--data", str(notes)]) == 0
    assert (
        f"on {notes}, seq_len 2048:" in capsys.readouterr().out
    )  # validation.seq_len's default, not training's

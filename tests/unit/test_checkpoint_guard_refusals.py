"""The resume guard's refusals of a checkpoint folder, on hand-made DCP checkpoints (``dcp.save`` with
``no_dist``: no process group, no training run) and torchtitan's own ``JobConfig``."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torchtitan.config import JobConfig

from boost.runtime.checkpoint_folder import MODEL_ONLY
from torchtitan_ext.guards.checkpoint_guard import CheckpointRefused, check_model_identity, resume_checkpoint

# dcp.save without a process group says it saves in one process: that is the intent here
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _resuming_job(dump_folder: Path, load_step: int = -1) -> JobConfig:
    job = JobConfig()
    job.job.dump_folder = str(dump_folder)
    job.checkpoint.enable = True
    job.checkpoint.load_step = load_step
    return job


def _save_step(checkpoints: Path, step: int) -> Path:
    path = checkpoints / f"step-{step}"
    dcp.save({"w": torch.arange(64.0), "train_state": {"step": step}}, checkpoint_id=path, no_dist=True)
    return path


def _truncate_data(path: Path) -> str:
    """Cut the checkpoint's data file in half (a kill during the write, a full disk); its name."""
    (data,) = path.glob("*.distcp")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    return data.name


def test_resume_refuses_a_folder_whose_every_checkpoint_is_corrupt(tmp_path):
    # falling back to a fresh start would silently throw the run away; loading one would fail deep in DCP
    checkpoints = tmp_path / "checkpoint"
    _save_step(checkpoints, 2)
    (checkpoints / "step-2" / ".metadata").unlink()  # the save did not finish
    data = _truncate_data(_save_step(checkpoints, 4))
    with pytest.raises(
        CheckpointRefused,
        match=re.escape(
            f"no intact checkpoint in {checkpoints} (2 corrupt: step 4: data file {data} is truncated"
        ),
    ) as refused:
        resume_checkpoint(_resuming_job(tmp_path))
    assert str(refused.value).endswith("move them away to start from scratch")
    # one intact older step is what the guard falls back to instead
    _save_step(checkpoints, 1)
    assert resume_checkpoint(_resuming_job(tmp_path))[:2] == (checkpoints / "step-1", 1)


def _written_by(path: Path, torch_version: str) -> None:
    """Record ``torch_version`` as the writer of the checkpoint at ``path`` and make its ``.metadata`` one this
    torch cannot unpickle (torch 2.15's, read by 2.13: 'too many values to unpack (expected 5)')."""
    record = {"boost_version": "0.1.0", "torch_version": torch_version, "step": 4, "model": {}}
    (path / "boost_model.json").write_text(json.dumps(record))
    metadata = path / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])


def test_a_checkpoint_a_newer_torch_wrote_is_no_damage_and_never_trained_over(tmp_path):
    """Back on an older torch after a newer one saved: the newer step is not called corrupt, nor skipped for
    an older one (whose resume would train over it, and whose saves would replace it)."""
    checkpoints = tmp_path / "checkpoint"
    _save_step(checkpoints, 2)
    _written_by(_save_step(checkpoints, 4), "99.0.0")
    newer = (
        f"{checkpoints / 'step-4'} was written by a newer torch (99.0.0) than this one ({torch.__version__}), "
        "whose .metadata it cannot read ("
    )
    with pytest.raises(CheckpointRefused) as refused:
        resume_checkpoint(_resuming_job(tmp_path))
    assert str(refused.value).startswith(f"BOOST checkpoint error: {newer}"), refused.value
    assert str(refused.value).endswith(
        "nothing is damaged: run with torch 99.0.0 or newer; or move it away to resume from step 2"
    )
    shutil.rmtree(checkpoints / "step-2")
    with pytest.raises(CheckpointRefused, match="or move it away to start from scratch$"):
        resume_checkpoint(_resuming_job(tmp_path))
    # recorded by this torch's release (another build of it, or an older one), the same .metadata is damage:
    # the older step is resumed
    _save_step(checkpoints, 2)
    release = torch.__version__.split("+")[0]
    for writer in (torch.__version__, f"{release}+zz999", "2.0.0"):
        _written_by(checkpoints / "step-4", writer)
        path, step, skipped = resume_checkpoint(_resuming_job(tmp_path))
        assert (path, step) == (checkpoints / "step-2", 2), writer
        assert [(bad, reason.split(" (")[0]) for bad, reason in skipped] == [(4, "unreadable .metadata")]


def test_resume_refuses_a_load_step_naming_a_corrupt_checkpoint(tmp_path):
    # an explicit load_step is never swapped for another step: the user asked for that one
    checkpoints = tmp_path / "checkpoint"
    _save_step(checkpoints, 1)
    data = _truncate_data(_save_step(checkpoints, 4))
    with pytest.raises(
        CheckpointRefused,
        match=re.escape(f"checkpoint.load_step = 4: {checkpoints / 'step-4'}: data file {data} is truncated"),
    ):
        resume_checkpoint(_resuming_job(tmp_path, load_step=4))


@pytest.mark.parametrize(
    "record, problem",
    [
        ('{"model": ["cola"]}', """its 'model' is ["cola"], not an object"""),
        ('{"model": null}', "its 'model' is null, not an object"),
        ('{"step": 1}', "no 'model' entry"),
        ('["cola"]', "not a JSON object"),
    ],
)
def test_a_damaged_model_identity_is_refused_naming_the_file(tmp_path, record, problem):
    # only a missing file is "written before BOOST recorded one"; anything else in its place is damage
    path = _save_step(tmp_path / "checkpoint", 1)
    (path / "boost_model.json").write_text(record)
    with pytest.raises(
        CheckpointRefused,
        match=re.escape(
            f"BOOST checkpoint error: {path / 'boost_model.json'} is not a BOOST model identity ({problem}); "
            "restore it or delete it to resume unchecked"
        ),
    ):
        check_model_identity(path, _resuming_job(tmp_path))
    (path / "boost_model.json").unlink()
    assert "records no model identity" in check_model_identity(path, _resuming_job(tmp_path))


def _save_model_only(checkpoints: Path, step: int) -> Path:
    """A checkpoint of the model alone: torchtitan's last save under checkpoint.last_save_model_only."""
    path = checkpoints / f"step-{step}"
    dcp.save({"w": torch.arange(64.0)}, checkpoint_id=path, no_dist=True)
    return path


def test_a_model_only_checkpoint_is_no_resume_point(tmp_path):
    # torchtitan's resume would pick step-4 and fail in DCP ("Missing key in checkpoint state_dict")
    checkpoints = tmp_path / "checkpoint"
    _save_step(checkpoints, 2)
    model_only = _save_model_only(checkpoints, 4)
    assert resume_checkpoint(_resuming_job(tmp_path)) == (checkpoints / "step-2", 2, [(4, MODEL_ONLY)])
    fix = f"set checkpoint.initial_load_path = {model_only} with a new job.dump_folder"
    with pytest.raises(
        CheckpointRefused, match=re.escape(f"load_step = 4: {model_only}: {MODEL_ONLY}; ")
    ) as asked:
        resume_checkpoint(_resuming_job(tmp_path, load_step=4))  # asked for by name: refused, never swapped
    assert fix in str(asked.value)
    shutil.rmtree(checkpoints / "step-2")
    with pytest.raises(
        CheckpointRefused, match=re.escape(f"no checkpoint in {checkpoints} to resume from: ")
    ) as none:
        resume_checkpoint(_resuming_job(tmp_path))
    assert fix in str(none.value)
    # torchtitan's seed checkpoint holds the model alone by design, and is loaded as such
    _save_model_only(checkpoints, 0)
    assert resume_checkpoint(_resuming_job(tmp_path))[:2] == (checkpoints / "step-0", 0)


def _starting_from(dump_folder: Path, initial: Path, model_only: bool = True) -> JobConfig:
    job = _resuming_job(dump_folder)
    job.checkpoint.initial_load_path = str(initial)
    job.checkpoint.initial_load_model_only = model_only
    return job


def test_an_initial_checkpoint_is_inspected_and_never_silently_ignored(tmp_path):
    other = tmp_path / "other" / "checkpoint"
    full, model_only = _save_step(other, 2), _save_model_only(other, 4)
    run = tmp_path / "run"
    assert resume_checkpoint(_starting_from(run, model_only)) == (model_only, None, [])
    # checked as a resume candidate is: a truncated copy, a run's checkpoint folder, a file
    copy = shutil.copytree(full, tmp_path / "copy")
    data = _truncate_data(copy)
    for initial, problem in [
        (copy, f"data file {data} is truncated"),
        (other, "a run's checkpoint folder (holding step-2, step-4): name one of them"),
        (copy / data, "not a folder: name a checkpoint's step-N folder"),
    ]:
        with pytest.raises(
            CheckpointRefused, match=re.escape(f"checkpoint.initial_load_path = {initial}: {problem}")
        ):
            resume_checkpoint(_starting_from(run, initial))
    # loaded in full (initial_load_model_only = false), it needs the optimizer and training state
    with pytest.raises(CheckpointRefused, match=re.escape(f"initial_load_path = {model_only}: {MODEL_ONLY}")):
        resume_checkpoint(_starting_from(run, model_only, model_only=False))
    # torchtitan reads it only while the run's checkpoint folder does not exist: an empty one would
    # have the run start from random weights
    (run / "checkpoint").mkdir(parents=True)
    with pytest.raises(
        CheckpointRefused,
        match=re.escape(
            f"checkpoint.initial_load_path = {model_only} is read only while the run's checkpoint folder does "
            f"not exist, and {run / 'checkpoint'} exists, holding no checkpoint: this run would start from "
            "random weights; move that folder away"
        ),
    ):
        resume_checkpoint(_starting_from(run, model_only))
    # once the run has saved its own checkpoint, that is what it resumes from (torchtitan's rule)
    _save_step(run / "checkpoint", 6)
    assert resume_checkpoint(_starting_from(run, model_only))[:2] == (run / "checkpoint" / "step-6", 6)


def test_a_field_the_checkpoint_does_not_record_compares_as_its_default():
    from boost import ModelArgs
    from torchtitan_ext.guards.checkpoint_identity import LAX_FORM, LEGACY_LAX_FORM, identity_differences

    # an older LaX record: no lax_form (BOOST's earlier, ungated LaX), no rope_theta (written before it was kept)
    saved = {"flavor": "debug", "linear": "lax", "rank": 64}
    wanted = {**saved, "lax_form": LAX_FORM, "rope_theta": 500000.0, "tokenizer": "abc"}
    assert identity_differences(saved, wanted) == [
        ("lax_form", LEGACY_LAX_FORM, LAX_FORM),
        ("rope_theta", ModelArgs.rope_theta, 500000.0),
    ]
    # at its default a missing field is no difference; one with no default (the tokenizer) is left to
    # unrecorded_fields' warning
    at_defaults = {**wanted, "lax_form": LEGACY_LAX_FORM, "rope_theta": ModelArgs.rope_theta}
    assert identity_differences(saved, at_defaults) == []

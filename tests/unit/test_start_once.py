"""The trainer's start-up reads its job and writes nothing back; the checkpoint manager is built once.

``prepare_resume`` derives what to load into a ``ResumePlan``; torchtitan's own ``CheckpointManager``,
adopted as ``BoostCheckpointManager``, loads that plan. Real DCP folders, one process, no process group.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn

from boost.training.rules import MODEL_NAME
from torchtitan_ext.guards.checkpoint_guard import ResumePlan, prepare_resume
from torchtitan_ext.preflight import check_job

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "train_configs" / "debug.toml")


class Held:
    """A stateful part of the trainer (dataloader, optimizer, train state) as DCP sees it: a dict."""

    def __init__(self, **state: torch.Tensor) -> None:
        self.state = state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.state)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.state = dict(state)


def _save_step(checkpoint: Path, step: int, weight: float, dataloader: bool = True) -> None:
    """An intact step folder written at one data-parallel rank, as torchtitan lays it out (no identity);
    ``dataloader``: with its data position (torchtitan leaves it out of a run with no stateful dataloader)."""
    linear = {"weight": torch.full((2, 2), weight), "bias": torch.zeros(2)}
    dcp.save(
        {
            **linear,
            **({"dataloader": {"dp_rank_0": torch.tensor([step])}} if dataloader else {}),
            "optimizer": {"m": torch.ones(1)},
            "lr_scheduler": {"last": torch.ones(1)},
            "train_state": {"step": torch.tensor(step)},
        },
        checkpoint_id=checkpoint / f"step-{step}",
        no_dist=True,
    )


def _job(dump: Path, world_size: int, *overrides: str):
    return check_job(["--job.config_file", CONFIG, "--job.dump_folder", str(dump), *overrides], world_size)


def test_prepare_resume_plans_the_load_and_leaves_the_job_as_read(tmp_path):
    checkpoint = tmp_path / "out" / "checkpoint"
    _save_step(checkpoint, 4, 1.0)
    (checkpoint / "step-6").mkdir()  # a save that never finished: no .metadata
    # two processes at dp_shard = -1: data-parallel degree 2, the checkpoint's dataloader holds one rank
    job = _job(tmp_path / "out", 2)
    read = copy.deepcopy(job)
    plan = prepare_resume(job, 2)
    assert job == read and job.checkpoint.load_step == -1 and job.checkpoint.exclude_from_loading == []
    assert (plan.step, plan.skip_dataloader) == (4, True)
    assert [w.split(":")[0] for w in plan.warnings] == [
        f"skipping checkpoint {checkpoint / 'step-6'}",
        "resuming from the newest checkpoint to resume from, step 4",
        "warning",
        "warning",
    ]
    assert "records no model identity" in plan.warnings[2]
    assert "data-parallel degree changed from 1 (checkpoint) to 2" in plan.warnings[3]
    # the same degree: the data position resumes; a fresh folder: nothing of the run to load
    assert prepare_resume(_job(tmp_path / "out", 1), 1).skip_dataloader is False
    assert prepare_resume(_job(tmp_path / "fresh", 1), 1) == ResumePlan()


def test_a_checkpoint_without_a_data_position_resumes_at_any_data_parallel_degree(tmp_path):
    # no dataloader state saved: no degree it was saved at, nothing to skip and nothing changed to warn of
    _save_step(tmp_path / "out" / "checkpoint", 4, 1.0, dataloader=False)
    plan = prepare_resume(_job(tmp_path / "out", 2), 2)
    assert (plan.step, plan.skip_dataloader) == (4, False)
    assert not [w for w in plan.warnings if "data-parallel degree" in w], plan.warnings


def test_torchtitans_manager_is_adopted_and_loads_the_plan_without_the_data_position(tmp_path):
    from torchtitan.components.checkpoint import CheckpointManager

    from torchtitan_ext.guards.checkpoint_manager import BoostCheckpointManager

    checkpoint = tmp_path / "out" / "checkpoint"
    _save_step(checkpoint, 4, 1.0)
    _save_step(checkpoint, 8, 2.0)  # the newest, which torchtitan would load by itself
    job = _job(tmp_path / "out", 1, "--checkpoint.keep_latest_k", "3")
    read = copy.deepcopy(job)
    model = nn.Linear(2, 2)
    dataloader, train_state = Held(dp_rank_0=torch.tensor([-1])), Held(step=torch.tensor(0))
    built = CheckpointManager(
        dataloader=dataloader,
        model_parts=[model],
        optimizers=Held(m=torch.zeros(1)),
        lr_schedulers=Held(last=torch.zeros(1)),
        states={"train_state": train_state},
        checkpoint_config=job.checkpoint,
        sd_adapter=None,
        base_folder=job.job.dump_folder,
    )
    purge_thread = built.purge_thread
    try:
        manager = BoostCheckpointManager.adopt(
            built, model_identity=None, resume_plan=ResumePlan(step=4, skip_dataloader=True)
        )
        assert manager is built and type(manager) is BoostCheckpointManager
        assert manager.purge_thread is purge_thread and purge_thread.is_alive()  # started once, still the one
        assert manager.load(step=job.checkpoint.load_step)  # as torchtitan's train() calls it: -1
        assert torch.equal(model.weight.detach(), torch.full((2, 2), 1.0))  # step 4, the plan's, not step 8
        assert train_state.state["step"].item() == 4
        assert dataloader.state["dp_rank_0"].item() == -1  # the data position stays where it was
        assert job == read and job.checkpoint.exclude_from_loading == []
    finally:
        built.close()
    assert not purge_thread.is_alive()


def test_full_activation_checkpointing_gets_a_copy_of_the_section(tmp_path):
    from torchtitan_ext.infra.parallelize import parallelize_boost

    job = _job(tmp_path / "out", 1, "--boost.activation_checkpoint", "full")
    read = copy.deepcopy(job)
    from torchtitan_ext.model import JobModelArgs, JobTransformer

    args = JobModelArgs.from_flavor(job.model.flavor)
    args.update_from_config(job)
    model = JobTransformer(args)
    parallelize_boost(model, _one_device_parallel_dims(), job)
    assert job == read and job.activation_checkpoint.mode == "none"  # as the preflight requires it
    assert any(type(m).__name__ == "CheckpointWrapper" for m in model.modules())  # torchtitan's full AC


def _one_device_parallel_dims():
    from torchtitan.distributed import ParallelDims

    return ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=1)


def test_the_model_name_is_stated_once():
    from boost.after_training.hf.configuration_boost import BoostConfig
    from boost.after_training.hf_folder import MODEL_TYPE

    # the remote code runs without BOOST installed, so it spells the name out: it must agree
    assert BoostConfig.model_type == MODEL_TYPE == MODEL_NAME

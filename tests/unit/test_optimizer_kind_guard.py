"""A resume whose checkpoint holds another optimizer's state (LORO's factor groups against torch's Adam/AdamW)
is refused before any process starts: DCP would stop every rank on a missing key or a metadata type."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed.checkpoint as dcp

from torchtitan_ext.guards.checkpoint_guard import (
    CheckpointRefused,
    check_optimizer_kind,
    saved_optimizer_kind,
)


def _save(folder, group_key: str):
    dcp.save(
        {"optimizer.param_groups.w." + group_key: torch.zeros(1), "model.w": torch.zeros(2)},
        checkpoint_id=folder,
    )
    return folder


def _job(name: str):
    return SimpleNamespace(optimizer=SimpleNamespace(name=name))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_saved_optimizer_is_told_and_another_refused(tmp_path):
    loro, adam = _save(tmp_path / "loro", "factors"), _save(tmp_path / "adam", "amsgrad")
    assert saved_optimizer_kind(loro) == "LORO" and saved_optimizer_kind(adam) == "Adam/AdamW"
    check_optimizer_kind(loro, _job("LORO"))
    check_optimizer_kind(adam, _job("Adam"))
    check_optimizer_kind(adam, _job("AdamW"))
    with pytest.raises(
        CheckpointRefused, match="holds LORO's optimizer state, and this job's optimizer.name = 'AdamW'"
    ):
        check_optimizer_kind(loro, _job("AdamW"))
    with pytest.raises(CheckpointRefused, match="--checkpoint.exclude_from_loading optimizer,lr_scheduler"):
        check_optimizer_kind(adam, _job("LORO"))

"""The learning-rate schedule across pipeline stages whose optimizers hold different numbers of param groups.

A LORO stage holding only the embedding (an interleaved schedule, one layer a stage) has one group, a
block's stage two; torchtitan saves the first stage's scheduler and loads it into every stage, which failed
to load where the group counts differ. Resumed, every stage follows the uninterrupted schedule.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torchtitan.config.job_config import LRScheduler

from torchtitan_ext.config import CosineRestartScheduler
from torchtitan_ext.optimizer import build_boost_lr_schedulers


@dataclasses.dataclass
class Schedule(LRScheduler, CosineRestartScheduler):  # torchtitan's section with BOOST's fields, as merged
    pass


def _stages(one_group_first: bool) -> list[torch.optim.Optimizer]:
    w = [torch.nn.Parameter(torch.zeros(2)) for _ in range(3)]
    embedding = torch.optim.AdamW([w[0]], lr=1e-3)  # AdamW alone
    block = torch.optim.AdamW([{"params": [w[1]]}, {"params": [w[2]]}], lr=1e-3)  # AdamW and the factors
    return [embedding, block] if one_group_first else [block, embedding]


def _step(schedulers) -> None:
    for scheduler in schedulers.schedulers:
        scheduler.optimizer.step()  # no gradients: nothing moves, but the scheduler runs in the trainer's order
    schedulers.step()


def _lrs(schedulers) -> list[list[float]]:
    return [[group["lr"] for group in s.optimizer.param_groups] for s in schedulers.schedulers]


@pytest.mark.parametrize("decay_type", ["cosine_restart", "linear"])
@pytest.mark.parametrize("one_group_first", [True, False], ids=["saved_from_one_group", "saved_from_two"])
def test_stages_of_one_and_two_param_groups_resume_the_schedule(decay_type, one_group_first):
    config = Schedule(warmup_steps=3, decay_type=decay_type, restart_every=5, restart_warmup_steps=2)
    straight = build_boost_lr_schedulers(_stages(one_group_first), config, 20)
    for _ in range(7):
        _step(straight)
    resumed = build_boost_lr_schedulers(_stages(one_group_first), config, 20)
    resumed.load_state_dict(straight.state_dict())  # the first stage's state, into both
    for _ in range(4):
        _step(straight)
        _step(resumed)
        assert _lrs(resumed) == _lrs(straight)
    assert len(set(_lrs(straight)[1])) == 1 and _lrs(straight)[1][0] != 1e-3  # scheduled, one lr a stage

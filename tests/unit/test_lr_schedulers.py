"""The learning-rate schedule across pipeline stages whose optimizers hold different numbers of param groups.

A LORO stage holding only the embedding (an interleaved schedule, one layer a stage) has one group, a
block's stage two; torchtitan saves the first stage's scheduler and loads it into every stage, which failed
to load where the group counts differ. Resumed, every stage follows the uninterrupted schedule.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torchtitan.config.job_config import LRScheduler

from boost.training.optim import cosine_restart_factor
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


EPS = 1e-6
# the authors' cosine_restart (LORO-main peft_pretraining/training_utils.py), worked by hand for 20 steps, a
# 6-step warmup, a restart every 4 with a 2-step re-warmup, min_lr_ratio 0.1, no adjust: the peak is 1; a
# restart inside the first warmup re-warms from eps to the warmup's line at the restart (step 4: 4/6·0.9 + 0.1)
# unless lr_jag_after_warmup, which keeps the warmup's line; after it, restarts re-warm to the cosine's value
_AFTER_RESTART_8 = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (8 - 6) / 14))
COSINE_RESTART_BY_HAND = {
    False: {
        0: 0.1,
        3: 0.55,
        4: EPS,
        5: 0.5 * (0.7 - EPS) + EPS,
        6: 1.0,
        8: EPS,
        9: 0.5 * (_AFTER_RESTART_8 - EPS) + EPS,
    },
    True: {0: 0.1, 3: 0.55, 4: 0.7, 5: 0.85, 6: 1.0, 8: EPS, 9: 0.5 * (_AFTER_RESTART_8 - EPS) + EPS},
}


@pytest.mark.parametrize("jag_after_warmup", [False, True], ids=["rewarm-in-warmup", "jag-after-warmup"])
def test_cosine_restart_re_warms_inside_the_first_warmup_unless_jagged(jag_after_warmup):
    got = {
        step: cosine_restart_factor(
            step,
            total_steps=20,
            warmup_steps=6,
            restart_every=4,
            restart_warmup_steps=2,
            min_lr_ratio=0.1,
            jag_after_warmup=jag_after_warmup,
        )
        for step in COSINE_RESTART_BY_HAND[jag_after_warmup]
    }
    assert got == pytest.approx(COSINE_RESTART_BY_HAND[jag_after_warmup], rel=1e-12, abs=1e-15)

"""A log's time and throughput cover the steps since the last log, however many: a checkpoint's step and the
last step are log steps between ``metrics.log_freq``'s (torchtitan divides by ``log_freq``), and a
validation between log steps keeps its own tokens and time (torchtitan's took the training's and reset them).

Read without timing the machine: ``throughput(tps) · end_to_end(s)`` is the tokens of one step exactly
(the interval's tokens over its time, times that time over its steps)."""

from __future__ import annotations

import pytest

from tests.end_to_end.test_loss_metrics import TOKENS_A_STEP, tensorboard
from tests.trainer import train


@pytest.mark.slow
def test_each_log_times_the_steps_since_the_last(tmp_path):
    train(
        tmp_path,
        "--metrics.enable_tensorboard",
        "--metrics.log_freq", "10",
        "--checkpoint.interval", "11",  # log steps 1, 10, 11 (a checkpoint's) and 12 (the last)
        "--validation.freq", "3",  # validations at 3, 6 and 9, none of them a log step
        steps=12,
    )  # fmt: skip
    tb = tensorboard(tmp_path / "out" / "tb")
    tps, seconds = tb["throughput(tps)"], tb["time_metrics/end_to_end(s)"]
    assert sorted(tps) == [1, 10, 11, 12], tps
    for step in tps:
        # one read of the clock at the log gives both: their product is the tokens of one step
        assert tps[step] * seconds[step] == pytest.approx(TOKENS_A_STEP, rel=1e-3), (step, tps, seconds)
    assert sorted(tb["validation_metrics/throughput(tps)"]) == [1, 3, 6, 9, 12]

"""``BoostMetricsProcessor``'s log steps and intervals, in process: a checkpoint's step and the last step are log
steps where checkpoints are saved; a validation between log steps reports its own tokens and time, and the
training's interval resumes after it less the validation's time (the end-to-end reading is
tests/end_to_end/test_log_timing.py, whose throughput × time product cannot see the interval's length)."""

from __future__ import annotations

from types import SimpleNamespace

from torchtitan.components.metrics import MetricsProcessor

from torchtitan_ext import metrics
from torchtitan_ext.metrics import BoostMetricsProcessor


def test_a_validation_takes_its_own_tokens_and_time_and_the_training_interval_skips_it(monkeypatch):
    seen = {}

    def torchtitan_log_validation(self, loss, step, extra_metrics=None):  # reads and resets the counters
        seen.update(tokens=self.ntokens_since_last_log, since=self.time_last_log)
        self.ntokens_since_last_log, self.time_last_log = 0, 100.0

    monkeypatch.setattr(MetricsProcessor, "log_validation", torchtitan_log_validation)
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: 100.0)
    processor = BoostMetricsProcessor.__new__(BoostMetricsProcessor)  # the counters alone: no job to build
    processor.ntokens_since_last_log, processor.time_last_log = 512, 90.0  # training since 90 s, 512 tokens
    processor.log_validation(1.0, 3, tokens=64, seconds=4.0)  # a validation of 64 tokens from 96 s to 100 s
    assert seen == {"tokens": 64, "since": 96.0}
    # at 100 s the training has run 6 s of its own (90 to 96): its clock moves on by the validation's 4 s
    assert (processor.ntokens_since_last_log, processor.time_last_log) == (512, 94.0)


def _processor(enable: bool) -> BoostMetricsProcessor:
    processor = BoostMetricsProcessor.__new__(BoostMetricsProcessor)  # the fields should_log reads alone
    processor.job_config = SimpleNamespace(metrics=SimpleNamespace(log_freq=10))
    processor._checkpoint = SimpleNamespace(enable=enable, interval=3)
    processor._last_step = 12
    return processor


def test_a_checkpoint_step_and_the_last_step_are_log_steps_only_where_checkpoints_are_saved():
    # torchtitan logs step 1 and every log_freq-th; a save (every interval-th and the last) reads the
    # gradient norm there for the non-finite guard, so it is a log step too, and only where saves happen
    assert [s for s in range(1, 13) if _processor(True).should_log(s)] == [1, 3, 6, 9, 10, 12]
    assert [s for s in range(1, 13) if _processor(False).should_log(s)] == [1, 10]

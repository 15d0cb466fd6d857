"""A run's log says one thing: what computes, no hardware errors that are not, where start-up went, and
how it ends.

One short run through ``run_train.sh`` serves every assertion: NGPU=2 on CPU (gloo), TP 2 with no data
parallelism, bf16 — the layout where torchtitan alone trains fp32 and says mixed precision is off,
and BOOST's FSDP2 at shard degree 1 computes in bf16 — and a CPU run, where torchtitan's peak-FLOPs
lookup ran ``lspci``.
"""

from __future__ import annotations

import re

import pytest

from tests.trainer import run_train

PHASES = ("imports", "config", "tokenizer", "data", "model", "compile", "checkpoint load", "step 1", "other")


@pytest.mark.slow
def test_a_tp_bf16_cpu_run_logs_what_computes_and_its_start_up(tmp_path):
    log = run_train(
        tmp_path,
        "--parallelism.tensor_parallel_degree", "2",
        "--parallelism.data_parallel_shard_degree", "1",
        "--training.mixed_precision_param", "bfloat16",
        "--checkpoint.no-enable",
        "--validation.no-enable",
        ngpu=2,
        steps=1,
    )  # fmt: skip
    rank1 = "".join(p.read_text() for p in (tmp_path / "out-rank-logs").rglob("1/std*.log"))
    assert "BOOST computes in bfloat16 (FSDP2, shard degree 1)" in log
    # torchtitan's own contrary lines, replaced by what computes
    assert "Mixed precision training: BOOST computes in bfloat16 (FSDP2, shard degree 1)" in log
    for said in (log, rank1):
        assert "Mixed precision training with TP or PP is only supported" not in said
        assert "Mixed precision training is disabled" not in said
        assert "lspci" not in said  # no hardware probe on a CPU
    assert "Peak FLOPs: CPU" in log and "MFU uses the A100's" in log

    # the start-up line, after step 1, in every rank's log
    for said in (log, rank1):
        line = re.search(r"BOOST start-up: (.*); to step 1 ([\d.]+) s from process start", said)
        assert line, said[-3000:]
        spent = dict(re.fullmatch(r"(.+) ([\d.]+) s", part).groups() for part in line.group(1).split(", "))
        assert tuple(spent) == PHASES
        seconds = {phase: float(value) for phase, value in spent.items()}
        total = float(line.group(2))
        # each phase is a part of the whole (rounded to 0.1 s each); the imports come first and take time
        assert all(value >= 0 for value in seconds.values()) and seconds["imports"] > 0
        assert abs(sum(seconds.values()) - total) <= 0.05 * len(PHASES) + 1e-6
        assert seconds["compile"] == 0 and seconds["checkpoint load"] == 0  # eager, no checkpoint
    assert log.index("step:  1") < log.index("BOOST start-up:")
    # the end: a barrier, not torchtitan's 2-second sleep on rank 0 (nor its line announcing one)
    assert "Training completed" in log and "Sleeping 2 seconds" not in log

"""A run's log says one thing: what computes, no hardware errors that are not, no warning that does not
apply to the run, where start-up went, and how it ends.

One short run through ``run_train.sh`` serves the first test: NGPU=2 on CPU (gloo), TP 2 with no data
parallelism, bf16 — the layout where torchtitan alone trains fp32 and says mixed precision is off,
and BOOST's FSDP2 at shard degree 1 computes in bf16 — and a CPU run, where torchtitan's peak-FLOPs
lookup ran ``lspci``. The default job's run (``default_run``, README command 1's job) serves the second:
every warning in its log is one that applies to it, for a reason written down here.
"""

from __future__ import annotations

import re

import pytest

from tests.trainer import losses, run_train

# Every warning the default job's log may hold, each with why it applies to the run. A warning that
# does not apply is answered where it arises (torchtitan_ext/start_warnings.py, the preflight's
# job_warnings), never added here; a new one fails the test until it is one or the other.
ALLOWED_WARNINGS: dict[str, str] = {
    r"Warmup steps \(\d+\) exceed total steps \(\d+\)\. Adjusting warmup steps to \d+\.": (
        "torchtitan shortens lr_scheduler.warmup_steps to fit a run shorter than its warmup: true of the "
        "run, and the user's to change (the default job's 300 steps never trigger it)"
    ),
}
# torchtitan's logger at WARNING, Python's warnings module, the preflight's one-line warnings
WARNING_LINE = re.compile(r" - WARNING - |\b\w*Warning: |^BOOST warning: ")


def warning_lines(log: str) -> list[str]:
    """The lines of ``log`` that warn, as each source writes them."""
    return [line for line in log.splitlines() if WARNING_LINE.search(line.removeprefix("[rank0]:"))]


def unexplained(lines: list[str]) -> list[str]:
    return [line for line in lines if not any(re.search(p, line) for p in ALLOWED_WARNINGS)]


@pytest.mark.slow
@pytest.mark.compat  # a torch release deprecates what torchtitan 0.2.2 calls (2.14: _set_pg_timeout)
def test_every_warning_of_the_default_run_applies_to_it(default_run):
    warned = warning_lines(default_run.log)
    assert not unexplained(warned), "\n".join(unexplained(warned))
    # each warning this log held before its cause was answered (torchtitan_ext/start_warnings.py)
    for gone in (
        "HF assets path",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "autocast",
        "set_vital",
        "lspci",
        "_set_pg_timeout",
    ):
        assert gone not in default_run.log, gone
    assert "Training completed" in default_run.log  # the log read is a whole run's


def test_the_warning_reader_sees_each_kind_of_warning_line():
    # negative control for the test above: a line of each source is read as a warning, and held to the list
    log = (
        "[rank0]:[titan] 2026-11-26 08:16:07,516 - root - WARNING - HF assets path  does not exist!\n"
        "[rank0]:/x/stateful_dataloader.py:379: UserWarning: 'set_vital' is deprecated, please do not call\n"
        "BOOST warning: optimizer.loro_refresh_freq = 0: the Adam moments outlive LORO's exact steps\n"
        "[rank0]:[titan] 2026-11-26 08:16:08,841 - root - WARNING - Warmup steps (30) exceed total steps "
        "(12). Adjusting warmup steps to 12.\n"
        "[rank0]:[titan] 2026-11-26 08:16:08,841 - root - INFO - Training starts at step 1\n"
    )
    warned = warning_lines(log)
    assert len(warned) == 4
    assert unexplained(warned) == warned[:3]


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


@pytest.mark.slow
def test_a_pipelined_runs_console_shows_the_rank_holding_the_loss(tmp_path):
    # torchtitan logs the loss on the last stage's ranks only (-1 on the others) and warns where LOG_RANK
    # leaves them out; unset, the launcher shows rank 0 and the last stage's first rank (rank 2 of pp 2 ×
    # FSDP 2). With FSDP, torchtitan's -1 was summed over the data-parallel ranks (-2.0 on rank 0's line).
    steps = 2
    log = run_train(
        tmp_path,
        "--parallelism.pipeline_parallel_degree", "2",
        "--parallelism.data_parallel_shard_degree", "2",
        "--checkpoint.no-enable",
        "--validation.steps", "1",
        ngpu=4,
        steps=steps,
        log_rank=None,
    )  # fmt: skip
    by_rank = {r: "\n".join(re.findall(rf"^\[rank{r}\]:(.*)$", log, re.M)) for r in (0, 2)}
    assert "Training starts at step 1" in by_rank[0], log[-3000:]
    assert losses(by_rank[2]).keys() == set(range(1, steps + 1)), log[-3000:]
    validated = {r: re.findall(r"validate step:\s+\d+\s+\S*loss:\s+(-?[\d.]+)", by_rank[r]) for r in (0, 2)}
    assert validated[2] and all(float(v) > 0 for v in validated[2]), log[-3000:]
    # the ranks without the loss say torchtitan's placeholder, in training and validation alike
    assert re.search(r"(?<!validate )step:\s+1\s+\S*loss: -1\.0", by_rank[0]), log[-3000:]
    assert len(validated[0]) == len(validated[2]) and all(float(v) == -1 for v in validated[0]), log[-3000:]
    assert "Pipeline Parallel loss is not visible" not in log

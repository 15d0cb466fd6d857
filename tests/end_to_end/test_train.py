"""Real torchtitan training steps on CPU (gloo): the default job through ``run_train.sh`` (the session's
``default_run``), and its checkpoint resumed at other layouts. Every scheme × layout × compile × AC
combination, and compiling with profiling on: tests/end_to_end/test_feature_matrix.py."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.end_to_end.default_run import DEFAULT_RUN, DEFAULT_STEPS
from tests.trainer import losses, train

# bf16 against the float32 curve (tests/end_to_end/test_feature_matrix.py's bound)
BF16_RTOL = 2e-3


@pytest.mark.slow
@pytest.mark.compat
def test_default_job_trains_and_writes_checkpoints_and_tensorboard(default_run):
    # (that a second start resumes onto the same curve: test_checkpoint_identity.py's resume test)
    straight = default_run.losses
    assert straight[DEFAULT_STEPS] < straight[1] - 1.0, straight  # loss falls clearly
    assert (default_run.tmp / "out" / "checkpoint" / f"step-{DEFAULT_STEPS}").is_dir()
    events = list((default_run.tmp / "out" / "tb").rglob("events.out.tfevents.*"))
    assert events, "no tensorboard event file"

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"loss_metrics/global_avg_loss", "throughput(tps)", "mfu(%)"} <= tags, tags


def _resume(
    tmp_path,
    checkpoint,
    folder: str,
    *overrides: str,
    ngpu: int,
    steps: int = DEFAULT_STEPS + 3,
    log_rank: int = 0,
) -> str:
    """The default job resumed from a copy of ``checkpoint`` in ``tmp_path/folder``: rank ``log_rank``'s log."""
    shutil.copytree(checkpoint, tmp_path / folder / "checkpoint")
    return train(tmp_path, *DEFAULT_RUN, *overrides, ngpu=ngpu, steps=steps, folder=folder, log_rank=log_rank)


def _close(a: dict[int, float], b: dict[int, float], rtol: float) -> None:
    assert a.keys() == b.keys() and a, (a, b)
    for step in a:
        assert abs(a[step] - b[step]) <= rtol * abs(b[step]), f"step {step}: {a[step]} vs {b[step]}"


@pytest.mark.slow
@pytest.mark.compat
def test_one_process_checkpoint_resumes_as_fsdp_and_fsdp_times_tp_on_one_curve(default_run, tmp_path):
    # 1 process -> fsdp=2 and -> fsdp=2 x tp=2: DCP reshards model and optimizer; the data position
    # cannot follow a new data-parallel degree, so both restart their data shards (and warn). Both
    # then have DP degree 2 and see the same samples: their curves must agree to f32 rounding.
    one = default_run.losses
    checkpoint = default_run.tmp / "out" / "checkpoint"
    fsdp_log = _resume(tmp_path, checkpoint, "a", "--parallelism.data_parallel_shard_degree", "2", ngpu=2)
    fsdp_tp = _resume(
        tmp_path,
        checkpoint,
        "b",
        "--parallelism.data_parallel_shard_degree",
        "2",
        "--parallelism.tensor_parallel_degree",
        "2",
        ngpu=4,
    )
    assert "Applied FSDP to the model" in fsdp_tp and "Applied btp tensor parallelism" in fsdp_tp
    for log in (fsdp_log, fsdp_tp):
        assert (
            f"Training starts at step {DEFAULT_STEPS + 1}" in log
            and "data-parallel degree changed from 1 (checkpoint) to 2" in log
        )
    fsdp = losses(fsdp_log)
    _close(losses(fsdp_tp), fsdp, 1e-5)
    assert fsdp[DEFAULT_STEPS + 1] < one[1] - 0.5, (one, fsdp)  # the trained weights, not a fresh model


@pytest.mark.slow
def test_a_checkpoint_crosses_into_and_out_of_a_pipeline_on_one_curve(default_run, tmp_path):
    # 1 process -> pp=2 (two stages, 1F1B; each rank loads its stage's parameters and optimizer state) ->
    # 1 process again from the pipeline's own checkpoint: the data-parallel degree stays 1, so every run
    # sees the same samples, and the curve is one process's straight on to f32 rounding
    checkpoint = default_run.tmp / "out" / "checkpoint"
    straight = losses(_resume(tmp_path, checkpoint, "straight", ngpu=1, steps=DEFAULT_STEPS + 3))
    pp = ["--parallelism.pipeline_parallel_degree", "2"]
    piped_log = _resume(tmp_path, checkpoint, "piped", *pp, ngpu=2, steps=DEFAULT_STEPS + 2, log_rank=1)
    assert (
        "Using pipeline schedule 1F1B" in piped_log
        and f"Training starts at step {DEFAULT_STEPS + 1}" in piped_log
    )
    out_of_pipe = losses(_resume(tmp_path, tmp_path / "piped" / "checkpoint", "out", ngpu=1))
    assert min(out_of_pipe) == DEFAULT_STEPS + 3, out_of_pipe  # it loaded the pipeline's last save
    _close({**losses(piped_log), **out_of_pipe}, straight, 1e-5)


# fsdp=2 × tp=2
FSDP_TP = ["--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2"]
# ... compiled (aot_eager: the CPU suite's compile backend), as SimpleFSDP needs: it traces its gathers and
# reductions into the compiled blocks. The FSDP2 runs it is held to run eagerly (compiled, their losses
# differ by rounding alone: the feature matrix's compiled rows).
COMPILED_FSDP_TP = [*FSDP_TP, "--compile.enable", "--compile.backend", "aot_eager"]


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.compat
def test_simple_fsdp_resumes_and_hands_its_checkpoint_to_fsdp2_on_one_curve(default_run, tmp_path):
    # The one-process checkpoint (step 10) resumed at fsdp=2 × tp=2 under SimpleFSDP and under FSDP2:
    # DCP reshards it into either's 2-D DTensors, and both train on one curve. SimpleFSDP's own
    # checkpoint (step 12, its data position at DP 2) resumed under FSDP2 continues FSDP2's curve.
    checkpoint = default_run.tmp / "out" / "checkpoint"
    simple_log = _resume(
        tmp_path,
        checkpoint,
        "simple",
        *COMPILED_FSDP_TP,
        "--boost.fsdp",
        "simple_fsdp",
        ngpu=4,
        steps=DEFAULT_STEPS + 2,
    )
    fsdp2 = losses(_resume(tmp_path, checkpoint, "fsdp2", *FSDP_TP, ngpu=4))
    assert "Applied SimpleFSDP" in simple_log and f"Training starts at step {DEFAULT_STEPS + 1}" in simple_log
    _close(losses(simple_log), {s: fsdp2[s] for s in (DEFAULT_STEPS + 1, DEFAULT_STEPS + 2)}, 1e-5)
    assert (tmp_path / "simple" / "checkpoint" / f"step-{DEFAULT_STEPS + 2}").is_dir()

    handed_log = _resume(tmp_path, tmp_path / "simple" / "checkpoint", "handed", *FSDP_TP, ngpu=4)
    assert "Applied FSDP to the model" in handed_log
    assert f"Training starts at step {DEFAULT_STEPS + 3}" in handed_log
    _close(losses(handed_log), {DEFAULT_STEPS + 3: fsdp2[DEFAULT_STEPS + 3]}, 1e-5)


@pytest.mark.slow
def test_one_device_bf16_trains_under_autocast_near_the_float32_curve(default_run, tmp_path):
    """The 1B trainer's path on one GPU: no FSDP, so bf16 is torchtitan's autocast. On the H100 the 1B
    CoLA stopped in its first backward (the batched up-projection's float32 weight met a bf16 gradient);
    here it trains, close to the float32 curve and not on it (it computed in bf16)."""
    log = train(tmp_path, *DEFAULT_RUN, "--training.mixed_precision_param", "bfloat16", steps=4)
    assert "BOOST computes in bfloat16 (torchtitan's autocast" in log
    got = losses(log)
    want = {step: default_run.losses[step] for step in got}
    assert got.keys() == set(range(1, 5)), got
    assert all(abs(got[s] - want[s]) <= BF16_RTOL * abs(want[s]) for s in got), (got, want)
    assert any(got[s] != want[s] for s in got), (got, want)


def _validation_losses(log: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"validate step:\s+(\d+)\s+\S*loss:\s+([\d.]+)", log)}


@pytest.mark.slow
def test_context_parallel_checkpoints_reshard_across_cp_degrees_and_validate_on_one_curve(
    default_run, tmp_path
):
    # The one-process checkpoint (step 10) resumed at cp 2, whose own checkpoint (step 12) resumes at cp 4:
    # DCP reshards FSDP's shards over dp_shard × cp, the data position is kept (the data-parallel degree stays
    # 1: CP ranks read the same samples), and every step and validation is the one-process run's. torchtitan's
    # validator reported cp× the loss under CP (it counted a rank's share of the tokens: BoostValidator).
    validation = ("--validation.enable", "--validation.freq", "2")
    checkpoint = default_run.tmp / "out" / "checkpoint"
    one = _resume(tmp_path, checkpoint, "one", *validation, ngpu=1, steps=DEFAULT_STEPS + 3)
    cp2 = _resume(
        tmp_path,
        checkpoint,
        "cp2",
        *validation,
        "--parallelism.context_parallel_degree",
        "2",
        ngpu=2,
        steps=12,
    )
    cp4 = _resume(
        tmp_path, tmp_path / "cp2" / "checkpoint", "cp4", "--parallelism.context_parallel_degree", "4", ngpu=4
    )
    assert "Applied context parallelism (degree 2) to sdpa attention: ring attention" in cp2
    assert f"Training starts at step {DEFAULT_STEPS + 3}" in cp4 and "degree changed" not in cp4
    want = losses(one)
    _close(losses(cp2), {s: want[s] for s in (11, 12)}, 1e-5)
    _close(losses(cp4), {13: want[13]}, 1e-5)
    _close(_validation_losses(cp2), {12: _validation_losses(one)[12]}, 1e-5)


@pytest.mark.slow
def test_gradient_accumulation_trains_as_the_whole_batch_at_once(tmp_path):
    # two micro-batches of 4 windows a step (global batch 8) read the windows one batch of 8 reads, in order:
    # the loss is one mean over the step's tokens either way, so the curves agree to float32 reassociation
    common = ("--checkpoint.no-enable", "--validation.no-enable")
    whole = train(tmp_path, *common, "--training.local_batch_size", "8", steps=3, folder="whole")
    accumulated = train(
        tmp_path, *common, "--training.local_batch_size", "4", "--training.global_batch_size", "8", steps=3,
        folder="accumulated",
    )  # fmt: skip
    assert "global batch size 8, gradient accumulation steps 2" in accumulated, accumulated[-3000:]
    _close(losses(accumulated), losses(whole), 1e-4)

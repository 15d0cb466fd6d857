"""The preflight's warnings (``torchtitan_ext.preflight.job_warnings``): jobs that run as asked but not
as their TOML suggests, each said in one line before any work.

- LORO keeping Adam moments across an exact step (tests/unit/test_loro_golden.py shows the runs part);
  the authors' recipes (refresh at every exact step) are not warned about.
- bf16 compute on a machine with no GPU (bench/results/cpu_bf16.md); float32 is not.
"""

from __future__ import annotations

import warnings

import pytest

from tests.trainer import ROOT, stderr_lines
from torchtitan_ext.cpu import on_cpu
from torchtitan_ext.preflight import check_job
from torchtitan_ext.preflight.check import preflight
from torchtitan_ext.preflight.job_warnings import CPU_BF16_RESULT, JobWarning

DEBUG = str(ROOT / "train_configs" / "debug.toml")
LORO_RECIPES = sorted((ROOT / "train_configs" / "loro").glob("*.toml"))
# LORO on the default job: svd, an exact step every 4 steps
LORO = ["--optimizer.name", "LORO", "--boost.linear", "svd", "--optimizer.loro_freq", "4"]


def job_warnings_of(argv: list[str], world_size: int = 1) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_job(argv, world_size)
    return [str(w.message) for w in caught if issubclass(w.category, JobWarning)]


def loro_lines(said: list[str]) -> list[str]:
    return [line for line in said if line.startswith("optimizer.loro_refresh_freq")]


@pytest.mark.parametrize("refresh", [4, 2, 1], ids=["at-every-exact-step", "twice-a-cycle", "every-step"])
def test_loro_refreshing_at_every_exact_step_is_not_warned_about(refresh):
    argv = ["--job.config_file", DEBUG, *LORO, "--optimizer.loro_refresh_freq", str(refresh)]
    assert loro_lines(job_warnings_of(argv)) == []


@pytest.mark.parametrize("path", LORO_RECIPES, ids=lambda p: p.stem)
def test_the_loro_authors_recipes_are_not_warned_about(path):
    assert loro_lines(job_warnings_of(["--job.config_file", str(path)], world_size=2)) == []


@pytest.mark.parametrize(
    "refresh, cadence",
    [(0, "0 never refreshes them"), (8, "8 does not divide loro_freq = 4"), (3, "3 does not divide")],
    ids=["never", "every-other-exact-step", "off-cycle"],
)
def test_loro_keeping_moments_across_an_exact_step_is_one_line_saying_what_it_means(refresh, cadence):
    argv = ["--job.config_file", DEBUG, *LORO, "--optimizer.loro_refresh_freq", str(refresh)]
    (line,) = loro_lines(job_warnings_of(argv))
    assert line.startswith(f"optimizer.loro_refresh_freq = {refresh}: the Adam moments outlive LORO's exact ")
    assert cadence in line and "after step 4 they are moments of the old factor basis" in line
    assert "up to column signs, which kept moments do not follow" in line
    assert line.endswith("Their recipes refresh at every exact step: loro_refresh_freq = 4")
    assert "\n" not in line


def test_loro_without_an_exact_step_in_the_run_is_not_warned_about():
    argv = ["--job.config_file", DEBUG, *LORO, "--optimizer.loro_refresh_freq", "0", "--training.steps", "3"]
    assert loro_lines(job_warnings_of(argv)) == []


def test_bf16_is_warned_about_where_there_is_no_gpu_and_float32_is_not():
    bf16 = job_warnings_of(["--job.config_file", DEBUG, "--training.mixed_precision_param", "bfloat16"])
    if on_cpu():
        (line,) = bf16
        assert line.startswith("training.mixed_precision_param = 'bfloat16' on a machine with no GPU: ")
        assert CPU_BF16_RESULT in line and line.endswith("pass --training.mixed_precision_param float32")
    else:
        assert bf16 == []
    assert job_warnings_of(["--job.config_file", DEBUG]) == []  # the default job: float32


def test_the_launchers_preflight_says_each_warning_in_one_line_before_any_work(tmp_path, capsys):
    argv = ["--job.config_file", DEBUG, *LORO, "--optimizer.loro_refresh_freq", "0"]
    argv += ["--training.mixed_precision_param", "bfloat16", "--job.dump_folder", str(tmp_path / "out")]
    preflight(argv, 1)
    lines = stderr_lines(capsys.readouterr().err)
    assert [line.split(":")[0] for line in lines] == ["BOOST warning"] * (2 if on_cpu() else 1)
    assert lines[0].startswith("BOOST warning: optimizer.loro_refresh_freq = 0: ")
    if on_cpu():
        assert lines[1].startswith("BOOST warning: training.mixed_precision_param = 'bfloat16' on a machine")
    assert not (tmp_path / "out").exists()  # nothing started


def test_a_refused_job_says_its_refusal_alone(tmp_path, capsys):
    from boost.training.config_error import ConfigError

    argv = ["--job.config_file", DEBUG, *LORO, "--optimizer.loro_refresh_freq", "0", "--training.steps", "0"]
    with pytest.raises(ConfigError, match="training.steps = 0"):
        preflight([*argv, "--job.dump_folder", str(tmp_path / "out")], 1)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "schedule,ac,warned",
    [
        ("ZBVZeroBubble", "lowrank", True),
        ("InterleavedZeroBubble", "full", True),
        ("InterleavedZeroBubble", "none", False),
        ("Interleaved1F1B", "full", False),
    ],
)
def test_checkpointing_under_a_zero_bubble_schedule_is_said_to_recompute_per_parameter_group(
    schedule, ac, warned
):
    from boost.training.rules import splits_backward
    from torchtitan_ext.torch_private import EXACT_SPLIT_BACKWARD

    if splits_backward(schedule) and not EXACT_SPLIT_BACKWARD:
        pytest.skip("refused on this torch: test_preflight.py's split-backward test")
    argv = [
        "--job.config_file",
        DEBUG,
        *("--parallelism.tensor_parallel_degree", "2", "--parallelism.pipeline_parallel_degree", "2"),
        *("--parallelism.pipeline_parallel_schedule", schedule, "--boost.activation_checkpoint", ac),
        "--validation.no-enable",
    ]
    lines = [
        line for line in job_warnings_of(argv, world_size=4) if line.startswith("boost.activation_checkpoint")
    ]
    assert lines == (
        [
            f"boost.activation_checkpoint = '{ac}' under schedule {schedule}: its weight-gradient pass asks autograd "
            "once per parameter group, and each ask recomputes the checkpointed block (11-22 times a micro-batch on "
            "the debug model, where 1F1B recomputes it once); the losses are the same. Set "
            "boost.activation_checkpoint none, or choose Interleaved1F1B"
        ]
        if warned
        else []
    )

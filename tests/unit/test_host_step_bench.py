"""``bench.host_step``: its header names every option it ran with, and a row of several runs never sets one run's
step time against another's graph bodies (``step − bodies`` is each run's difference, then the median)."""

from __future__ import annotations

import re
import shlex

import pytest

from bench import host_step


def _run(step_ms: float, graph_ms: float, dispatches: int = 100) -> dict:
    return dict(
        scheme="btp", step_ms=step_ms, graph_ms=graph_ms, ops=step_ms * 10, dispatches=dispatches, top_level=50,
        graphs=4, graphs_fwd=2, graphs_bwd=2, graphs_other=0, syncs=1, tiny_us=1.0, steady_ms=[step_ms], top_ops=[],
    )  # fmt: skip


def test_a_rows_time_outside_the_graphs_is_the_median_of_each_runs_own():
    # a fast run with small bodies and a slow one with large: the last run's bodies (90) against the median
    # step (150) gave 60 ms outside, where each run spent 50 and 10 outside (median 30)
    runs = [_run(step_ms=100, graph_ms=50), _run(step_ms=200, graph_ms=190), _run(step_ms=150, graph_ms=90)]
    row = host_step.aggregate(runs)
    assert row["step_ms"] == 150 and row["graph_ms"] == 90 and row["ops"] == 1500
    assert row["outside_ms"] == 50  # median of 50, 10, 60
    (_, _, line) = host_step.table([("here", row)], None)
    cells = [c.strip() for c in line.split("|")]
    assert cells[3:7] == ["150", "1,500", "90", "50"]


def test_the_counts_are_the_last_runs():
    row = host_step.aggregate([_run(100, 50, dispatches=7), _run(100, 50, dispatches=9)])
    assert row["dispatches"] == 9


def test_the_header_command_names_every_option_the_run_changed():
    p = host_step.parser()
    argv = ["--schemes", "btp", "--reps", "2", "--steps", "9", "--profile-step", "5", "--log-freq", "3"]
    argv += ["--", "--training.seq_len", "32"]
    a = p.parse_args(argv)
    from bench.run_command import command_as_run

    command = command_as_run("bench.host_step", p, a)
    assert command == "python -m bench.host_step " + shlex.join(argv)
    assert p.parse_args(shlex.split(command)[3:]) == a


def test_no_repetitions_or_steps_are_refused(capsys):
    for flag in ("--reps", "--steps"):
        with pytest.raises(SystemExit):
            host_step.main([flag, "0"])
        assert re.search(f"argument {flag}: 0 is not a positive integer", capsys.readouterr().err)


@pytest.mark.parametrize(
    "steps,profile_step,why",
    [
        ("11", "11", "from 3 .* to --steps - 1 = 10"),  # the profiler never closes
        ("11", "2", "from 3"),  # step 2 is counted eagerly, not an ordinary step
        ("5", "3", "leaves no two consecutive steps timed in --steps 5"),  # steady list empty: median fails
    ],
)
def test_a_profile_step_the_run_cannot_profile_and_time_around_is_refused(capsys, steps, profile_step, why):
    with pytest.raises(SystemExit):
        host_step.main(["--steps", steps, "--profile-step", profile_step])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(f"argument --profile-step: {profile_step} .*{why}", err), err
    assert host_step.profile_step_problem(5, 4) is None and host_step.profile_step_problem(11, 7) is None


def test_the_childs_command_line_parses_without_the_parents_options():
    c = host_step.child_parser().parse_args(
        ["--child", "btp", "--steps", "11", "--profile-step", "7", "--log-freq", "10", "--", "--x.y", "1"]
    )
    assert (c.child, c.steps, c.profile_step, c.log_freq, c.overrides) == ("btp", 11, 7, 10, ["--x.y", "1"])


def test_mains_header_is_the_command_as_run(tmp_path, monkeypatch):
    # it was built by hand from --reps/--baseline/--fsdp and the overrides: --schemes, --steps, --profile-step
    # and --log-freq were dropped, so the file named a command that measured something else
    times = iter([(100, 50), (200, 190), (150, 90)])
    monkeypatch.setattr(host_step, "measure", lambda *args: _run(*next(times)))
    out = tmp_path / "host.md"
    argv = ["--schemes", "btp", "--reps", "3", "--steps", "9", "--profile-step", "5", "--log-freq", "3"]
    argv += ["--out", str(out)]
    host_step.main(argv)
    text = out.read_text()
    assert f"`python -m bench.host_step {shlex.join(argv)}`" in text
    assert re.search(r"^\| [^|]+ \| btp \| 150 \| 1,500 \| 90 \| 50 \|", text, re.M)

"""``bench.startup``'s table holds the rows the run measured: ``--rows refusal import`` printed the default
job and the 7B dry run as blanks and "(no start-up line logged)", which read as failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.startup import ROWS, TITLES, Checkout, main, table


def test_rows_the_run_did_not_measure_are_left_out():
    checkout = Checkout(Path("."), "here")
    checkout.times.update({"import": [8.0], "refusal": [0.2]})
    text = table([checkout], 1, ["import", "refusal"])
    assert f"| {TITLES['import']} | 8.00 (8.00) | 1.00 |" in text
    assert f"| {TITLES['refusal']} | 0.20 (0.20) | 0.03 |" in text
    for row in set(ROWS) - {"import", "refusal"}:
        assert TITLES[row] not in text and f"here, {row}:" not in text
    assert "—" not in text and "no start-up line" not in text


def test_a_measured_row_that_logged_no_start_up_line_says_so():
    checkout = Checkout(Path("."), "here")
    checkout.times.update({"import": [8.0], "default job": [10.0], "7B dry run": [40.0]})
    checkout.startup_lines["default job"] = "imports 7.6 s"
    text = table([checkout], 1, ["import", "default job", "7B dry run"])
    assert "- here, default job: `BOOST start-up: imports 7.6 s`" in text
    assert f"| {TITLES['7B dry run']} | 40.00 (40.00) | 5.00 |" in text
    assert "- here, 7B dry run: (no start-up line logged)" in text


def test_no_repetitions_are_refused_before_anything_runs_or_is_written(tmp_path, capsys):
    # --reps 0 measured nothing and wrote a table of dashes, by default over bench/results/startup.md
    out = tmp_path / "startup.md"
    with pytest.raises(SystemExit) as exit_:
        main(["--reps", "0", "--out", str(out)])
    assert exit_.value.code == 2
    assert "argument --reps: 0 is not a positive integer (1 or more)" in capsys.readouterr().err
    assert not out.exists()

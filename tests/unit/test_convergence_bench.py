"""``bench.convergence --runs``: a label not in ``RUNS`` is refused by name before any run trains (all of them
misspelt ended in ``ValueError: max() arg is an empty sequence`` after training nothing; one misspelt among
others was dropped from the table without a word)."""

from __future__ import annotations

import pytest

from bench import convergence


@pytest.mark.parametrize("runs", [["colaa"], ["cola", "svd+LORO"]], ids=["all misspelt", "one misspelt"])
def test_an_unknown_run_label_is_refused_naming_the_known_ones(capsys, runs):
    with pytest.raises(SystemExit) as exit_:
        convergence.main(["--runs", *runs])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --runs: invalid choice: '{runs[-1]}'" in err and "'svd + LORO'" in err


def test_no_steps_are_refused(capsys):
    with pytest.raises(SystemExit):
        convergence.main(["--steps", "0"])
    assert "argument --steps: 0 is not a positive integer" in capsys.readouterr().err


def test_the_known_labels_parse_as_given():
    assert convergence.parser().parse_args(["--runs", "cola", "svd + LORO"]).runs == ["cola", "svd + LORO"]

"""``bench.ablations``' AC block: a ΔTime at or below 0 is timing noise, said so, not a rate of ``inf`` (its ratio
printed "inf× (target ≥ 1.5×)", which read as the target met); ``--reps 0`` is refused before any rank starts."""

from __future__ import annotations

import pytest

from bench import ablations

MIB = 2**20


def _res(full_s: float, lowrank_s: float) -> dict:
    # (collectives, bytes, median step s, forward-held bytes); none holds 100 MiB, full 20, lowrank 60
    return {
        "grouped + online (BOOST)": (10, 0, 1.0, 100 * MIB),
        "AC full": (10, 0, full_s, 20 * MIB),
        "AC lowrank": (10, 0, lowrank_s, 60 * MIB),
    }


def test_the_ratio_of_two_measured_rates():
    text = "\n".join(ablations.ac_rate_lines(_res(full_s=1.4, lowrank_s=1.1)))
    assert "| AC full | 80.0 | 0.400 | 200.0 |" in text and "| AC lowrank | 40.0 | 0.100 | 400.0 |" in text
    assert "lowrank/full rate ratio: 2.00× (target ≥ 1.5×)" in text


def test_a_step_no_slower_than_no_ac_is_below_the_noise_not_an_infinite_rate():
    text = "\n".join(ablations.ac_rate_lines(_res(full_s=1.4, lowrank_s=0.99)))
    assert "inf" not in text
    assert "| AC lowrank | 40.0 | -0.010 | — (ΔTime ≤ 0: below the timing noise) |" in text
    assert "lowrank/full rate ratio: not measured: AC lowrank took no longer than no AC" in text


def test_no_repetitions_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        ablations.main(["--reps", "0"])
    assert exit_.value.code == 2
    assert "argument --reps: 0 is not a positive integer" in capsys.readouterr().err

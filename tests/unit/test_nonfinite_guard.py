"""The non-finite guard: a step whose global gradient norm is NaN or ±inf stops the run before its checkpoint."""

from __future__ import annotations

import math

import pytest

from torchtitan_ext.guards.nonfinite_guard import DRY_RUN_NOTE, NonFiniteLossError, refuse_non_finite


@pytest.mark.parametrize("norm", [math.nan, math.inf, -math.inf])
def test_nan_and_either_infinity_stop_the_run_naming_the_step(norm):
    with pytest.raises(
        NonFiniteLossError, match=rf"^non-finite loss/gradients at step 7 \(grad norm {norm}\)"
    ):
        refuse_non_finite(7, norm)


def test_a_dry_run_says_what_its_numbers_are():
    with pytest.raises(NonFiniteLossError) as err:
        refuse_non_finite(3, math.inf, dry_run=True)
    assert str(err.value).endswith(DRY_RUN_NOTE)


@pytest.mark.parametrize("norm", [0.0, 1.5, 1e30, -1e30, 3.4e38])
def test_finite_norms_however_large_pass(norm):
    refuse_non_finite(1, norm)  # a huge norm is the clipper's business, not a stop

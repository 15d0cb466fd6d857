"""generate's --seed is checked with the other sampling options, before any work."""

import pytest

from boost.after_training.generate import check_sampling


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 10**20])
def test_a_seed_out_of_the_generators_range_is_refused_naming_it(seed):
    # was: 'Overflow when unpacking long long' after the prompt was already printed
    with pytest.raises(ValueError, match=rf"^--seed {seed} must lie in"):
        check_sampling(0.8, None, None, 5, seed)


@pytest.mark.parametrize("seed", [0, -1, -(2**63), 2**64 - 1])
def test_a_seed_in_range_passes(seed):
    check_sampling(0.8, None, None, 5, seed)
    import torch

    torch.Generator().manual_seed(seed)

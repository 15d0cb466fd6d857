"""``ModelArgs``' refusals of shapes no model can be built with, each naming the field and what it must be:
a TOML's typo is refused where it is read, not as a shape error deep in a layer's construction."""

from __future__ import annotations

import re

import pytest

from boost import ModelArgs


@pytest.mark.parametrize("field", ["dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim"])
@pytest.mark.parametrize("value", [0, -8])
def test_a_non_positive_dimension_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=re.escape(f"model {field} = {value} must be positive")):
        ModelArgs.from_flavor("debug", **{field: value})


def test_a_dim_that_n_heads_does_not_divide_is_refused():
    # heads would be 250 / 8 wide: the reshape to (bs, seqlen, n_heads, head_dim) has no such shape
    with pytest.raises(ValueError, match=re.escape("dim 250 is not divisible by n_heads 8")):
        ModelArgs.from_flavor("debug", dim=250)


def test_an_odd_head_dim_is_refused_for_rope():
    # RoPE rotates pairs of a head's channels: an odd head_dim leaves one without a partner
    with pytest.raises(ValueError, match=re.escape("head_dim 9 must be even for RoPE")):
        ModelArgs.from_flavor("debug", dim=72, rank=16)


def test_an_override_that_is_no_field_is_refused():
    # a misspelt override would otherwise be dropped silently and the model built without it
    with pytest.raises(TypeError, match=re.escape("ModelArgs has no field(s) ['head_dim', 'ranks']")):
        ModelArgs.from_flavor("debug", ranks=32, head_dim=64)


def test_a_rank_at_or_above_the_ffn_width_is_refused():
    # gate/up factor d -> r -> f and down f -> r -> d: a rank of 16 over an f of 8 widens, not factors
    with pytest.raises(
        ValueError, match=re.escape("boost.rank = 16: must be below the smallest dim it factors (8)")
    ):
        ModelArgs(dim=64, n_heads=8, ffn_dim=8, rank=16, linear="cola").check()


def test_a_rank_too_wide_for_gqa_names_a_rank_ratio_that_fits():
    # 8 kv heads of 128 make k/v 1024 wide, the default d/4 rank's width: the fix is a ratio below 0.25, not it
    with pytest.raises(ValueError) as refused:
        ModelArgs.from_flavor("7B", n_kv_heads=8)
    assert str(refused.value).endswith("choose boost.rank below 1024 (boost.rank_ratio below 0.25)")

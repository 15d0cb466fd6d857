"""The TP schemes at TP 8, one node of 8 GPUs, every rank simulated in this process
(``tests/simulated_ranks.py``): the float64 parity with one device that ``tests/multiprocess/test_tp.py``
holds on 2 and 4 gloo processes, and the collectives per layer that ``tests/multiprocess/test_comm_volume.py``
counts there against ``boost.planning.comm_volume``'s formulas, each scheme once (the simulation runs every
op once a rank). The debug model with 8 KV heads: its 4 (grouped-query attention) do not split over 8 ranks,
which ``apply_tp`` refuses."""

from __future__ import annotations

import pytest

from tests.multiprocess.test_comm_volume import _per_layer_body
from tests.multiprocess.test_tp import _parity_body
from tests.simulated_ranks import outside_the_ranks, simulated_ranks

TP, KV_HEADS = 8, 8
CASES = [  # (kind, scheme, grouped, norm, sequence_parallel)
    ("cola", "btp", True, "online", False),
    ("lax", "btp", True, "online", True),  # LaX's crossing on a rank's tokens: 2 of the window's 16
    ("svd", "btp", False, "sync", False),
    ("cola", "vanilla", False, "online", False),
    ("full", "megatron", False, "online", True),
]


@pytest.mark.slow
def test_schemes_at_tp8_match_one_device_float64():
    with simulated_ranks(TP):
        _parity_body(0, TP, CASES, KV_HEADS, outside_the_ranks)


@pytest.mark.slow
def test_collectives_per_layer_at_tp8_match_the_formulas():
    with simulated_ranks(TP):
        _per_layer_body(0, TP, CASES, KV_HEADS, outside_the_ranks)

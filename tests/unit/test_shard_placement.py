"""``torchtitan_ext.infra.parallelize.shard_placement``: a batched ``[G, d_out, r]`` weight goes on ``r`` (dim 2)
where ``r`` divides by the FSDP degree, whatever ``d_out`` is; elsewhere, and for every other weight, FSDP2's
dim 0 (the multi-process reading of the placement: tests/multiprocess/test_fsdp_placement.py, whose debug
model's ``d_out`` and ``r`` both divide by its degree)."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import Shard

from torchtitan_ext.infra.parallelize import shard_placement


def test_a_batched_weight_goes_on_its_rank_dim_exactly_where_the_rank_divides_by_the_fsdp_degree():
    placement = shard_placement(4)
    # r = 8 divides by 4, d_out = 6 does not: dim 2
    assert placement(nn.Parameter(torch.zeros(2, 6, 8))) == Shard(2)
    # r = 6 does not, d_out = 8 does: dim 0 (FSDP2 shards a dim other than 0 only evenly)
    assert placement(nn.Parameter(torch.zeros(2, 8, 6))) is None
    # a plain matrix: FSDP2's default
    assert placement(nn.Parameter(torch.zeros(8, 8))) is None

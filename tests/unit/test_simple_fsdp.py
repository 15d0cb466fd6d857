"""SimpleFSDP's wrapping of a model (``torchtitan_ext.infra.simple_fsdp``), in one process on a fake
process group: where each weight is sharded, what a read returns, what is refused. Its numerics (the
losses of FSDP × TP training, a checkpoint handed to FSDP2) are tested through the trainer:
tests/feature_matrix.py's simple_fsdp rows and tests/end_to_end/test_train.py. Compiled by inductor, a
block's gathers and reduce-scatters are merged into one of each (a private inductor switch, so the test
runs in the compat tier on both ends of the torch range)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.profiler import profile
from torch.testing._internal.distributed.fake_pg import FakeStore

from boost.training.config_error import ConfigError
from torchtitan_ext.infra.simple_fsdp import apply_simple_fsdp, shard_dim


class Toy(nn.Module):
    def __init__(self, norm_width: int):
        super().__init__()
        self.a = nn.Linear(6, 12, bias=False)
        self.b = nn.Linear(6, 12, bias=False)
        self.up = nn.Parameter(torch.zeros(2, 6, 3))  # a batched [G, d_out, r] weight
        self.norm = nn.Parameter(torch.ones(norm_width))
        self.reads_shards: list[bool] = []

    def init_weights(self) -> None:
        self.reads_shards.append(self.a.weight is self.a._parameters["weight"])
        nn.init.ones_(self.a.weight)


@pytest.fixture
def mesh3():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=3)
    try:
        yield init_device_mesh("cpu", (3,), mesh_dim_names=("fsdp",))
    finally:
        dist.destroy_process_group()


def test_shard_dim_is_fsdp2s_where_it_divides_else_the_first_that_does():
    assert shard_dim((2, 6, 3), 3) == 2  # a batched up-projection on r, as FSDP2's placement in BOOST
    assert shard_dim((2, 6, 4), 3) == 1  # r does not divide: the next dim that does
    assert shard_dim((12, 6), 3) == 0
    assert shard_dim((4, 6), 3) == 1
    assert shard_dim((4,), 3) is None


def test_weights_are_even_shards_a_read_gathers_and_modules_of_a_class_share_one(mesh3):
    model = Toy(norm_width=6)
    apply_simple_fsdp(model, mesh3, param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    shards = {n: p for n, p in model.named_parameters()}
    assert {n: (p.placements, p.to_local().shape) for n, p in shards.items()} == {
        "up": ((Shard(2),), torch.Size([2, 6, 1])),
        "norm": ((Shard(0),), torch.Size([2])),
        "a.weight": ((Shard(0),), torch.Size([4, 6])),
        "b.weight": ((Shard(0),), torch.Size([4, 6])),
    }
    assert all(isinstance(p, DTensor) for p in shards.values())
    # a read is the whole weight in the compute dtype (an all-gather: the fake group's data aside)
    read = model.a.weight
    assert not isinstance(read, nn.Parameter) and read.shape == (12, 6) and read.dtype == torch.bfloat16
    assert model.up.shape == (2, 6, 3)
    assert type(model.a) is type(model.b)  # one class: one compiled graph serves every block
    model.init_weights()  # writes the shards themselves
    assert model.reads_shards == [True] and torch.equal(shards["a.weight"].to_local(), torch.ones(4, 6))


def test_a_weight_with_no_dim_the_degree_divides_is_refused_by_name(mesh3):
    with pytest.raises(ConfigError, match=r"boost.fsdp = 'simple_fsdp': norm's tensor-parallel shard \(4,\)"):
        apply_simple_fsdp(Toy(norm_width=4), mesh3, param_dtype=torch.float32, reduce_dtype=torch.float32)


def test_a_data_parallel_mesh_of_two_dims_is_refused():
    # each weight is sharded on one dim over one group: a 2-D mesh leaves unsaid which group that is
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
        with pytest.raises(ValueError, match=re.escape("SimpleFSDP takes a 1-D data-parallel mesh, not 2-D")):
            apply_simple_fsdp(Toy(norm_width=6), mesh, param_dtype=torch.float32, reduce_dtype=torch.float32)
    finally:
        dist.destroy_process_group()


class Block(nn.Module):
    """Four weights read in one forward, as a BOOST block reads its projections."""

    def __init__(self):
        super().__init__()
        self.down = nn.Linear(12, 6, bias=False)
        self.up = nn.Linear(6, 12, bias=False)
        self.out = nn.Linear(12, 12, bias=False)
        self.norm = nn.Parameter(torch.ones(12))

    def init_weights(self) -> None:
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.up(torch.relu(self.down(x * self.norm))))


def _collectives_of_a_step(backend: str, mesh) -> dict[str, int]:
    """The collectives one compiled forward and backward of a SimpleFSDP block issues, by kind."""
    block = Block()
    apply_simple_fsdp(block, mesh, param_dtype=torch.float32, reduce_dtype=torch.float32)
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    x = torch.randn(4, 12)
    compiled(x).sum().backward()  # compiles
    with profile() as prof:
        compiled(x).sum().backward()
    counts: dict[str, int] = {}
    for event in prof.events():
        if event.name.startswith("_c10d_functional::") and "wait" not in event.name:
            kind = "all_gather" if "all_gather" in event.name else event.name.split("::")[1]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


@pytest.mark.slow
@pytest.mark.compat
def test_inductor_merges_a_compiled_blocks_gathers_and_reduce_scatters_into_one_each(mesh3):
    """What ``merge_fsdp_collectives_in_compiled_graphs`` claims: one all-gather and one reduce-scatter
    a block step, as FSDP2 issues, where the graph as traced (``aot_eager``) issues one per weight.
    (The trainer's ``comm/step`` line counts an eager step, so it shows the per-weight figure.)"""
    assert _collectives_of_a_step("aot_eager", mesh3) == {"all_gather": 4, "reduce_scatter_tensor": 4}
    assert _collectives_of_a_step("inductor", mesh3) == {"all_gather": 1, "reduce_scatter_tensor": 1}

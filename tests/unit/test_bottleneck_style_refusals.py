"""``BoostParallelStyle``'s refusals of a module or mesh it cannot shard, in one process on a fake process
group: each fires while the style reads the module, before a parameter is sharded or a collective runs.
(Its numerics, on real gloo ranks: tests/multiprocess/test_tp.py.)"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore

from boost.training.parallel.bottleneck_style import BoostParallelStyle


@pytest.fixture
def world4() -> Iterator[None]:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def tp2(world4) -> DeviceMesh:
    return init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))["tp"]


class Bottleneck(nn.Module):
    """``up(σ(down(x)))`` with whatever ``down``, ``middle`` and ``up`` a refusal needs."""

    def __init__(self, down: nn.Module, up: nn.Module, middle: nn.Module | None = None):
        super().__init__()
        self.down, self.middle, self.up = down, middle or nn.SiLU(), up


class WeightOnly(nn.Module):
    """An up-projection weight ``[d_out, r]`` with neither ``nn.Linear``'s forward nor ``project(u, weight)``."""

    def __init__(self, d_out: int, r: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d_out, r))


def test_a_two_dimensional_mesh_is_refused(world4):
    # the style's collectives run over one group: a 2-D mesh would leave which one unsaid
    block = Bottleneck(nn.Linear(8, 4), nn.Linear(4, 8))
    with pytest.raises(ValueError, match=re.escape("BoostParallelStyle takes a 1-D tensor-parallel mesh")):
        parallelize_module(block, init_device_mesh("cpu", (2, 2)), BoostParallelStyle())


def test_a_down_projection_that_is_no_linear_is_refused_by_name(tp2):
    # the row-parallel down-projection reads down.weight as [r, d] sharded on d: only an nn.Linear is that
    block = Bottleneck(nn.Conv1d(8, 4, 1), nn.Linear(4, 8))
    with pytest.raises(
        ValueError, match=re.escape("BoostParallelStyle: down projection 'down' must be an nn.Linear")
    ):
        parallelize_module(block, tp2, BoostParallelStyle())


def test_a_module_without_a_bottleneck_is_refused_with_how_to_name_one(tp2):
    with pytest.raises(
        ValueError,
        match=re.escape(
            "BoostParallelStyle found no bottleneck in Sequential: it needs a down projection nn.Linear(d, r) "
            "and an up projection nn.Linear(r, d'); name them with BoostParallelStyle(down=..., up=...)"
        ),
    ):
        parallelize_module(nn.Sequential(nn.Linear(8, 8), nn.SiLU()), tp2, BoostParallelStyle())


def test_an_up_projection_wider_than_the_latent_is_refused(tp2):
    # it would read latent features that no rank's down-projection computes
    block = Bottleneck(nn.Linear(8, 4), nn.Linear(6, 8))
    with pytest.raises(
        ValueError, match=re.escape("up-projection reads 6 features but the latent is 4 wide")
    ):
        parallelize_module(block, tp2, BoostParallelStyle())


def test_sequence_parallel_refuses_an_output_layout_other_than_shard_last_or_replicate(tp2):
    # the outputs are computed on the flat tokens: only their last dim is a layout they can leave in
    block = Bottleneck(nn.Linear(8, 4), nn.Linear(4, 8))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "BoostParallelStyle(sequence_parallel=True): output_layouts = S(0); the outputs are computed on "
            "the flat tokens and leave sharded on their last dim, Shard(-1), or Replicate()"
        ),
    ):
        parallelize_module(block, tp2, BoostParallelStyle(sequence_parallel=True, output_layouts=Shard(0)))


def test_sequence_parallel_refuses_parameters_between_the_projections(tp2):
    # a norm between down and up would see this rank's tokens only, its gradient never summed
    block = Bottleneck(nn.Linear(8, 4), nn.Linear(4, 8), middle=nn.LayerNorm(4))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "BoostParallelStyle(sequence_parallel=True): 'middle' holds parameters and would run on this "
            "rank's tokens only; keep parameters in the down- and up-projections and the norm, or use "
            "sequence_parallel=False"
        ),
    ):
        parallelize_module(block, tp2, BoostParallelStyle(sequence_parallel=True))


def test_an_up_projection_that_cannot_run_on_its_shard_is_refused(tp2):
    # its forward would read the whole DTensor weight: the swap to a local-shard forward needs
    # nn.Linear's or a project(u, weight)
    block = Bottleneck(nn.Linear(8, 4), WeightOnly(8, 4))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "BoostParallelStyle: the up-projection WeightOnly runs on its local shard, which an nn.Linear or "
            "a module with project(u, weight) can"
        ),
    ):
        parallelize_module(block, tp2, BoostParallelStyle())


class Prenormed(nn.Module):
    """``up(σ(down(norm(x))))`` with whatever ``norm`` a refusal needs."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm, self.down, self.act, self.up = norm, nn.Linear(8, 4), nn.SiLU(), nn.Linear(4, 8)


@pytest.mark.parametrize(
    "norm,problem",
    [
        # its mean and bias would be dropped without a word: the style runs RMSNorm's maths
        (
            nn.LayerNorm(8),
            "LayerNorm is not an RMSNorm (nn.RMSNorm or boost's): the style runs RMSNorm's maths",
        ),
        (
            nn.RMSNorm(8, elementwise_affine=False),
            "an RMSNorm without a 1-D weight (elementwise_affine=False",
        ),
    ],
)
def test_a_norm_the_style_cannot_run_is_refused(tp2, norm, problem):
    with pytest.raises(ValueError, match=re.escape(f"BoostParallelStyle: norm 'norm': {problem}")):
        parallelize_module(Prenormed(norm), tp2, BoostParallelStyle(norm="norm"))


def test_a_projection_named_by_a_name_the_module_lacks_is_refused_with_its_children(tp2):
    # an nn.Sequential's children are "0", "1", "2": get_submodule("a") was a bare AttributeError
    block = nn.Sequential(nn.Linear(8, 4), nn.SiLU(), nn.Linear(4, 8))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "BoostParallelStyle: Sequential has no submodule 'a'; its children are ['0', '1', '2']"
        ),
    ):
        parallelize_module(block, tp2, BoostParallelStyle(down="a", up="2"))

"""``BoostParallelStyle``'s pre-norm over the sharded dim at its edges, on a user's own bottleneck: torch's
``nn.RMSNorm`` with its default ``eps = None``, ``eps = 0`` with one rank's half of a row all zeros, and fp16
activations whose RMS passes 256. Each equals the module on one device; 2 ranks simulated in this process
(``tests/simulated_ranks.py``)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.parallel import parallelize_module

from boost.training.parallel import BoostParallelStyle
from tests.simulated_ranks import outside_the_ranks, simulated_ranks


class NormedBottleneck(nn.Module):
    def __init__(self, norm: nn.Module, d: int = 32, r: int = 8):
        super().__init__()
        self.norm, self.down, self.act, self.up = norm, nn.Linear(d, r), nn.SiLU(), nn.Linear(r, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.act(self.down(self.norm(x))))


def _sharded_against_dense(norm: nn.Module, x: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(two ranks' output, one device's) of the bottleneck with ``norm``, fed ``x`` sharded on its last dim."""
    with outside_the_ranks():
        torch.manual_seed(0)
        dense = NormedBottleneck(norm).to(x.dtype)
        sharded = copy.deepcopy(dense)
        expected = dense(x)
    mesh = init_device_mesh("cpu", (2,))
    parallelize_module(sharded, mesh, BoostParallelStyle(norm="norm", norm_mode=mode, use_local_output=False))
    return sharded(distribute_tensor(x, mesh, [Shard(-1)]).to_local()).full_tensor(), expected


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["online", "sync"])
def test_torchs_rmsnorm_with_its_default_eps_is_the_dense_one(mode):
    # eps = None is F.rms_norm's dtype eps: `+ None` was a TypeError in both norms
    with simulated_ranks(2):
        x = torch.randn(2, 8, 32, dtype=torch.float64)
        y, expected = _sharded_against_dense(nn.RMSNorm(32), x, mode)
        torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["online", "sync"])
def test_a_zero_half_row_with_eps_zero_is_the_dense_one(mode):
    # the online norm divides each shard by its own RMS, and puts it back after: 0/0 on a zero half made the
    # whole (non-zero) row NaN
    with simulated_ranks(2):
        x = torch.randn(2, 8, 32, dtype=torch.float64)
        x[0, :3, :16] = 0  # rank 0's half of three rows
        y, expected = _sharded_against_dense(nn.RMSNorm(32, eps=0.0), x, mode)
        torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_fp16_activations_beyond_fp16s_mean_square_normalise_as_dense():
    # an RMS of 300: the mean square, 9e4, is past fp16's 65504, so sent in fp16 it was inf and every row 0
    with simulated_ranks(2):
        x = 300 * torch.randn(2, 8, 32, dtype=torch.float16)
        y, expected = _sharded_against_dense(nn.RMSNorm(32, eps=1e-6), x, "online")
        assert expected.abs().max() > 0.1
        torch.testing.assert_close(y, expected, rtol=1e-2, atol=1e-2)

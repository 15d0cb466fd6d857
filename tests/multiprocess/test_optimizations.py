"""Online RMSNorm and low-rank activation checkpointing (DESIGN §3, §4).

Compiled: tests/multiprocess/test_compile.py.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import loss_parallel
from torch.utils._python_dispatch import TorchDispatchMode

from boost import ModelArgs, Transformer
from boost.runtime.comm_counter import CommCounter
from boost.runtime.memory import forward_held_bytes
from boost.training.parallel import OnlineRMSNormDown, SyncRMSNorm, apply_lowrank_ac, apply_tp
from boost.training.parallel.collectives import row_parallel_down
from boost.training.parallel.latent_replay import record_and_replay_collectives
from tests.distributed import run_distributed

EPS = 1e-5


def _shard(t: torch.Tensor, mesh, dim: int) -> torch.Tensor:
    """Differentiably take this rank's slice of a global tensor (identical on every rank)."""
    return (
        DTensor.from_local(t, mesh, [Replicate()], run_check=False)
        .redistribute(mesh, [Shard(dim)])
        .to_local()
    )


class _PerturbedBackward(OnlineRMSNormDown):
    @staticmethod
    def backward(ctx, dy):
        dx, dgamma, dweight, *rest = OnlineRMSNormDown.backward(ctx, dy)
        return dx * 1.05, dgamma, dweight, *rest


def _norm_body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (world_size,))
    g = torch.Generator().manual_seed(0)
    d, r, tokens = 8 * world_size, 3, 5
    x = torch.randn(tokens, d, dtype=torch.float64, generator=g, requires_grad=True)
    gamma = (1 + 0.1 * torch.randn(d, dtype=torch.float64, generator=g)).requires_grad_()
    w = torch.randn(r, d, dtype=torch.float64, generator=g, requires_grad=True)

    def online(x, gamma, w, fn=OnlineRMSNormDown):
        return fn.apply(_shard(x, mesh, -1), _shard(gamma, mesh, 0), _shard(w, mesh, 1), EPS, d, mesh)

    def sync(x, gamma, w):
        y = SyncRMSNorm.apply(_shard(x, mesh, -1), _shard(gamma, mesh, 0), EPS, d, mesh)
        return row_parallel_down(y, _shard(w, mesh, 1), mesh)

    dense = F.rms_norm(x, (d,), gamma, EPS) @ w.t()
    torch.testing.assert_close(online(x, gamma, w), dense, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sync(x, gamma, w), dense, rtol=1e-12, atol=1e-12)
    # every Jacobian entry at 2 ranks; at 4, gradcheck's fast mode (a random projection of the Jacobian,
    # as PyTorch's own OpInfo tests): the full check costs 2 collectives per input element, 4 ranks on
    # 2 cores make each one slow (31 s), and a wrong term still moves the projection
    fast = world_size > 2
    assert torch.autograd.gradcheck(online, (x, gamma, w), fast_mode=fast)
    assert torch.autograd.gradcheck(sync, (x, gamma, w), fast_mode=fast)
    # negative control: a perturbed backward must fail the same check
    assert not torch.autograd.gradcheck(
        lambda *a: online(*a, fn=_PerturbedBackward), (x, gamma, w), raise_exception=False, fast_mode=fast
    )

    # one forward collective for online (statistic in the same all-reduce), none in backward
    with CommCounter() as comm:
        y = OnlineRMSNormDown.apply(
            x[:, :8].detach().requires_grad_(), gamma[:8].detach(), w[:, :8].detach(), EPS, d, mesh
        )
        y.sum().backward()
    assert comm.direction(backward=False) == {"all_reduce": (1, tokens * (r + 1))}
    assert comm.direction(backward=True) == {}
    # bf16 activations: the GEMMs run in bf16 (an fp32 GEMM would forfeit tensor cores on GPU); the
    # statistic accumulates in fp32 and travels as a bf16 mean square beside the bf16 latent: one
    # collective of one dtype (NCCL's coalesced all-reduce refuses mixed dtypes, so does gloo)
    xb, gb, wb = (
        t.detach().bfloat16().requires_grad_()
        for t in (_shard(x, mesh, -1), _shard(gamma, mesh, 0), _shard(w, mesh, 1))
    )
    with _Matmuls() as mm, CommCounter() as comm:
        yb = OnlineRMSNormDown.apply(xb, gb, wb, EPS, d, mesh)
        yb.float().pow(2).sum().backward()
    assert yb.dtype == torch.bfloat16 and mm.dtypes == {torch.bfloat16}, mm.dtypes
    assert [(r.dtype, r.shape) for r in comm.records] == [(torch.bfloat16, (tokens, r + 1))]
    torch.testing.assert_close(yb.double(), dense, rtol=2e-2, atol=2e-2)  # bf16 inputs: ~3 significant digits

    # low-rank AC: the recompute replays the kept [H | M] without a GEMM or a collective
    recorded, replayed = record_and_replay_collectives()
    with CommCounter() as comm, recorded:
        first = OnlineRMSNormDown.apply(xb.detach(), gb.detach(), wb.detach(), EPS, d, mesh)
    with CommCounter() as quiet, _Matmuls() as mm, replayed:
        again = OnlineRMSNormDown.apply(xb.detach(), gb.detach(), wb.detach(), EPS, d, mesh)
    assert (
        torch.equal(first, again) and comm.total_count() == 1 and quiet.total_count() == 0 and not mm.dtypes
    )


class _Matmuls(TorchDispatchMode):
    """Counts the matrix multiplies dispatched inside it and their input dtypes."""

    def __enter__(self):
        self.dtypes, self.count = set(), 0
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.bmm, torch.ops.aten.addmm):
            self.dtypes |= {a.dtype for a in args if isinstance(a, torch.Tensor)}
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_online_and_sync_rmsnorm_gradcheck(world_size):
    run_distributed(_norm_body, world_size)


def _model(kind="cola", n_layers=2, seq=32, **kw):
    return ModelArgs.from_flavor(
        "debug", linear=kind, vocab_size=256, n_layers=n_layers, max_seq_len=seq, **kw
    )


def _ac_body(rank: int, world_size: int, kind: str) -> None:
    mesh = init_device_mesh("cpu", (world_size,))
    from torchtitan.config.job_config import ActivationCheckpoint
    from torchtitan.distributed.activation_checkpoint import apply_ac

    kind, _, sp = kind.partition("/")  # "lax/sp": btp's sequence parallelism (the latent on a rank's rows)
    args = _model(kind, n_layers=4, seq=256)
    tokens = torch.randint(0, 256, (8, 256), generator=torch.Generator().manual_seed(0))
    results, matmuls = {}, {}
    # "none" twice: RSS deltas are stable run to run. Under sp, what is sp's own: the recompute's collectives
    # and gradients (the memory and whole-block AC comparisons are the replicated latent's, above)
    modes = ("none", "lowrank") if sp else ("none", "lowrank", "full", "none")
    for mode in modes:
        torch.manual_seed(0)
        m = apply_tp(Transformer(args), mesh, scheme="btp", norm="online", sequence_parallel=bool(sp))
        if mode == "lowrank":
            apply_lowrank_ac(m)
        elif mode == "full":
            apply_ac(m, ActivationCheckpoint(mode="full"))
        with loss_parallel():
            with _Matmuls() as fwd_mm:
                loss, held = forward_held_bytes(
                    lambda m=m: F.cross_entropy(m(tokens).flatten(0, 1), tokens.flatten())
                )
            with CommCounter() as comm, _Matmuls() as bwd_mm:
                loss.backward()
        grads = [p.grad.full_tensor() for p in m.parameters()]
        results[mode] = (held, comm.direction(backward=True), grads)
        matmuls[mode] = (fwd_mm.count, bwd_mm.count)
    none_held, none_comm, none_grads = results["none"]
    low_held, low_comm, low_grads = results["lowrank"]
    assert low_comm == none_comm, (low_comm, none_comm)  # the recompute communicates nothing
    for a, b in zip(low_grads, none_grads):
        assert torch.equal(a, b)  # same ops on the same values: bit-identical
    if sp:
        return
    full_held, full_comm, _ = results["full"]
    # ... and recomputes the block's up-projection GEMMs only: not the 4 down-projections, whose
    # all-reduced outputs were kept, nor the last up-projection, whose output no backward needs
    # (torch's checkpoint stops the recompute early); the LM head's GEMM is outside the blocks
    recomputed = matmuls["lowrank"][1] - matmuls["none"][1]
    if kind == "cola":  # (LaX recomputes its gates' contractions too: more matmuls, no collective)
        assert recomputed == matmuls["none"][0] - 1 - 5 * args.n_layers, (recomputed, matmuls)
    # whole-block AC re-issues its forward collectives
    assert sum(c for c, _ in full_comm.values()) > sum(c for c, _ in none_comm.values())
    assert low_held < 0.6 * none_held, (low_held, none_held)
    assert full_held <= low_held * 1.1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cola", "lax/sp"])
def test_lowrank_checkpointing_keeps_collectives_and_gradients_and_saves_memory(kind):
    """LaX under btp's sequence parallelism: its norms and gates are recomputed on a rank's rows from both
    halves' kept results and the block's carry input, with no collective either (replicated, the crossing
    issues none: CoLA's collectives)."""
    os.environ["MALLOC_MMAP_THRESHOLD_"] = (
        "65536"  # read by glibc as a spawned rank starts (see boost.runtime.memory)
    )
    try:
        run_distributed(_ac_body, 2, kind, start_method="spawn")
    finally:
        del os.environ["MALLOC_MMAP_THRESHOLD_"]

"""Collectives per layer and direction, counted by ``CommCounter`` on real gloo runs, against the
closed forms of ``boost.planning.comm_volume`` (DESIGN §2): BTP 4 all-reduces of 7·b·s·r elements."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import loss_parallel

from boost import ModelArgs, Transformer
from boost.planning.comm_volume import per_layer, total
from boost.runtime.comm_counter import CommCounter
from boost.training.parallel import apply_tp
from tests.distributed import run_distributed

BATCH, SEQ, VOCAB = 2, 16, 256
CASES = [  # (kind, scheme, grouped, norm, sequence_parallel)
    ("cola", "btp", True, "online", False),
    ("cola", "btp", True, "sync", False),
    ("svd", "btp", False, "online", False),
    ("lax", "btp", True, "online", False),
    # the latent on a rank's tokens: each all-reduce a reduce-scatter and an all-gather, LaX's gradients summed
    ("lax", "btp", True, "online", True),
    ("cola", "btp", False, "sync", True),
    ("cola", "vanilla", False, "online", False),
    ("lax", "vanilla", False, "online", False),
    ("full", "megatron", False, "online", False),
    ("full", "megatron", False, "online", True),
]


def _count(mesh, kind, scheme, grouped, norm, sp, n_layers, n_kv_heads, one_device) -> CommCounter:
    args = ModelArgs.from_flavor(
        "debug",
        linear=kind,
        vocab_size=VOCAB,
        n_layers=n_layers,
        group_linears=grouped,
        max_seq_len=SEQ,
        **({} if n_kv_heads is None else {"n_kv_heads": n_kv_heads}),
    )
    with one_device():
        whole = Transformer(args)
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    model = apply_tp(whole, mesh, scheme=scheme, norm=norm, sequence_parallel=sp)
    with CommCounter() as comm, loss_parallel():
        F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
    return comm, args


def _per_layer_body(
    rank: int, world_size: int, cases=CASES, n_kv_heads: int | None = None, one_device=contextlib.nullcontext
) -> None:
    """``one_device``: as ``test_tp._parity_body``'s, where the models are built and the batch drawn."""
    mesh = init_device_mesh("cpu", (world_size,))
    for kind, scheme, grouped, norm, sp in cases:
        tag = f"{kind}/{scheme}/grouped={grouped}/{norm}/sp={sp}"
        two, args = _count(mesh, kind, scheme, grouped, norm, sp, 2, n_kv_heads, one_device)
        one, _ = _count(mesh, kind, scheme, grouped, norm, sp, 1, n_kv_heads, one_device)
        expected = per_layer(args, scheme, tokens=BATCH * SEQ, norm=norm, sequence_parallel=sp)
        for direction, backward in (("forward", False), ("backward", True)):
            a, b = two.direction(backward), one.direction(backward)
            measured = {k: (a[k][0] - b.get(k, (0, 0))[0], a[k][1] - b.get(k, (0, 0))[1]) for k in a}
            measured = {k: v for k, v in measured.items() if v != (0, 0)}
            assert measured == expected[direction], (
                f"{tag} {direction}: counted {measured}, formula {expected[direction]}"
            )
        # every payload is float32 here: bytes are 4 per element
        assert two.total_bytes() == 4 * sum(r.elements for r in two.records)

    # The headline: BTP moves 7·b·s·r (+ statistics) per direction, far below the baselines.
    args = ModelArgs.from_flavor("debug", linear="cola", vocab_size=VOCAB)
    btp = total(per_layer(args, "btp", BATCH * SEQ)["forward"])[1]
    assert btp == 7 * BATCH * SEQ * args.rank + 2 * BATCH * SEQ
    vanilla = total(per_layer(args, "vanilla", BATCH * SEQ)["forward"])[1]
    assert vanilla >= 4 * btp


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_collectives_per_layer_match_the_formulas(world_size):
    run_distributed(_per_layer_body, world_size)


def _counter_paths_body(rank: int, world_size: int) -> None:
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world_size,))
    x = torch.randn(4 * world_size, 6)
    with CommCounter() as comm:
        dist.all_reduce(x.clone())  # c10d
        distribute_tensor(x, mesh, [Shard(0)], src_data_rank=None).redistribute(
            mesh, [Replicate()]
        )  # DTensor all-gather
        DTensor.from_local(x, mesh, [Partial()]).redistribute(mesh, [Replicate()])  # DTensor all-reduce
    assert comm.counts == {"all_reduce": 2, "all_gather": 1}
    assert comm.bytes["all_reduce"] == 2 * x.numel() * 4
    assert comm.bytes["all_gather"] == x.numel() * 4  # the gathered, full tensor
    assert [r.backward for r in comm.records] == [False, False, False]

    # collectives issued in a custom Function's backward are counted as backward
    class ReduceGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            g = g.clone()
            dist.all_reduce(g)
            return g

    leaf = torch.randn(3, 5, requires_grad=True)
    dist.all_reduce(torch.ones(1))  # outside: not counted
    with CommCounter() as comm:
        ReduceGrad.apply(leaf).sum().backward()
    assert comm.direction(backward=True) == {"all_reduce": (1, 15)} and comm.direction(backward=False) == {}
    comm.reset()
    assert comm.total_count() == 0 and comm.summary() == "none"


@pytest.mark.slow
def test_counter_sees_c10d_dtensor_and_backward_collectives():
    run_distributed(_counter_paths_body, 2)

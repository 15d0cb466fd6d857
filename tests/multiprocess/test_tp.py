"""Tensor-parallel schemes against the single-device model, on real gloo process groups.

Tolerances: forward/backward in float64 go through all-reduces whose summation order differs from
the single-device GEMM, so they match to rounding (≤1e-10 relative), not bit for bit. Training in
float32 accumulates that rounding over 20 steps (≤1e-5 relative). Parameters that are Replicate
on the TP mesh receive identical gradients on every rank, so they stay bit-identical.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

from boost import ModelArgs, Transformer
from boost.training.parallel import BoostParallelStyle, apply_tp
from tests.distributed import run_distributed

VOCAB, SEQ, BATCH = 256, 16, 2

# (kind, scheme, grouped, norm, sequence_parallel)
PARITY_CASES = [
    ("svd", "btp", True, "online", False),
    ("cola", "btp", True, "online", False),
    ("cola", "btp", True, "sync", False),
    ("lax", "btp", True, "online", False),
    ("cola", "btp", False, "online", False),
    ("lax/linear", "btp", False, "sync", False),
    ("svd", "vanilla", False, "online", False),
    ("cola", "vanilla", False, "online", False),
    ("lax", "vanilla", False, "online", False),
    ("lax/none", "vanilla", False, "online", False),
    ("full", "megatron", False, "online", False),
    ("full", "megatron", False, "online", True),
]
# btp's sequence parallelism (each latent on a rank's tokens between a reduce-scatter and an all-gather), at 2
# ranks (4 on 2 cores make each case slow): LaX online grouped, the other gate ungrouped with the sync norm,
# and the tensorized gate's kron form (boost.lax_gate_form) grouped
SEQUENCE_PARALLEL_CASES = [
    ("lax", "btp", True, "online", True),
    ("lax/linear", "btp", False, "sync", True),
    ("lax/tensorized/kron", "btp", True, "online", True),
]


def _args(kind: str, grouped: bool, n_kv_heads: int | None = None, n_layers: int = 2, **shape) -> ModelArgs:
    # "lax/linear": LaX with that gate (default: tensorized); "lax/tensorized/kron": and that gate form
    linear, _, gate_and_form = kind.partition("/")
    lax_gate, _, form = gate_and_form.partition("/")
    return ModelArgs.from_flavor(
        "debug",
        linear=linear,
        lax_gate=lax_gate or "tensorized",
        lax_gate_form=form or "factored",
        vocab_size=VOCAB,
        n_layers=n_layers,
        group_linears=grouped,
        max_seq_len=SEQ,
        **({} if n_kv_heads is None else {"n_kv_heads": n_kv_heads}),
        **shape,
    )


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(
        0, VOCAB, (BATCH, SEQ), generator=g
    )


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _parity_body(
    rank: int, world_size: int, cases, n_kv_heads, one_device=contextlib.nullcontext, shape=None
) -> None:
    """``one_device``: a context that computes as one device, where the models are built and the reference
    runs (``tests/simulated_ranks.py``'s ``outside_the_ranks``: once, not once a simulated rank); ``shape``:
    other ``ModelArgs`` of the debug model, one only the cases' schemes split (``norm = "local"``, checked
    under every scheme, is then not)."""
    shape = shape or {}
    every_scheme = not shape
    mesh = init_device_mesh("cpu", (world_size,))
    # norm = "local" is another model only where the scheme shards the residual the pre-norms read
    for kind, scheme, grouped, sharded in (
        ("cola", "btp", True, True),
        ("cola", "btp", False, True),
        ("cola", "vanilla", False, False),
        ("full", "megatron", False, False),
    )[: None if every_scheme else 0]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            apply_tp(Transformer(_args(kind, grouped, n_kv_heads)), mesh, scheme=scheme, norm="local")
        warned = any("NOT the dense model" in str(w.message) for w in caught)
        assert warned == sharded, f"{scheme}/grouped={grouped}: norm = local warned: {warned}"
    torch.set_default_dtype(torch.float64)
    with one_device():
        tokens, labels = _batch(0)
    for kind, scheme, grouped, norm, sp in cases:
        tag = f"{kind}/{scheme}/grouped={grouped}/{norm}/sp={sp}/t={world_size}"
        args = _args(kind, grouped, n_kv_heads, **shape)
        with one_device():
            torch.manual_seed(0)
            ref, whole = Transformer(args), Transformer(args)
            logits_ref = ref(tokens)
            loss_ref = F.cross_entropy(logits_ref.flatten(0, 1), labels.flatten())
            loss_ref.backward()
        model = apply_tp(whole, mesh, scheme=scheme, norm=norm, sequence_parallel=sp)
        # apply_tp shards the values it is given, each once (a layout's own init, drawn shard by shard, is
        # tests/multiprocess/test_sharded_init.py's)
        ref_params = dict(ref.named_parameters())
        for name, p in model.named_parameters():
            assert torch.equal(_full(p.detach()), ref_params[name].detach()), (
                f"{tag}: sharding changed {name}"
            )
        with loss_parallel():
            logits = model(tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
            loss.backward()
        assert _rel(_full(logits), logits_ref) <= 1e-10, f"{tag}: logits"
        assert abs(loss.item() - loss_ref.item()) <= 1e-10 * abs(loss_ref.item()), f"{tag}: loss"
        for name, p in model.named_parameters():
            err = _rel(_full(p.grad), ref_params[name].grad)
            assert err <= 1e-10, f"{tag}: grad of {name} off by {err:.2e}"


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_schemes_match_single_device_float64(world_size):
    cases = PARITY_CASES + (SEQUENCE_PARALLEL_CASES if world_size == 2 else [])
    run_distributed(_parity_body, world_size, cases, None)


@pytest.mark.slow
def test_btp_with_multi_head_attention_at_tp4():
    # n_kv_heads = n_heads: q/k/v share one batched up-projection
    run_distributed(
        _parity_body, 4, [("cola", "btp", True, "online", False), ("lax", "btp", True, "sync", False)], 8
    )


def _training_body(rank: int, world_size: int, cases) -> None:
    mesh = init_device_mesh("cpu", (world_size,))
    torch.set_default_dtype(torch.float32)
    for kind, scheme, grouped, norm, sp in cases:
        tag = f"{kind}/{scheme}/sp={sp}/t={world_size}"
        args = _args(kind, grouped)
        torch.manual_seed(0)
        ref = Transformer(args)
        torch.manual_seed(0)
        model = apply_tp(Transformer(args), mesh, scheme=scheme, norm=norm, sequence_parallel=sp)
        opt_ref = torch.optim.AdamW(ref.parameters(), lr=3e-3, foreach=False)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=False)
        for step in range(20):
            tokens, labels = _batch(100 + step)
            opt_ref.zero_grad()
            opt.zero_grad()
            loss_ref = F.cross_entropy(ref(tokens).flatten(0, 1), labels.flatten())
            loss_ref.backward()
            with loss_parallel():
                loss = F.cross_entropy(model(tokens).flatten(0, 1), labels.flatten())
                loss.backward()
            opt_ref.step()
            opt.step()
            assert abs(loss.item() - loss_ref.item()) <= 1e-5 * abs(loss_ref.item()), (
                f"{tag} step {step}: {loss.item()} vs {loss_ref.item()}"
            )
        # Replicated parameters must not drift apart across ranks.
        for name, p in model.named_parameters():
            local = p.to_local() if isinstance(p, DTensor) else p
            replicated = not isinstance(p, DTensor) or all(isinstance(pl, Replicate) for pl in p.placements)
            if replicated:
                gathered = [torch.empty_like(local) for _ in range(world_size)]
                dist.all_gather(gathered, local.detach().contiguous())
                assert all(torch.equal(g, gathered[0]) for g in gathered), (
                    f"{tag}: {name} drifted across ranks"
                )


@pytest.mark.slow
def test_twenty_float32_steps_track_single_device():
    cases = [
        ("cola", "btp", True, "online", False),
        ("lax", "btp", True, "online", False),
        # LaX's norm and gate read a rank's tokens: their summed gradients keep them equal on every rank
        ("lax", "btp", True, "online", True),
        ("cola", "vanilla", False, "online", False),
        ("full", "megatron", False, "online", False),
    ]
    run_distributed(_training_body, 2, cases)


def _sequential_body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (world_size,))
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    d, r = 32, 8
    ref = nn.Sequential(nn.Linear(d, r), nn.SiLU(), nn.Linear(r, d))
    block = nn.Sequential(nn.Linear(d, r), nn.SiLU(), nn.Linear(r, d))
    block.load_state_dict(ref.state_dict())
    parallelize_module(block, mesh, BoostParallelStyle())
    x = torch.randn(3, 5, d, generator=torch.Generator().manual_seed(1))
    shard = d // world_size
    x_local = x[..., rank * shard : (rank + 1) * shard].clone().requires_grad_()
    x_ref = x.clone().requires_grad_()
    y_ref = ref(x_ref)
    y_local = block(x_local)
    torch.testing.assert_close(y_local, y_ref[..., rank * shard : (rank + 1) * shard], rtol=1e-12, atol=1e-12)
    # backward through the local shard of the output, with a known upstream gradient
    gy = torch.randn(3, 5, d, generator=torch.Generator().manual_seed(2))
    (y_ref * gy).sum().backward()
    (y_local * gy[..., rank * shard : (rank + 1) * shard]).sum().backward()
    torch.testing.assert_close(
        x_local.grad, x_ref.grad[..., rank * shard : (rank + 1) * shard], rtol=1e-12, atol=1e-12
    )
    ref_params = dict(ref.named_parameters())
    for name, p in block.named_parameters():
        torch.testing.assert_close(_full(p.grad), ref_params[name].grad, rtol=1e-12, atol=1e-12)

    # the latent on this rank's tokens (sequence_parallel): A's bias read on a rank's rows, its gradient summed
    sp_block = nn.Sequential(nn.Linear(d, r), nn.SiLU(), nn.Linear(r, d))
    sp_block.load_state_dict(ref.state_dict())
    parallelize_module(sp_block, mesh, BoostParallelStyle(sequence_parallel=True))
    ref.zero_grad()
    x = x[:2]  # 10 tokens, split over the ranks
    x_local = x[..., rank * shard : (rank + 1) * shard].clone().requires_grad_()
    x_ref = x.clone().requires_grad_()
    y_local = sp_block(x_local)
    torch.testing.assert_close(
        y_local, ref(x_ref)[..., rank * shard : (rank + 1) * shard], rtol=1e-12, atol=1e-12
    )
    (ref(x_ref) * gy[:2]).sum().backward()
    (y_local * gy[:2, ..., rank * shard : (rank + 1) * shard]).sum().backward()
    torch.testing.assert_close(
        x_local.grad, x_ref.grad[..., rank * shard : (rank + 1) * shard], rtol=1e-12, atol=1e-12
    )
    for name, p in sp_block.named_parameters():
        torch.testing.assert_close(_full(p.grad), ref_params[name].grad, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"sequence_parallel: the latent's 15 tokens .* split over 2"):
        sp_block(torch.randn(3, 5, shard))
    with pytest.raises(ValueError, match=r"'1' holds parameters and would run on this rank's tokens only"):
        parallelize_module(
            nn.Sequential(nn.Linear(d, r), nn.LayerNorm(r), nn.Linear(r, d)),
            mesh,
            BoostParallelStyle(sequence_parallel=True),
        )

    # a module with no recognisable bottleneck is refused at parallelize time
    with pytest.raises(ValueError, match="no bottleneck"):
        parallelize_module(nn.Sequential(nn.Linear(d, d)), mesh, BoostParallelStyle())
    with pytest.raises(
        ValueError, match=r"tensor-parallel degree 2 must divide 0\.in_features \(the full dim d\) = 33"
    ):
        parallelize_module(nn.Sequential(nn.Linear(d + 1, r), nn.Linear(r, d)), mesh, BoostParallelStyle())


@pytest.mark.slow
def test_vanilla_runs_fewer_kv_heads_than_ranks():
    # vanilla shards only the rank (and the vocabulary): attention runs whole on every rank, so one kv head
    # splits over 2 ranks, where btp and megatron shard the heads and are refused (the unit test below)
    cases = [("cola", "vanilla", False, "online", False), ("lax", "vanilla", False, "online", False)]
    run_distributed(_parity_body, 2, cases, 1, contextlib.nullcontext, {"rank": 16})


@pytest.mark.slow
def test_boost_parallel_style_on_a_plain_sequential():
    run_distributed(_sequential_body, 2)


def test_apply_tp_refuses_shapes_that_do_not_divide():
    # the check runs before any sharding
    from boost.training.parallel import check_tp_shapes

    args = _args("cola", True)
    # each scheme checks the dims it shards: vanilla's heads and FFN stay whole on every rank
    narrow = ModelArgs.from_flavor(
        "debug", vocab_size=VOCAB, n_kv_heads=1, ffn_dim=705, rank=16, group_linears=False
    )
    check_tp_shapes(narrow, 2, "vanilla")
    dense = ModelArgs.from_flavor("debug", linear="full", vocab_size=VOCAB, ffn_dim=705)
    for model, t, scheme, sequence_parallel, message in (
        (args, 8, "btp", False, "tensor_parallel_degree = 8: must divide kv_heads = 4"),  # debug's 4 kv heads
        (args, 2, "megatron", False, "megatron is the dense baseline"),
        (args, 2, "vanilla", False, "group_linears = false"),
        (args, 2, "ring", False, "unknown"),
        (narrow, 2, "btp", False, "tensor_parallel_degree = 2: must divide kv_heads = 1"),
        (dense, 2, "megatron", False, "tensor_parallel_degree = 2: must divide ffn_dim = 705"),
        # apply_tp applies a plan on one rank too: the kind and grouping are the scheme's there as well
        (args, 1, "megatron", False, "megatron is the dense baseline"),
        (args, 1, "vanilla", False, "group_linears = false"),
        # a plan the scheme does not have is refused, not run without it
        (narrow, 2, "vanilla", True, "sequence_parallel = True: vanilla has no such plan"),
    ):
        with pytest.raises(ValueError, match=message):
            check_tp_shapes(model, t, scheme, sequence_parallel)

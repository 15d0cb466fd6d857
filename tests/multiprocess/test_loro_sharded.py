"""LORO on sharded factors equals LORO on one process (float64), in every layout it runs in.

One group of 4 gloo processes; the 2-rank layouts run on one dim of a ``2 × 2`` mesh (the other dim
holds a second copy of the same run). Each layout trains the same model on the same batches for 5
steps — lazy 1, 3, 5; exact 2 (no refresh), 4 (+ refresh) — and must match the one-process run
(computed on every rank) in each step's loss and in the factors after every step, gathered, to 1e-10
relative. Not bitwise: sums over row shards (the Gram matrices, the cross products) and FSDP's
reduce-scatter add in another order. The exact step at 2, with no refresh after it, would diverge
if any layout picked other SVD signs than one process does.

Communication, counted on the optimizer step alone (``boost.CommCounter``): a lazy step issues no
collective in any layout; an exact step under btp and vanilla issues what
``boost.planning.comm_volume.loro_exact_step`` says, and every collective keeps NCCL's rules.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from boost import CommCounter, ModelArgs, Transformer
from boost.planning.comm_volume import loro_exact_step
from boost.training.optim import LORO
from boost.training.parallel import apply_tp
from tests.distributed import run_distributed
from torchtitan_ext.infra.parallelize import apply_fsdp

WORLD = 4
STEPS = 5
SETTINGS = dict(lr=2e-2, weight_decay=0.1, loro_freq=2, refresh_freq=4)


def _args(grouped: bool) -> ModelArgs:
    # GQA (q apart from the batched k/v), every dim divisible by 4, 2r = the k/v width
    return ModelArgs(
        dim=64,
        n_layers=1,
        n_heads=8,
        n_kv_heads=4,
        vocab_size=64,
        ffn_dim=128,
        rank=16,
        max_seq_len=16,
        linear="svd",
        group_linears=grouped,
        init_seed=3,
    )


def _model(grouped: bool, tp_mesh=None, scheme: str = "btp", fsdp_mesh=None) -> Transformer:
    """The trainer's order: meta, TP, FSDP2 (BOOST's apply_fsdp), materialise, seeded init."""
    with torch.device("meta"):
        model = Transformer(_args(grouped))
    if tp_mesh is not None:
        apply_tp(model, tp_mesh, scheme=scheme, norm="online" if grouped else "sync")
    if fsdp_mesh is not None:
        apply_fsdp(model, fsdp_mesh, param_dtype=torch.float64, reduce_dtype=torch.float64, pp_enabled=False)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(
                    True
                )  # gloo refuses PREMUL_SUM (as parallelize_boost)
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_weights()
    return model


def _whole(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _train(model: Transformer, batches, copies: int = 1, counted: dict | None = None):
    """Losses and factor snapshots of STEPS LORO steps; ``copies``: ranks that reduce-scatter the same batch."""
    optimizer = LORO(model, **SETTINGS)
    losses, snapshots = [], []
    for step, tokens in enumerate(batches, start=1):
        logits = _whole(model(tokens[:, :-1]))
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        (loss / copies).backward()
        with CommCounter() as comm:
            optimizer.step()
        optimizer.zero_grad()
        if counted is not None:
            counted[step] = comm
        losses.append(loss.detach())
        snapshots.append({p.name: (_whole(p.up).clone(), _whole(p.down).clone()) for p in optimizer.pairs})
    return torch.stack(losses), snapshots


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _body(rank: int, world_size: int) -> None:
    torch.set_default_dtype(torch.float64)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 64, (2, 17), generator=gen) for _ in range(STEPS)]
    reference = {grouped: _train(_model(grouped), batches) for grouped in (True, False)}

    mesh22 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
    two, other = mesh22["b"], mesh22["a"]
    layouts = {  # name: (grouped, tp mesh, scheme, fsdp mesh)
        "fsdp 2": (True, None, "btp", two),
        "btp tp 2": (True, two, "btp", None),
        "vanilla tp 2": (False, two, "vanilla", None),
        "fsdp 2 x btp tp 2": (True, two, "btp", other),
        "fsdp 2 x vanilla tp 2": (False, two, "vanilla", other),
    }
    table = []
    for name, (grouped, tp_mesh, scheme, fsdp_mesh) in layouts.items():
        counted: dict = {}
        model = _model(grouped, tp_mesh, scheme, fsdp_mesh)
        losses, snapshots = _train(model, batches, fsdp_mesh.size() if fsdp_mesh else 1, counted)
        ref_losses, ref_snapshots = reference[grouped]
        loss_diff = ((losses - ref_losses).abs() / ref_losses).max().item()
        factor_diff = max(
            _rel(got, want)
            for got_step, want_step in zip(snapshots, ref_snapshots)
            for pair in want_step
            for got, want in zip(got_step[pair], want_step[pair])
        )
        assert loss_diff <= 1e-10 and factor_diff <= 1e-10, (name, loss_diff, factor_diff)
        for step in (1, 3, 5):  # lazy
            assert counted[step].total_count() == 0, (name, step, counted[step].summary())
        exact = counted[4]
        if fsdp_mesh is None:
            args = model.model_args
            want = {
                kind: (n * args.n_layers, e * args.n_layers * 8)
                for kind, (n, e) in loro_exact_step(args, scheme).items()
            }
            got = {kind: (exact.counts[kind], exact.bytes[kind]) for kind in exact.counts}
            assert got == want, (name, got, want)
        table.append(f"| {name} | {loss_diff:.1e} | {factor_diff:.1e} | {exact.summary()} |")
    if rank == 0:
        print(
            "\n| layout | loss max rel. diff | factors max rel. diff | exact step's collectives (1 layer, fp64) |"
        )
        print("|---|---|---|---|")
        print("\n".join(table))


@pytest.mark.slow
def test_loro_on_sharded_factors_equals_one_process():
    run_distributed(_body, WORLD)

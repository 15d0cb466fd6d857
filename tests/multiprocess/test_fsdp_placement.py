"""FSDP2 gives every rank its share of every parameter, the batched ``[G, d_out, r]`` up-projections
included (sharded on ``r``: ``torchtitan_ext.infra.parallelize.shard_placement``), and the model computes
what it did on one process.

FSDP2's default, dim 0, is G = 2 or 3 for a batched weight: at an FSDP degree of 4 the first ranks
hold whole members and the last none. The debug model has those shapes (``[2, 128, r]`` for k/v,
``[2, f, r]`` for gate/up), so 4 ranks show the difference.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, Shard

from boost import ModelArgs, Transformer
from boost.training.parallel import apply_tp
from tests.distributed import run_distributed
from torchtitan_ext.infra.parallelize import apply_fsdp

WORLD = 4


def _args() -> ModelArgs:
    args = ModelArgs.from_flavor("debug", linear="cola", vocab_size=256, n_layers=2, max_seq_len=16)
    args.init_seed = 7
    return args


def _sharded(mesh, tp_mesh=None) -> Transformer:
    """The trainer's order: build on meta, TP, FSDP (BOOST's ``apply_fsdp``), materialise, seeded init."""
    with torch.device("meta"):
        model = Transformer(_args())
    if tp_mesh is not None:
        apply_tp(model, tp_mesh, scheme="btp")
    apply_fsdp(model, mesh, param_dtype=torch.float64, reduce_dtype=torch.float64, pp_enabled=False)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)  # gloo refuses PREMUL_SUM (as parallelize_boost)
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_weights()
    return model


def _over_share(model: Transformer, fsdp: int) -> dict[str, tuple[int, int]]:
    """Parameters this rank holds more of than its FSDP share of its TP shard: name -> (held, share).

    The share is ``ceil(numel / (fsdp · t))``, ``t`` the TP degree where TP shards the parameter
    (placements ``(fsdp, tp)``) and 1 where it is replicated over TP (the final norm) or there is no TP.
    """
    over = {}
    for name, p in model.named_parameters():
        tp_mesh_dims = range(1, p.device_mesh.ndim)
        t = math.prod(p.device_mesh.size(i) for i in tp_mesh_dims if isinstance(p.placements[i], Shard))
        held, share = p.to_local().numel(), math.ceil(p.numel() / (fsdp * t))
        if held > share:
            over[name] = (held, share)
    return over


def _placement_body(rank: int, world_size: int) -> None:
    torch.set_default_dtype(torch.float64)
    reference = Transformer(_args())
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))

    def loss_of(model: Transformer) -> torch.Tensor:
        logits = model(tokens)
        logits = logits.full_tensor() if isinstance(logits, DTensor) else logits
        return F.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 1).flatten())

    ref_loss = loss_of(reference)
    ref_loss.backward()
    meshes = {"fsdp4": (init_device_mesh("cpu", (4,), mesh_dim_names=("fsdp",)), None)}
    mesh2d = init_device_mesh("cpu", (2, 2), mesh_dim_names=("fsdp", "tp"))
    meshes["fsdp2 x tp2"] = (mesh2d["fsdp"], mesh2d["tp"])
    for tag, (mesh, tp_mesh) in meshes.items():
        model = _sharded(mesh, tp_mesh)
        over = _over_share(model, mesh.size())
        assert over == {}, f"{tag} rank {rank}: {over}"
        batched = {n: p for n, p in model.named_parameters() if p.dim() == 3}
        assert batched, tag
        for name, p in batched.items():
            assert p.placements[0] == Shard(2), f"{tag}: {name} {p.placements}"
        # Same model, same math: the seeded init fills each [G, d_out/t, r/fsdp] box with the
        # reference's values (exact: the same tiles); forward and backward through the dim-2
        # all-gather and reduce-scatter match one process (fp64; sums reordered -> close, not exact).
        # Every rank sees the same batch, so the reduce-scattered gradient is the sum of WORLD/tp copies.
        copies = WORLD // (tp_mesh.size() if tp_mesh is not None else 1)
        ref_params = dict(reference.named_parameters())
        for name, p in model.named_parameters():
            assert torch.equal(p.full_tensor().detach(), ref_params[name].detach()), f"{tag}: {name} init"
        loss = loss_of(model)
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-12, atol=0)
        loss.backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(
                p.grad.full_tensor(),
                copies * ref_params[name].grad,
                rtol=1e-10,
                atol=1e-14,
                msg=lambda m, name=name, tag=tag: f"{tag}: {name} grad: {m}",
            )

    # negative control: FSDP2's default placement (dim 0) leaves the batched weights over-shared here
    with torch.device("meta"):
        plain = Transformer(_args())
    mesh = meshes["fsdp4"][0]
    for block in plain.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(plain, mesh=mesh)
    if rank == 0:
        over = _over_share(plain, WORLD)
        assert over and all(plain.get_parameter(n).dim() == 3 for n in over), over


@pytest.mark.slow
def test_every_fsdp_rank_holds_its_share_and_the_math_is_unchanged():
    run_distributed(_placement_body, WORLD)

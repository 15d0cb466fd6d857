"""Init that draws only a rank's shard gives the same model, bit for bit, in every layout.

The trainer's order: build on ``meta``, parallelise (TP, FSDP2, pipeline split), ``to_empty``, then
``init_weights`` — each rank fills only its DTensor shards. Gathered, they must equal the model a
single process initialises: exactly, since every value is a function of (name, seed, global index).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

import boost.training.model.keyed_normal as keyed_normal
from boost import ModelArgs, Transformer
from boost.training.model.seeded_init import SeededPart, draw_region, fill_seeded
from boost.training.parallel import apply_tp
from tests.distributed import run_distributed
from torchtitan_ext.infra.parallelize import apply_fsdp

DEFAULT_CHUNK = keyed_normal.CHUNK

# (kind, grouped, scheme, chunk): the placements differ: btp shards A on d_in and B on d_out, vanilla
# A on r and B on r, megatron the dense weights, LaX's crossings are replicated; grouped A_qkv /
# batched B_kv are multi-part. The default chunk draws each of the debug model's shards at once; 48
# elements cut them mid-row, and the single-process reference is drawn at the default.
FSDP_TP_CASES = [
    ("cola", True, "btp", DEFAULT_CHUNK),
    ("cola", True, "btp", 48),
    ("svd", False, "vanilla", 48),
    ("full", False, "megatron", 48),
    # LaX's gates and norms: replicated beside BTP's sharded factors, and beside vanilla's rank-sharded ones
    ("lax", True, "btp", 48),
    ("lax", False, "vanilla", 48),
]
PP_TP_CASES = [("cola", True, "btp", 48)]


def _args(kind: str, grouped: bool) -> ModelArgs:
    args = ModelArgs.from_flavor(
        "debug", linear=kind, vocab_size=256, n_layers=2, group_linears=grouped, max_seq_len=16
    )
    args.init_seed = 7
    return args


def _reference(kind: str, grouped: bool, chunk: int) -> dict[str, torch.Tensor]:
    keyed_normal.CHUNK = DEFAULT_CHUNK
    try:
        return {n: p.detach() for n, p in Transformer(_args(kind, grouped)).named_parameters()}
    finally:
        keyed_normal.CHUNK = chunk


def _build_on_meta(kind: str, grouped: bool) -> Transformer:
    with torch.device("meta"):
        return Transformer(_args(kind, grouped))


def _init(model: Transformer) -> Transformer:
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_weights()
    return model


def _assert_same(model: Transformer, ref: dict[str, torch.Tensor], tag: str) -> None:
    assert any(True for _ in model.parameters()), tag
    for name, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        assert torch.equal(full.detach(), ref[name]), f"{tag}: {name} differs from the single-process init"


def _layouts_body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("fsdp", "tp"))
    for kind, grouped, scheme, chunk in FSDP_TP_CASES:
        keyed_normal.CHUNK = chunk
        model = apply_tp(_build_on_meta(kind, grouped), mesh["tp"], scheme=scheme)
        # the trainer's FSDP wrapping and placements (batched up-projections sharded on r)
        apply_fsdp(
            model, mesh["fsdp"], param_dtype=torch.float32, reduce_dtype=torch.float32, pp_enabled=False
        )
        _assert_same(
            _init(model), _reference(kind, grouped, chunk), f"fsdp2 x tp2 {kind}/{scheme}/chunk {chunk}"
        )

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
    stage = mesh["pp"].get_local_rank()
    for kind, grouped, scheme, chunk in PP_TP_CASES:
        keyed_normal.CHUNK = chunk
        model = _build_on_meta(kind, grouped)
        # a pipeline split at the block boundary, as torchtitan's: stage 0 keeps the embedding and
        # block 0, stage 1 block 1, the final norm and the head
        del model.layers[str(1 - stage)]
        if stage == 0:
            model.norm, model.output = None, None
        else:
            model.tok_embeddings = None
        apply_tp(model, mesh["tp"], scheme=scheme)
        _assert_same(
            _init(model),
            _reference(kind, grouped, chunk),
            f"pp2 x tp2 stage {stage} {kind}/{scheme}/chunk {chunk}",
        )
    dist.barrier()


@pytest.mark.slow
def test_fsdp_x_tp_and_pp_x_tp_init_equal_single_process():
    run_distributed(_layouts_body, 4)


@pytest.mark.parametrize("chunk", [100, 1000], ids=["chunks_cut_rows", "chunks_of_rows"])
def test_a_region_is_the_same_values_as_the_whole_part(monkeypatch, chunk):
    part = SeededPart("layers.0.attention.q.A", (300, 520), 0.5)
    whole = draw_region(part, 3, [slice(0, 300), slice(0, 520)])
    region = [slice(37, 290), slice(255, 513)]
    monkeypatch.setattr(keyed_normal, "CHUNK", chunk)
    assert torch.equal(draw_region(part, 3, region), whole[37:290, 255:513])
    vector = SeededPart("a.vector", (1000,), 1.0)
    assert torch.equal(
        draw_region(vector, 3, [slice(10, 900)]), draw_region(vector, 3, [slice(0, 1000)])[10:900]
    )
    # another name or another seed draws other values
    other = draw_region(
        SeededPart("layers.0.attention.k.A", (300, 520), 0.5), 3, [slice(0, 300), slice(0, 520)]
    )
    assert not torch.equal(whole, other)
    assert not torch.equal(whole, draw_region(part, 4, [slice(0, 300), slice(0, 520)]))
    assert abs(whole.std().item() - 0.5) < 0.01


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_parameter_of_any_dtype_holds_the_float32_values_rounded(dtype):
    part = SeededPart("layers.0.attention.q.A", (300, 520), 0.5)
    param = torch.empty(300, 520, dtype=dtype)
    fill_seeded(param, part, 3)
    assert torch.equal(param, draw_region(part, 3, [slice(0, 300), slice(0, 520)]).to(dtype))


def test_a_model_built_on_meta_initialises_on_any_ambient_device():
    """The GPU path on the CPU: under an ambient device (``with torch.device("cuda")`` on a GPU; here
    ``meta``) the values are drawn on the parameter's device, never the ambient one; and a model built
    on meta, then initialised on its device, equals one built there."""
    part = SeededPart("layers.0.attention.q.A", (300, 520), 0.5)
    want = draw_region(part, 3, [slice(0, 300), slice(0, 520)])
    param = torch.empty(300, 520)
    with torch.device("meta"):
        got = draw_region(part, 3, [slice(0, 300), slice(0, 520)], device="cpu")
        fill_seeded(param, part, 3)
    assert got.device.type == "cpu" and torch.equal(got, want) and torch.equal(param, want)

    from boost import ModelArgs, Transformer

    args = ModelArgs.from_flavor("debug", vocab_size=512, init_seed=1)
    eager = Transformer(args)
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device="cpu")
    model.init_weights(buffer_device=torch.device("cpu"))
    for (name, a), b in zip(eager.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name

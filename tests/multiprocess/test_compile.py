"""torch.compile of the three schemes and of low-rank activation checkpointing (2 gloo processes).

Blocks are compiled one by one with ``fullgraph=True``, as torchtitan's ``apply_compile`` does. The
backends here run the graphs AOTAutograd produces eagerly (what ``aot_eager`` does), counting the
compiles and the collectives in the forward and backward graphs; the partitioner is either
AOTAutograd's default (``aot_eager``'s) or the min-cut one (inductor's). Inductor itself compiles
one BTP bottleneck here, the online norm and the grouped down-projection with their collectives,
against eager (on every torch of the range: the compatibility tier), and the low-rank-checkpointed
BTP blocks in the trainer's tests (``tests/end_to_end/test_feature_matrix.py``'s GPU rows' layout, whose
rank 0 reads the compiled graphs' inputs: ``tests/end_to_end/compiled_graphs_probe.py``).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.parallel import loss_parallel

from boost import ModelArgs, Transformer
from boost.training.parallel import apply_lowrank_ac, apply_tp
from tests.distributed import run_distributed

VOCAB, SEQ = 256, 32
_c10d = torch.ops._c10d_functional
COLLECTIVES = {
    _c10d.all_reduce.default,
    _c10d.all_reduce_coalesced.default,
    _c10d.all_gather_into_tensor.default,
    _c10d.reduce_scatter_tensor.default,
}


class CountingBackend:
    """A torch.compile backend that counts compiled frames and the collectives of each graph."""

    def __init__(self, min_cut: bool = False):
        self.frames = 0
        self.collectives = {"forward": 0, "backward": 0}
        self.min_cut = min_cut

    def _compiler(self, direction: str):
        def compile_graph(gm: torch.fx.GraphModule, example_inputs):
            self.collectives[direction] += sum(
                n.op == "call_function" and n.target in COLLECTIVES for n in gm.graph.nodes
            )
            return gm.forward

        return compile_graph

    def __call__(self, gm, example_inputs):
        from functorch.compile import min_cut_rematerialization_partition
        from torch._dynamo.backends.common import aot_autograd

        self.frames += 1
        extra = {"partition_fn": min_cut_rematerialization_partition} if self.min_cut else {}
        return aot_autograd(
            fw_compiler=self._compiler("forward"), bw_compiler=self._compiler("backward"), **extra
        )(gm, example_inputs)


def _build(
    args: ModelArgs, mesh, scheme: str, ac: str = "none", backend=None, sequence_parallel: bool = False
):
    torch.manual_seed(0)
    norm = "online" if args.grouped else "sync"
    model = apply_tp(Transformer(args), mesh, scheme=scheme, norm=norm, sequence_parallel=sequence_parallel)
    if ac == "lowrank":
        apply_lowrank_ac(model, compiled=backend is not None)
    if backend is not None:
        for layer_id, block in model.layers.named_children():
            model.layers.register_module(layer_id, torch.compile(block, backend=backend, fullgraph=True))
    return model


def _train(model, steps: int) -> tuple[list[float], list[torch.Tensor]]:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=False)
    curve = []
    for step in range(steps):
        tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        with loss_parallel():
            loss = F.cross_entropy(model(tokens).flatten(0, 1), tokens.roll(-1, 1).flatten())
            loss.backward()
        grads = [p.grad.full_tensor() for p in model.parameters()]
        opt.step()
        curve.append(loss.item())
    return curve, grads


def _close(got: list[float], want: list[float], what: str) -> None:
    # the compiled graphs reorder fp32 sums; a wrong gradient moves the loss by ≥1e-2 in 3 steps
    for step, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= 1e-5 * abs(b), f"{what}, step {step}: {a} vs {b}"


SCHEMES = [
    ("btp", "cola", True),
    ("btp", "lax", True),
    ("vanilla", "cola", False),
    ("megatron", "full", False),
]


def _one_graph_body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (world_size,))
    for scheme, kind, grouped in SCHEMES:
        # 3 blocks: a per-block recompile shows in the frame count below (3, not 1; LaX 3, not 2); at 9
        # blocks it would also hit dynamo's recompile limit (8) and fail fullgraph
        args = ModelArgs.from_flavor(
            "debug", linear=kind, vocab_size=VOCAB, n_layers=3, max_seq_len=SEQ, group_linears=grouped
        )
        torch._dynamo.reset()
        backend = CountingBackend()
        compiled, _ = _train(_build(args, mesh, scheme, backend=backend), steps=3)
        eager, _ = _train(_build(args, mesh, scheme), steps=3)
        _close(compiled, eager, f"{scheme}/{kind}")
        # LaX's first block has no incoming latent (one graph), every later block one (the other)
        assert backend.frames == (2 if kind == "lax" else 1), (scheme, kind, backend.frames)


@pytest.mark.slow
def test_every_block_shares_one_compiled_graph_and_training_matches_eager():
    run_distributed(_one_graph_body, 2)


def _lowrank_body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (world_size,))
    # cola: the all-reduces; lax with sequence parallelism: the reduce-scatters and all-gathers the latent lives
    # between (and LaX's norm/gate gradients' all-reduce), each of which the policy must keep too
    for kind, sp, n_layers in (("cola", False, 4), ("lax", True, 2)):
        args = ModelArgs.from_flavor(
            "debug", linear=kind, vocab_size=VOCAB, n_layers=n_layers, max_seq_len=SEQ
        )
        eager_curve, eager_grads = _train(_build(args, mesh, "btp", sequence_parallel=sp), steps=3)
        for min_cut in (False, True):
            counts = {}
            for ac in ("none", "lowrank"):
                torch._dynamo.reset()
                backend = CountingBackend(min_cut=min_cut)
                model = _build(args, mesh, "btp", ac=ac, backend=backend, sequence_parallel=sp)
                curve, grads = _train(model, steps=3)
                _close(curve, eager_curve, f"{kind}, sp {sp}, ac {ac}, min-cut {min_cut}")
                for a, b in zip(grads, eager_grads):
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
                counts[ac] = dict(backend.collectives)
            # the low-rank recompute adds no collective to the backward graph, and the forward keeps its own
            assert counts["lowrank"] == counts["none"], (kind, sp, min_cut, counts)
            assert counts["none"]["backward"] > 0, counts
            if kind == "cola":  # a BTP block's 4 all-reduces (qkv, o, gate/up, down)
                assert counts["none"]["forward"] == 4, counts


@pytest.mark.slow
@pytest.mark.compat  # on torch 2.11, a no-op .to() in the online norm's forward froze γ and A (fp32)
def test_compiled_lowrank_checkpointing_adds_no_collective_and_matches_eager():
    run_distributed(_lowrank_body, 2)


def _bottleneck_step(module, x: torch.Tensor, mesh) -> list[torch.Tensor]:
    """This rank's shards of the bottleneck's outputs (local tensors, as the plan hands them on), and of
    the gradients of its input and of its parameters after one backward of a loss on those outputs."""
    x = distribute_tensor(x, mesh, [Shard(-1)]).detach().requires_grad_()
    ys = module(x)
    sum(y.pow(2).sum() for y in ys).backward()
    return [*ys, x.grad.to_local(), *(p.grad.to_local() for p in module.parameters())]


def _inductor_body(rank: int, world_size: int) -> None:
    mesh = init_device_mesh("cpu", (world_size,))
    args = ModelArgs.from_flavor("debug", linear="cola", vocab_size=VOCAB, n_layers=1, max_seq_len=SEQ)
    # q/k/v: the online norm fused into the grouped down-projection's all-reduce, SiLU, q's up-projection
    # and k/v's batched one (GQA), and the latent's gradient all-reduce in backward; with sp, the latent on
    # a rank's rows between reduce-scatters and all-gathers (the functional collectives of the torch at hand)
    for sp in (False, True):
        torch._dynamo.reset()  # each layout compiled afresh (a second compile would turn its shapes dynamic)
        torch.manual_seed(0)
        model = apply_tp(Transformer(args), mesh, scheme="btp", norm="online", sequence_parallel=sp)
        eager = model.layers["0"].attention.wqkv
        compiled = torch.compile(copy.deepcopy(eager), backend="inductor", fullgraph=True)
        x = torch.randn(2, SEQ, args.dim, generator=torch.Generator().manual_seed(1))
        want = _bottleneck_step(eager, x, mesh)
        got = _bottleneck_step(compiled, x, mesh)
        assert len(got) == len(want) == 3 + 1 + 4  # q, k, v; x; γ, A, B_q, B_kv
        for i, (a, b) in enumerate(zip(got, want)):
            # inductor's fused kernels reorder fp32 sums (~3e-7 of the largest value here); a gradient
            # compiled wrong, or frozen at zero, is off by its own size
            error = ((a - b).abs().max() / b.abs().max()).item()
            assert error < 1e-5, (sp, i, error)


@pytest.mark.slow
@pytest.mark.compat  # inductor on the oldest torch of the range too, the GPU images' (2.11)
def test_inductor_compiles_a_btp_bottleneck_to_eagers_values_and_gradients():
    run_distributed(_inductor_body, 2)

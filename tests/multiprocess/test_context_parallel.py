"""Context parallelism × tensor parallelism against the one-process model, float64, on real gloo process groups.

The batch is prepared as the trainer prepares it (``context_parallel.prepare_batch``: masks, then
torchtitan's head-tail sharding of inputs, labels and positions), the attention as the trainer applies it
(``apply_context_parallel``: torch's ring over the CPU's SDPA kernel for causal, all-gathered keys and values
for block_causal). Each rank's loss is its tokens' share of the mean; the gradient is its sum over the CP ranks
(FSDP's reduce-scatter over dp_shard × cp does that in the trainer). At tp 1 the collectives counted
(``CommCounter``) are the attention's, each layer's ``comm_volume.context_parallel_layer``. Tolerance: the
ring merges partial softmaxes and every collective sums in another order than the one-process kernels, so
float64 agrees to rounding (≤1e-10 relative), not bit for bit.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel

from boost.planning.comm_volume import context_parallel_layer
from boost.runtime.comm_counter import CommCounter
from boost.training.model import ModelArgs
from boost.training.parallel import apply_tp
from tests.distributed import run_distributed

VOCAB, SEQ, BATCH, BOS, EOS = 256, 32, 2, 1, 2
TOL = 1e-10

# (linear kind, tp scheme, mask, cp, tp, how the ring passes keys on) at world size 4
CASES = [
    ("cola", "btp", "causal", 2, 2, "allgather"),
    ("cola", "btp", "block_causal", 2, 2, "allgather"),
    ("cola", "vanilla", "block_causal", 2, 2, "allgather"),
    ("full", "megatron", "causal", 2, 2, "alltoall"),
    ("lax", "btp", "causal", 4, 1, "alltoall"),
    ("cola", "btp", "causal", 4, 1, "allgather"),
    ("svd", "btp", "block_causal", 4, 1, "allgather"),
]


def _packed_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """``[BATCH, SEQ]`` inputs and labels: documents of 3-12 tokens framed [BOS] ids [EOS], several a window."""
    g = torch.Generator().manual_seed(0)
    stream: list[int] = []
    while len(stream) < BATCH * (SEQ + 1):
        n = int(torch.randint(1, 11, (1,), generator=g))
        stream += [BOS, *torch.randint(3, VOCAB, (n,), generator=g).tolist(), EOS]
    windows = torch.tensor(stream[: BATCH * (SEQ + 1)]).view(BATCH, SEQ + 1)
    return windows[:, :-1], windows[:, 1:]


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _body(rank: int, world_size: int) -> None:
    from torchtitan_ext.infra.context_parallel import apply_context_parallel, prepare_batch
    from torchtitan_ext.model import JobTransformer

    torch.set_default_dtype(torch.float64)
    tokenizer = SimpleNamespace(eos_id=EOS)
    inputs, labels = _packed_batch()
    for kind, scheme, mask, cp, tp, rotate in CASES:
        tag = f"{kind}/{scheme}/{mask}/cp={cp}/tp={tp}/{rotate}"
        mesh = init_device_mesh("cpu", (cp, tp), mesh_dim_names=("cp", "tp"))
        args = ModelArgs.from_flavor(
            "debug",
            linear=kind,
            vocab_size=VOCAB,
            n_layers=2,
            max_seq_len=SEQ,
            group_linears=scheme != "vanilla",
            attn_mask_type=mask,
        )
        torch.manual_seed(0)
        ref = JobTransformer(args)
        masks = ref.get_attention_masks(inputs, tokenizer)
        loss_ref = F.cross_entropy(ref(inputs, attention_masks=masks).flatten(0, 1), labels.flatten())
        loss_ref.backward()

        torch.manual_seed(0)
        model = JobTransformer(args)
        if tp > 1:
            apply_tp(model, mesh["tp"], scheme=scheme, norm="sync" if scheme == "vanilla" else "online")
        apply_context_parallel(model, mesh["cp"], "sdpa", mask, rotate)
        local_inputs, local_labels, _, kwargs = prepare_batch(
            model, tokenizer, {"input": inputs}, labels, mesh["cp"], "headtail"
        )
        assert local_inputs.shape == (BATCH, SEQ // cp) and kwargs["positions"].shape == (BATCH, SEQ // cp)
        with loss_parallel(), CommCounter() as comm:
            logits = model(local_inputs, **kwargs)
            # this rank's tokens' share of the batch's mean loss
            loss = (
                F.cross_entropy(logits.flatten(0, 1), local_labels.flatten(), reduction="sum")
                / labels.numel()
            )
            loss.backward()
        if (
            tp == 1
        ):  # the attention's collectives alone, every layer's as boost.planning.comm_volume counts them
            want = context_parallel_layer(args, scheme, tp, BATCH, SEQ, cp, "sdpa", mask, rotate)
            for direction, backward in (("forward", False), ("backward", True)):
                layers = {k: (c * args.n_layers, e * args.n_layers) for k, (c, e) in want[direction].items()}
                assert comm.direction(backward) == layers, f"{tag}: {direction} {comm.direction(backward)}"
        total = _full(loss.detach()).clone()
        dist.all_reduce(total, group=mesh["cp"].get_group())
        assert abs(total.item() - loss_ref.item()) <= TOL * abs(loss_ref.item()), f"{tag}: loss"
        for name, ref_param in ref.named_parameters():
            grad = model.get_parameter(name).grad
            local = grad.to_local() if isinstance(grad, DTensor) else grad
            dist.all_reduce(local, group=mesh["cp"].get_group())  # FSDP's sum over the CP ranks
            err = _rel(_full(grad), ref_param.grad)
            assert err <= TOL, f"{tag}: grad of {name} off by {err:.2e}"


@pytest.mark.slow
def test_context_parallel_layouts_match_one_process_float64():
    run_distributed(_body, 4)

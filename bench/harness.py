"""Shared pieces of the CPU benchmarks: a gloo process group per run and a timed training step."""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import loss_parallel

from boost import ModelArgs, Transformer
from boost.runtime.comm_counter import CommCounter
from boost.runtime.memory import forward_held_bytes
from boost.runtime.process_exit import exit_finished_process
from boost.training.parallel import apply_lowrank_ac, apply_tp


def spawn(fn, world_size: int, *args) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` gloo processes; rank 0's return value."""
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")  # RSS tracks live tensors (boost.runtime.memory)
    with tempfile.TemporaryDirectory() as tmp:
        queue = mp.get_context("spawn").SimpleQueue()
        mp.spawn(_worker, args=(world_size, os.path.join(tmp, "init"), fn, args, queue), nprocs=world_size)
        return queue.get()


def threads_per_rank(world_size: int) -> int:
    """The intra-op threads each of ``world_size`` spawned ranks runs with: the machine's cores shared out."""
    return max(1, (os.cpu_count() or 1) // world_size)


def _worker(rank, world_size, init_file, fn, args, queue):
    torch.set_num_threads(threads_per_rank(world_size))
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        out = fn(rank, world_size, *args)
        if rank == 0:
            queue.put(out)  # a SimpleQueue writes to its pipe here, not from a feeder thread
    finally:
        dist.destroy_process_group()
    exit_finished_process()  # gloo can abort in interpreter finalisation (boost.runtime.process_exit)


def build(
    flavor: str,
    kind: str,
    scheme: str,
    mesh,
    norm="online",
    grouped=True,
    ac="none",
    seq=256,
    vocab=2048,
    **overrides,
):
    args = ModelArgs.from_flavor(
        flavor, linear=kind, vocab_size=vocab, group_linears=grouped, max_seq_len=seq, **overrides
    )
    torch.manual_seed(0)
    model = Transformer(args)
    if mesh is not None:
        apply_tp(model, mesh, scheme=scheme, norm=norm)
    if ac == "lowrank":
        apply_lowrank_ac(model)
    elif ac == "full":
        from torchtitan.config.job_config import ActivationCheckpoint
        from torchtitan.distributed.activation_checkpoint import apply_ac

        apply_ac(model, ActivationCheckpoint(mode="full"))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)


def compile_blocks(model, backend: str = "inductor"):
    """torch.compile each transformer block (fullgraph), as torchtitan's ``apply_compile`` does."""
    for layer_id, block in model.layers.named_children():
        model.layers.register_module(layer_id, torch.compile(block, backend=backend, fullgraph=True))
    return model


def train_step(model, opt, tokens, measure_memory: bool = False, fence: bool = True):
    """One step; returns (seconds, forward-held bytes or None). ``fence`` brackets the step with
    barriers so that every rank's time is the slowest rank's."""
    if fence:
        dist.barrier()
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with loss_parallel():
        if measure_memory:
            loss, held = forward_held_bytes(
                lambda: F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
            )
        else:
            loss, held = F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()), None
        loss.backward()
    opt.step()
    if fence:
        dist.barrier()
    return time.perf_counter() - start, held


def count_step(model, opt, tokens) -> CommCounter:
    """The collectives of one training step (the timing fences are not the model's: left out)."""
    with CommCounter() as comm:
        train_step(model, opt, tokens, fence=False)
    return comm


def median(xs):
    return statistics.median(xs)


def mesh_of(world_size: int):
    return init_device_mesh("cpu", (world_size,)) if world_size > 1 else None

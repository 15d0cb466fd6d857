"""Every rank of a world in this one process: torch's ``LocalTensorMode`` over a fake process group.

Under the mode a DTensor holds one local tensor per simulated rank, each op runs on every one of them, and
a collective combines them as the ranks' process group would. The numbers are real, at a world size this
machine cannot start as processes: TP 8, the GPUs of one node, in seconds. What it shows is what a plan
computes, not how a backend moves the bytes (``tests/distributed.py``'s gloo processes hold that).

``torch.distributed._local_tensor`` is torch's private API (it runs on every torch of the supported range);
the tests alone use it. A model is built whole and then distributed: BOOST's seeded initialisation of a
shard reads its offsets as whole numbers, which the mode makes one symbol a rank. Tried and not run under the
mode (torch 2.13, 2026-11-28): FSDP2, which frees a gathered parameter by resizing its storage ("invalid
python storage"), and context parallelism's ring attention, whose backward fails in the CPU kernel's bridge
(``torchtitan_ext.torch_private``); those layouts stay on gloo processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist


@contextlib.contextmanager
def simulated_ranks(world_size: int) -> Iterator[None]:
    """Run the block as all ``world_size`` ranks at once (this process holds no other process group); the
    default dtype and the global random state are put back after it."""
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("simulated_ranks starts its own process group, and this process has one")
    dtype, rng = torch.get_default_dtype(), torch.random.get_rng_state()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        with LocalTensorMode(world_size):
            yield
    finally:
        dist.destroy_process_group()
        torch.set_default_dtype(dtype)
        torch.random.set_rng_state(rng)


def outside_the_ranks() -> contextlib.AbstractContextManager:
    """Compute as one device inside ``simulated_ranks``: plain tensors, each op once (a reference model, the
    batch), rather than once a simulated rank."""
    from torch.distributed._local_tensor import maybe_disable_local_tensor_mode

    return maybe_disable_local_tensor_mode()

"""``CommCounter``: count and size every collective a rank issues, whatever issued it.

A ``TorchDispatchMode`` sees each collective op as the program asked for it — DTensor redistributes
and functional collectives (``_c10d_functional.*``), plain ``torch.distributed`` calls and FSDP2
(``c10d.*``), inside custom autograd Functions and in backward. Backend emulations (gloo runs a
reduce-scatter as an all-reduce) are below it and not counted.

Sizes are the un-sharded payload on one rank: all-reduce → the reduced tensor; all-gather → the
gathered (output) tensor; reduce-scatter → the (input) tensor being scattered; all-to-all → the input.
Under this mode ``torch.compile`` runs eagerly (as under torch's ``CommDebugMode``), so a compiled
graph's collectives are checked with ``torch._inductor.utils.run_and_get_code`` instead.

Example::

    >>> with CommCounter() as comm:
    ...     loss = model(tokens).sum(); loss.backward()
    >>> comm.counts["all_reduce"], comm.bytes["all_reduce"]
    (16, 1835008)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_funcol = torch.ops._c10d_functional
_c10d = torch.ops.c10d


def _nbytes(tensors) -> tuple[int, int, torch.dtype | None]:
    flat = [t for t in _flatten(tensors) if isinstance(t, torch.Tensor)]
    return sum(t.numel() for t in flat), sum(t.numel() * t.element_size() for t in flat), (flat[0].dtype if flat else None)


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _flatten(v)
    else:
        yield x


def _scaled(tensors, factor: int):
    elements, nbytes, dtype = _nbytes(tensors)
    return elements * factor, nbytes * factor, dtype


# op -> (kind, function of (args) giving the payload (elements, bytes, dtype))
_OPS = {
    _funcol.all_reduce.default: ("all_reduce", lambda a: _nbytes(a[0])),
    _funcol.all_reduce_.default: ("all_reduce", lambda a: _nbytes(a[0])),
    _funcol.all_reduce_coalesced.default: ("all_reduce", lambda a: _nbytes(a[0])),
    _funcol.all_gather_into_tensor.default: ("all_gather", lambda a: _scaled(a[0], a[1])),
    _funcol.all_gather_into_tensor_coalesced.default: ("all_gather", lambda a: _scaled(a[0], a[1])),
    _funcol.reduce_scatter_tensor.default: ("reduce_scatter", lambda a: _nbytes(a[0])),
    _funcol.reduce_scatter_tensor_coalesced.default: ("reduce_scatter", lambda a: _nbytes(a[0])),
    _funcol.all_to_all_single.default: ("all_to_all", lambda a: _nbytes(a[0])),
    _funcol.broadcast.default: ("broadcast", lambda a: _nbytes(a[0])),
    _c10d.allreduce_.default: ("all_reduce", lambda a: _nbytes(a[0])),
    _c10d.allreduce_coalesced_.default: ("all_reduce", lambda a: _nbytes(a[0])),
    _c10d._allgather_base_.default: ("all_gather", lambda a: _nbytes(a[0])),
    _c10d.allgather_.default: ("all_gather", lambda a: _nbytes(a[0])),
    _c10d.allgather_into_tensor_coalesced_.default: ("all_gather", lambda a: _nbytes(a[0])),
    _c10d._reduce_scatter_base_.default: ("reduce_scatter", lambda a: _nbytes(a[1])),
    _c10d.reduce_scatter_.default: ("reduce_scatter", lambda a: _nbytes(a[1])),
    _c10d.reduce_scatter_tensor_coalesced_.default: ("reduce_scatter", lambda a: _nbytes(a[1])),
    _c10d.alltoall_base_.default: ("all_to_all", lambda a: _nbytes(a[1])),
    _c10d.alltoall_.default: ("all_to_all", lambda a: _nbytes(a[1])),
    _c10d.broadcast_.default: ("broadcast", lambda a: _nbytes(a[0])),
}


@dataclass(frozen=True)
class CollectiveRecord:
    kind: str
    elements: int
    bytes: int
    dtype: torch.dtype | None
    backward: bool


class CommCounter(TorchDispatchMode):
    """Context manager counting collectives by kind: ``counts``, ``bytes``, ``elements``, ``records``."""

    def __init__(self) -> None:
        super().__init__()
        self.reset()

    def reset(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.bytes: dict[str, int] = defaultdict(int)
        self.elements: dict[str, int] = defaultdict(int)
        self.records: list[CollectiveRecord] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        spec = _OPS.get(func)
        if spec is not None:
            kind, size = spec
            elements, nbytes, dtype = size(args)
            self.counts[kind] += 1
            self.bytes[kind] += nbytes
            self.elements[kind] += elements
            in_backward = torch._C._current_graph_task_id() != -1
            self.records.append(CollectiveRecord(kind, elements, nbytes, dtype, in_backward))
        return func(*args, **(kwargs or {}))

    def direction(self, backward: bool) -> dict[str, tuple[int, int]]:
        """``{kind: (count, elements)}`` of the forward (``backward=False``) or backward collectives."""
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in self.records:
            if r.backward == backward:
                out[r.kind][0] += 1
                out[r.kind][1] += r.elements
        return {k: (c, e) for k, (c, e) in out.items()}

    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def total_count(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line for logs: ``all_reduce 16× 1.75 MiB, all_gather 2× 64.0 KiB``."""
        return ", ".join(f"{k} {self.counts[k]}× {_human(self.bytes[k])}" for k in sorted(self.counts)) or "none"


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"

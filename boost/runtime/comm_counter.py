"""``CommCounter``: count and size every collective this rank issues, whatever issued it.

A ``TorchDispatchMode`` sees each collective as the op the *program* dispatched:

- DTensor redistributes and functional collectives: ``_c10d_functional.{all_reduce,
  all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, broadcast}`` and their
  ``_coalesced`` / in-place / ``_out`` forms. Their ``wait_tensor`` and ``_wrap_tensor_autograd``
  are not collectives and are not counted; the ``_c10d_functional_autograd`` ops never reach this
  mode, only the ``_c10d_functional`` op their forward and backward issue.
- plain ``torch.distributed`` calls and FSDP2: ``c10d.{allreduce_, _allgather_base_, allgather_,
  _reduce_scatter_base_, alltoall_base_, broadcast_, ...}``, also inside custom autograd Functions
  and in backward. ``scatter_``, ``gather_``, ``reduce_`` and ``barrier`` count under their own
  names, as does any other ``c10d`` op (``send``, ``recv_``, ...).
- DTensor's ``Shard(i)`` → ``Shard(j)`` redistribute on a GPU mesh: ``_dtensor.shard_dim_alltoall``, one
  all-to-all (torch registers it outside ``_c10d_functional``; the collective it runs inside is not seen).
- ``_c10d_functional.batch_p2p_ops`` (functional ``batch_isend_irecv``): its sends count as one ``send``, its
  receives as one ``recv``, each with the summed payload of its tensors (what ``op_list`` says each one is).

- torch's context-parallel custom ops, ``cplib.flex_cp_allgather`` (FlexAttention's CP, and BOOST's masked
  SDPA under CP) and its backward: what they issue inside, one all-gather of the keys and one of the values
  along the sequence, back one reduce-scatter of each (counted as two collectives each way).

What a backend does *inside* an op is not seen, so nothing is counted twice: a functional collective
does not also count the ``c10d`` op it runs, gloo's reduce-scatter (an all-reduce + chunk) counts as
one reduce-scatter, a coalesced op counts once with the summed payload. DTensor on a CPU mesh turns
an all-to-all into an all-gather (+ chunk): that is what it issues, and that is what is counted.

Size counted: always the un-sharded payload on one rank —

=============== ==============================================================
all_reduce      the reduced tensor
all_gather      the gathered tensor (the full output)
reduce_scatter  the tensor being scattered (the full input)
all_to_all      the input tensor
broadcast       the broadcast tensor
scatter/gather  the tensor scattered from / gathered to the root (as every rank sees it)
=============== ==============================================================

``distribute_tensor`` itself scatters (``Shard``) or broadcasts (``Replicate``) from rank 0: build
DTensors outside the counter unless that traffic is meant to be counted.

**NCCL's rules, checked on any backend.** Before a collective runs, its tensors are checked against what
ProcessGroupNCCL refuses or what would be wrong on a GPU: one dtype across a coalesced call (a batch of
sends and receives may mix them), contiguous inputs (but for the ops that copy their own contiguous:
``shard_dim_alltoall``, the CP ops), one device, and (with ``device=``) the parameters' device, never a CPU
tensor beside a GPU model.
A broken rule raises ``NcclRuleError`` at the collective that broke it, so a gloo test fails where an
NCCL run would. Host syncs (``.item()``, ``bool(t)``, ``.tolist()``: ``aten._local_scalar_dense``) are
counted in ``host_syncs``: a step that syncs stops the host running ahead of the GPU.

Counts accumulate over every ``with`` block until ``reset()``. A record says whether autograd was
running a backward pass when the collective was issued. As under torch's ``CommDebugMode``,
``torch.compile`` runs eagerly inside this mode: check compiled graphs' collectives with
``torch._inductor.utils.run_and_get_code`` instead.

Example::

    >>> with CommCounter() as comm:
    ...     dist.all_reduce(torch.ones(3, 5))
    >>> comm.counts["all_reduce"], comm.bytes["all_reduce"], comm.records[0].shape
    (1, 60, (3, 5))
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _resolve_process_group
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

Shape = tuple[int, ...]
_F, _C, _DT = "_c10d_functional", "c10d", "_dtensor"
_NOT_COLLECTIVES = {(_F, "wait_tensor"), (_F, "_wrap_tensor_autograd")}
_HOST_SYNC = torch.ops.aten._local_scalar_dense.default


class NcclRuleError(RuntimeError):
    """A collective NCCL would refuse (or run wrongly on a GPU), caught on whatever backend ran it."""


def _tensors(args) -> list[torch.Tensor]:
    flat: list[torch.Tensor] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            flat.append(a)
        elif isinstance(a, (list, tuple)):
            flat.extend(_tensors(a))
    return flat


def nccl_rule_problem(
    op: str,
    tensors: list[torch.Tensor],
    device: torch.device | None = None,
    one_dtype: bool = True,
    contiguous: bool = True,
) -> str | None:
    """What NCCL would refuse in a collective over ``tensors``, or ``None``. ``one_dtype=False`` for a batch of
    point-to-point ops (NCCL groups separate sends and receives, each of its own dtype); ``contiguous=False`` for
    an op that copies its input contiguous itself before the collective.

    Example::

        >>> nccl_rule_problem("all_reduce_coalesced", [torch.ones(2, dtype=torch.bfloat16), torch.ones(1)])
        'all_reduce_coalesced: one dtype per call (NCCL: "Tensors must have identical type"), got bfloat16, float32'
    """
    dtypes = list(dict.fromkeys(t.dtype for t in tensors))
    if one_dtype and len(dtypes) > 1:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        return f'{op}: one dtype per call (NCCL: "Tensors must have identical type"), got {names}'
    if contiguous and any(not t.is_contiguous() for t in tensors):
        return f'{op}: a non-contiguous input (NCCL: "Tensors must be contiguous")'
    devices = list(dict.fromkeys(t.device for t in tensors))
    if len(devices) > 1:
        return f"{op}: tensors on several devices {devices}"
    if device is not None and devices and devices[0].type != torch.device(device).type:
        return f"{op}: a {devices[0].type} tensor where the model lives on {device}"
    return None


def _full(t: torch.Tensor, ranks: int = 1) -> tuple[Shape, torch.dtype]:
    """``t``'s shape, its dim 0 times ``ranks`` (a tensor gathered along dim 0 from ``ranks`` ranks)."""
    shape = tuple(t.shape)
    if ranks != 1:
        shape = (shape[0] * ranks, *shape[1:]) if shape else (ranks,)
    return shape, t.dtype


def _cat(pieces) -> tuple[Shape, torch.dtype]:
    """One tensor given as per-rank pieces (the list forms of the c10d ops), concatenated on dim 0."""
    rows = sum(p.shape[0] if p.dim() else 1 for p in pieces)
    return (rows, *pieces[0].shape[1:]), pieces[0].dtype


def _each(ts) -> list[tuple[Shape, torch.dtype]]:
    return [_full(t) for t in ts]


# (namespace, op name) -> (kind, (args, group size) -> [(full shape, dtype)] of each payload tensor)
_SIZES = {
    (_F, "all_reduce"): ("all_reduce", lambda a, n: [_full(a[0])]),
    (_F, "all_reduce_"): ("all_reduce", lambda a, n: [_full(a[0])]),
    (_F, "all_reduce_coalesced"): ("all_reduce", lambda a, n: _each(a[0])),
    (_F, "all_reduce_coalesced_"): ("all_reduce", lambda a, n: _each(a[0])),
    (_F, "all_gather_into_tensor"): ("all_gather", lambda a, n: [_full(a[0], n)]),
    (_F, "all_gather_into_tensor_out"): ("all_gather", lambda a, n: [_full(a[0], n)]),
    (_F, "all_gather_into_tensor_coalesced"): ("all_gather", lambda a, n: [_full(t, n) for t in a[0]]),
    (_F, "reduce_scatter_tensor"): ("reduce_scatter", lambda a, n: [_full(a[0])]),
    (_F, "reduce_scatter_tensor_out"): ("reduce_scatter", lambda a, n: [_full(a[0])]),
    (_F, "reduce_scatter_tensor_coalesced"): ("reduce_scatter", lambda a, n: _each(a[0])),
    (_F, "all_to_all_single"): ("all_to_all", lambda a, n: [_full(a[0])]),
    (_F, "broadcast"): ("broadcast", lambda a, n: [_full(a[0])]),
    (_F, "broadcast_"): ("broadcast", lambda a, n: [_full(a[0])]),
    (_C, "allreduce_"): ("all_reduce", lambda a, n: _each(a[0])),
    (_C, "allreduce_coalesced_"): ("all_reduce", lambda a, n: _each(a[0])),
    (_C, "_allgather_base_"): ("all_gather", lambda a, n: [_full(a[0])]),
    (_C, "allgather_"): ("all_gather", lambda a, n: [_cat(per_rank) for per_rank in a[0]]),
    (_C, "allgather_coalesced_"): ("all_gather", lambda a, n: [_cat(col) for col in zip(*a[0])]),
    (_C, "allgather_into_tensor_coalesced_"): ("all_gather", lambda a, n: _each(a[0])),
    (_C, "_reduce_scatter_base_"): ("reduce_scatter", lambda a, n: [_full(a[1])]),
    (_C, "reduce_scatter_"): ("reduce_scatter", lambda a, n: [_cat(per_rank) for per_rank in a[1]]),
    (_C, "reduce_scatter_tensor_coalesced_"): ("reduce_scatter", lambda a, n: _each(a[1])),
    (_C, "alltoall_base_"): ("all_to_all", lambda a, n: [_full(a[1])]),
    (_C, "alltoall_"): ("all_to_all", lambda a, n: [_cat(a[1])]),
    (_C, "broadcast_"): ("broadcast", lambda a, n: _each(a[0])),
    # rooted ops: sized from what every rank holds, so that all ranks count the same
    (_C, "scatter_"): ("scatter", lambda a, n: [_full(t, n) for t in a[0]]),  # each rank's output shard × n
    (_C, "gather_"): ("gather", lambda a, n: [_full(t, n) for t in a[1]]),  # each rank's input × n
    (_C, "reduce_"): ("reduce", lambda a, n: _each(a[0])),
    (_C, "barrier"): ("barrier", lambda a, n: []),
    (_C, "monitored_barrier_"): ("barrier", lambda a, n: []),
    # DTensor's Shard(i) -> Shard(j) on a non-CPU mesh (args: input, gather_dim, shard_dim, group_name)
    (_DT, "shard_dim_alltoall"): ("all_to_all", lambda a, n: [_full(a[0])]),
}


def _gathered(t: torch.Tensor, dim: int, ranks: int) -> tuple[Shape, torch.dtype]:
    """``t`` gathered along ``dim`` from ``ranks`` ranks."""
    shape = list(t.shape)
    shape[dim] *= ranks
    return tuple(shape), t.dtype


_P2P_KIND = {
    "isend": "send",
    "irecv": "recv",
}  # batch_p2p_ops' op_list names -> the kinds c10d.send/recv_ count


def _p2p_records(a, n) -> list[tuple[str, list[tuple[Shape, torch.dtype]]]]:
    """``batch_p2p_ops(op_list, peer_list, tag_list, tensors, group_name)``: one record of all its sends, one
    of all its receives."""
    by_kind: dict[str, list[tuple[Shape, torch.dtype]]] = {}
    for op, t in zip(a[0], a[3]):
        by_kind.setdefault(_P2P_KIND.get(op, op), []).append(_full(t))
    return list(by_kind.items())


# ops that count as several collectives: (args, group size) -> [(kind, [(full shape, dtype)] of its payload)]
_CP_NAMESPACE = "cplib"
_SPLIT = {
    # context parallelism's custom ops (args: keys, values, seq_dim, pg_name) issue one collective a tensor
    (_CP_NAMESPACE, "flex_cp_allgather"): lambda a, n: [
        ("all_gather", [_gathered(a[0], a[2], n)]),
        ("all_gather", [_gathered(a[1], a[2], n)]),
    ],
    (_CP_NAMESPACE, "flex_cp_allgather_backward"): lambda a, n: [
        ("reduce_scatter", [_full(a[0])]),
        ("reduce_scatter", [_full(a[1])]),
    ],
    (_F, "batch_p2p_ops"): _p2p_records,
}


# NCCL rules that do not hold for an op's arguments: a batch's sends and receives each take their own dtype; the
# other ops here copy their inputs contiguous before the collectives they run (the CP ops one collective a tensor)
_RELAXED_RULES: dict[tuple[str, str], dict[str, bool]] = {
    (_F, "batch_p2p_ops"): {"one_dtype": False},
    (_DT, "shard_dim_alltoall"): {"contiguous": False},
    (_CP_NAMESPACE, "flex_cp_allgather"): {"one_dtype": False, "contiguous": False},
    (_CP_NAMESPACE, "flex_cp_allgather_backward"): {"one_dtype": False, "contiguous": False},
}


def _other(name: str):
    """Any other collective: named after its op, sized by the tensors of its first argument."""

    def size(a, n):
        first = a[0] if a else []
        flat = first if isinstance(first, (list, tuple)) else [first]
        flat = [t for x in flat for t in (x if isinstance(x, (list, tuple)) else [x])]
        return [_full(t) for t in flat if isinstance(t, torch.Tensor)]

    return name.strip("_"), size


def _group_size(func, args) -> int | None:
    for arg, value in zip(func._schema.arguments, args):
        if arg.name == "group_size":
            return int(value)
        if arg.name == "process_group":
            return dist.ProcessGroup.unbox(value).size()
        if arg.name in ("group_name", "pg_name"):
            # shard_dim_alltoall's group_name is typed Any: a group itself under dist.config.compile_on_one_rank
            group = value if isinstance(value, dist.ProcessGroup) else _resolve_process_group(value)
            return group.size()
    return None


@dataclass(frozen=True)
class CollectiveRecord:
    kind: str
    op: str  # the dispatched op, e.g. "c10d._allgather_base_"
    # Full (un-sharded) shape of each tensor, several only for coalesced ops, laid out as the
    # collective sees it: gathers stack on dim 0 (a Shard(1) gather's buffer is (n·rows, cols/n)).
    shapes: tuple[Shape, ...]
    dtype: torch.dtype | None
    elements: int
    bytes: int
    group_size: int | None
    backward: bool  # issued while autograd ran a backward pass

    @property
    def shape(self) -> Shape | None:
        """The full tensor's shape; ``None`` for coalesced (several tensors) and payload-free ops."""
        return self.shapes[0] if len(self.shapes) == 1 else None


class CommCounter(TorchDispatchMode):
    """Counts this rank's collectives by kind: ``counts``, ``bytes``, ``elements``, ``records``;
    ``host_syncs``; raises ``NcclRuleError`` on a collective NCCL would refuse (``device``: the
    parameters' device, if the check should hold the tensors to it)."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.device = device
        self.reset()

    def reset(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.bytes: dict[str, int] = defaultdict(int)
        self.elements: dict[str, int] = defaultdict(int)
        self.records: list[CollectiveRecord] = []
        self.host_syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        # Let DTensor desugar first: the collectives it issues come back through this mode.
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        key = (func.namespace, func._opname)
        if func is _HOST_SYNC:
            self.host_syncs += 1
        elif key in _SPLIT:
            self._check(func, args)
            for kind, payload in _SPLIT[key](args, _group_size(func, args)):
                self._record(func, kind, lambda a, n, p=payload: p, args)
        elif key in _SIZES or (func.namespace in (_F, _C) and key not in _NOT_COLLECTIVES):
            self._check(func, args)
            self._record(func, *(_SIZES.get(key) or _other(func._opname)), args)
        return func(*args, **kwargs)

    def _check(self, func, args) -> None:
        key = (func.namespace, func._opname)
        relaxed = _RELAXED_RULES.get(key, {})
        if problem := nccl_rule_problem(f"{key[0]}.{key[1]}", _tensors(args), self.device, **relaxed):
            raise NcclRuleError(problem)

    def _record(self, func, kind: str, size, args) -> None:
        group_size = _group_size(func, args)
        payload = size(args, group_size)
        elements = [math.prod(shape) for shape, _ in payload]
        nbytes = sum(n * dtype.itemsize for n, (_, dtype) in zip(elements, payload))
        self.counts[kind] += 1
        self.bytes[kind] += nbytes
        self.elements[kind] += sum(elements)
        self.records.append(
            CollectiveRecord(
                kind=kind,
                op=f"{func.namespace}.{func._opname}",
                shapes=tuple(shape for shape, _ in payload),
                dtype=payload[0][1] if payload else None,
                elements=sum(elements),
                bytes=nbytes,
                group_size=group_size,
                backward=torch._C._current_graph_task_id() != -1,
            )
        )

    def direction(self, backward: bool) -> dict[str, tuple[int, int]]:
        """``{kind: (count, elements)}`` of the forward (``backward=False``) or backward collectives."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.records:
            if r.backward == backward:
                count, elements = out.get(r.kind, (0, 0))
                out[r.kind] = (count + 1, elements + r.elements)
        return out

    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def total_count(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line for logs, e.g. ``all_gather 2× 64.00 KiB, all_reduce 16× 1.75 MiB``."""
        return (
            ", ".join(f"{k} {n}× {_human(self.bytes[k])}" for k, n in sorted(self.counts.items()) if n)
            or "none"
        )


def _human(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB"):
        n /= 1024
        if n < 1024:
            return f"{n:.2f} {unit}"
    return f"{n / 1024:.2f} GiB"

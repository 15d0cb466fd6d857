"""FSDP inside the compiled blocks: torchtitan's SimpleFSDP for BOOST models (``boost.fsdp = "simple_fsdp"``).

FSDP2 (``fully_shard``, the default) gathers a block's parameters and reduces its gradients from Python
hooks around the block, and per parameter it makes views, DTensors and an ``AccumulateGrad`` of the
gathered gradient: most of what a BTP rank's host issues per step (``docs/design.md`` §10). SimpleFSDP
states the same sharding as a parametrization: reading a weight redistributes its data-parallel shard
``Shard → Replicate`` (an all-gather, cast to the parameter dtype), whose backward is ``Partial → Shard``
(a reduce-scatter, in the reduce dtype). In a compiled block both are traced into the block's graphs,
so the host issues neither; the optimizer and the gradient norm see the same sharded 2-D DTensors
(``(fsdp, tp)``) as under FSDP2.

What differs from FSDP2, and why the validation (``boost.training.rules.simple_fsdp_problem``)
refuses the rest:

- A block's weights are gathered inside its graph (inductor merges the graph's gathers into one, and its
  reduce-scatters into one, as FSDP2 issues one of each per block): no prefetch of the next block, no
  reshard policy (the partitioner and the activation checkpointing decide what a block keeps), so
  ``fsdp_reshard_after_forward`` stays ``"default"``. Uncompiled, every read of a weight would be its
  own collective: compile is required.
- Every shard is even (torchtitan's SimpleFSDP rebuilds a gathered weight's shape from its local
  shard), on the dim FSDP2 would use (``shard_dim``): the model is refused, naming the weight, where
  one does not divide.
- One data-parallel mesh dim, no pipeline, no CPU offload, no LORO: not built or tested here.

torchtitan makes one parametrized class per module, which a per-block ``torch.compile`` would
recompile for every block; here modules of one class and parameter names share one class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import Placement
from torchtitan.experiments.simple_fsdp.simple_fsdp import (
    MixedPrecisionPolicy,
    ReplicateComputation,
    disable_active_parametrization,
)

from boost.training.config_error import refuse
from torchtitan_ext.torch_private import merge_fsdp_collectives_in_compiled_graphs
from torchtitan_ext.torchtitan_private import distribute_tensor_parallel_parameter

# (module class, its parametrized names) -> the subclass whose properties gather them
_PARAMETRIZED: dict[tuple[type, tuple[str, ...]], type] = {}


def shard_dim(local_shape: tuple[int, ...], degree: int) -> int | None:
    """The dim a parameter's data-parallel shards split, given its tensor-parallel local shape: FSDP2's
    choice in BOOST (``torchtitan_ext.infra.parallelize.shard_placement``: a batched up-projection
    ``[G, d_out, r]`` on ``r``, everything else on dim 0), where ``degree`` divides it evenly; else
    the first dim it divides; ``None`` where none.

    Example::

        >>> shard_dim((3, 64, 16), 4), shard_dim((96, 64), 4), shard_dim((6,), 4)
        (2, 0, None)
    """
    preferred = [2] if len(local_shape) == 3 else []
    for dim in preferred + list(range(len(local_shape))):
        if local_shape[dim] % degree == 0:
            return dim
    return None


class GatherOnRead(ReplicateComputation):
    """torchtitan's ``ReplicateComputation`` (a weight's shard → the weight, cast; its gradient → the
    reduce-scattered shard) for one tensor-parallel layout, given at construction: torchtitan slices
    the tensor-parallel mesh out of the weight's own mesh at every read, which finds this rank's
    coordinates in it (``nonzero`` and two ``.item()`` reads). The blocks' compiled graphs fold that
    away; the uncompiled embedding, final norm and output paid it at every forward (6 host reads a step).
    """

    def __init__(
        self,
        dp_mesh: DeviceMesh,
        dim: int,
        mp_policy: MixedPrecisionPolicy,
        tp: tuple[DeviceMesh, tuple[Placement, ...]] | None,
    ):
        super().__init__(dp_mesh, (Shard(dim),), "fully_shard", mp_policy)
        self.tp = tp

    def replicate_compute(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp is None:
            return super().replicate_compute(x)
        tp_mesh, tp_placements = self.tp
        sharded = DTensor.from_local(x.to_local(), self.device_mesh, self.param_sharding, run_check=False)
        gathered = sharded.redistribute(
            placements=self.compute_placements,
            forward_dtype=self.param_dtype,
            backward_dtype=self.reduce_dtype,
        ).to_local(grad_placements=self.grad_placements)
        return DTensor.from_local(gathered, tp_mesh, tp_placements, run_check=False)


def apply_simple_fsdp(
    model: nn.Module, dp_mesh: DeviceMesh, param_dtype: torch.dtype, reduce_dtype: torch.dtype
) -> None:
    """Shard every parameter of ``model`` over ``dp_mesh`` (1-D) and gather it where it is read.

    Call after the tensor-parallel plan and ``torch.compile`` (as FSDP2 is applied); the model may be
    on the meta device. ``model.init_weights`` then fills the shards themselves (the parametrization is
    off while it runs).
    """
    if dp_mesh.ndim != 1:
        raise ValueError(f"SimpleFSDP takes a 1-D data-parallel mesh, not {dp_mesh.ndim}-D")
    # One all-gather and one reduce-scatter per compiled graph, as FSDP2 issues one of each per block.
    # Unmerged, a BTP block issues 10 of each: 647 collectives a 7B rank's step.
    merge_fsdp_collectives_in_compiled_graphs()
    degree = dp_mesh.size()
    mp_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    # one per shard dim and tensor-parallel layout, shared by every block (one compiled block serves all)
    computations: dict[tuple, GatherOnRead] = {}

    def computation(dim: int, param: torch.Tensor) -> GatherOnRead:
        tp = (param.device_mesh, tuple(param.placements)) if isinstance(param, DTensor) else None
        key = (dim, None if tp is None else (id(tp[0]), tp[1]))
        if key not in computations:
            computations[key] = GatherOnRead(dp_mesh, dim, mp_policy, tp)
        return computations[key]

    for module_name, module in model.named_modules():
        params = {n: p for n, p in module.named_parameters(recurse=False) if p is not None}
        if not params:
            continue
        gathers: dict[str, GatherOnRead] = {}
        for name, param in params.items():
            local = param.to_local() if isinstance(param, DTensor) else param
            dim = shard_dim(tuple(local.shape), degree)
            if dim is None:
                fqn = f"{module_name}.{name}" if module_name else name
                refuse(
                    "boost.fsdp",
                    "simple_fsdp",
                    f"{fqn}'s tensor-parallel shard {tuple(local.shape)} has no dim divisible by the FSDP "
                    f'degree {degree}, and SimpleFSDP shards evenly only: use boost.fsdp = "fully_shard", '
                    "or an FSDP degree that divides it",
                )
            placement = (Shard(dim),)
            sharded = (
                distribute_tensor_parallel_parameter(param, dp_mesh, placement)
                if isinstance(param, DTensor)
                else distribute_tensor(param, dp_mesh, placement)
            )
            module.register_parameter(name, nn.Parameter(sharded, requires_grad=param.requires_grad))
            gathers[name] = computation(dim, param)
        module.__dict__["_simple_fsdp_gathers"] = gathers  # not a submodule: no state, no child
        module.__class__ = _parametrized_class(type(module), tuple(gathers))
    model.init_weights = functools.partial(_init_shards, model.init_weights)


def _parametrized_class(cls: type, names: tuple[str, ...]) -> type:
    key = (cls, names)
    if key not in _PARAMETRIZED:
        _PARAMETRIZED[key] = type(
            f"SimpleFSDP{cls.__name__}", (cls,), {name: _gathered(name) for name in names}
        )
    return _PARAMETRIZED[key]


def _gathered(name: str) -> property:
    # state_dict, the optimizer and parameters() read _parameters: the shards. Attribute access gathers.
    def read(module: nn.Module) -> torch.Tensor:
        return module.__dict__["_simple_fsdp_gathers"][name](module._parameters[name])

    return property(read)


def _init_shards(init_weights: Callable[..., None], *args, **kwargs) -> None:
    """The model's own ``init_weights``, writing the shards (with the parametrization on, a weight read
    would be a gathered copy)."""
    with disable_active_parametrization():
        init_weights(*args, **kwargs)

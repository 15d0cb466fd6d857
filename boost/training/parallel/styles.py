"""The DTensor ``ParallelStyle``s of BTP beside the bottleneck's own (``bottleneck_style.BoostParallelStyle``),
and the module surgery they all share.

``ReplicatedParallel``        a module computed whole on every rank (BTP's final norm), parameters Replicate
``ReplicatedLatentParallel``  vanilla's latent gathered whole from its rank-dim shards (LaX's crossing there)
``ShardedRMSNormParallel``    an RMSNorm over the sharded hidden dim with several readers (its own all-reduce)

``shard_parameter`` makes a parameter a DTensor where it lives; ``swap_forward`` gives a module another
forward by swapping its class, so that every transformer block compiles once.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import (
    DTensor,
    Placement,
    Replicate,
    Shard,
    distribute_module,
    distribute_tensor,
)
from torch.distributed.tensor.parallel import ParallelStyle

from boost.training.parallel.collectives import group_name
from boost.training.parallel.norms import SyncRMSNorm, norm_eps, shard_rms_norm, sharded_norm_problem
from boost.training.rules import NORM_MODES, SHARD_LOCAL_NORM_WARNING, norm_is_shard_local, tp_shape_problem


def check_norm_mode(norm: str) -> None:
    """``ValueError`` naming the choices unless ``norm`` is one of ``boost.training.rules.NORM_MODES``."""
    if norm not in NORM_MODES:
        raise ValueError(f"norm = {norm!r} is unknown; choose one of {NORM_MODES}")


def warn_if_shard_local(norm: str, t: int) -> None:
    """A norm over a hidden dim split ``t`` ways, each shard normalised by its own statistic, is another
    model than the dense one (``boost.training.rules.norm_is_shard_local``): say so where it is sharded."""
    if norm_is_shard_local(norm, "btp", t):
        warnings.warn(SHARD_LOCAL_NORM_WARNING, stacklevel=4)


def as_dtensor(x: object, mesh: DeviceMesh, layout: Placement, desired: Placement) -> object:
    """A module input as a DTensor in ``desired``: a local tensor is taken as laid out in ``layout``; what is
    not a tensor passes through."""
    if not isinstance(x, torch.Tensor):
        return x
    if not isinstance(x, DTensor):
        x = DTensor.from_local(x, mesh, [layout], run_check=False)
    if x.placements != (desired,):
        x = x.redistribute(mesh, [desired])
    return x


def shard_parameter(module: nn.Module, name: str, mesh: DeviceMesh, placement: Placement) -> None:
    """Make ``module.<name>`` a DTensor parameter in ``placement``, each rank keeping its own values of its
    part (a model initialised alike on every rank, or seeded per shard); absent or already a DTensor: left."""
    param = getattr(module, name)
    if param is None or isinstance(param, DTensor):
        return
    module.register_parameter(
        name,
        nn.Parameter(distribute_tensor(param, mesh, [placement], src_data_rank=None), param.requires_grad),
    )


def require_divisible(what: str, size: int, t: int) -> None:
    """``ValueError`` naming ``what`` unless ``size`` splits ``t`` ways (``boost.training.rules.tp_shape_problem``)."""
    problem = tp_shape_problem({what: size}, t)
    if problem is not None:
        raise ValueError(f"the tensor-parallel degree {t} {problem}")


class ReplicatedParallel(ParallelStyle):
    """A module computed redundantly on every rank, its parameters Replicate DTensors.

    Every parameter of a tensor-parallel model is then a DTensor on the TP mesh (torchtitan's gradient
    clipping and checkpointing expect it). The input is taken as ``input_layouts`` and brought to
    Replicate (BTP's final norm gathers the ``Shard(-1)`` hidden state here, once); the output is local.
    """

    def __init__(self, input_layouts: Placement | None = None):
        super().__init__()
        self.input_layouts = input_layouts or Replicate()

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        layout = self.input_layouts

        def prepare(mod, inputs, mesh):
            return tuple(as_dtensor(x, mesh, layout, Replicate()) for x in inputs)

        def local(mod, outputs, mesh):
            return outputs.to_local() if isinstance(outputs, DTensor) else outputs

        return distribute_module(module, device_mesh, input_fn=prepare, output_fn=local)


class ReplicatedLatentParallel(ParallelStyle):
    """A bottleneck's latent computed whole on every rank where the plan shards the rank dim (vanilla):
    the pre-activation ``Shard(-1)`` on r is gathered (one r-wide all-gather), a carry arrives whole
    (``Replicate``), the module's parameters (LaX's norm and gate) are replicated, and the latent leaves
    whole, a local tensor. Its backward gathers nothing: a replicated gradient's shard is a slice."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        def prepare(mod, inputs, mesh):
            pre, *rest = inputs
            return (
                as_dtensor(pre, mesh, Shard(pre.ndim - 1), Replicate()),
                *(as_dtensor(c, mesh, Replicate(), Replicate()) for c in rest),
            )

        def local(mod, outputs, mesh):
            return outputs.to_local() if isinstance(outputs, DTensor) else outputs

        return distribute_module(module, device_mesh, input_fn=prepare, output_fn=local)


class ShardedRMSNormParallel(ParallelStyle):
    """An ``RMSNorm`` over the sharded hidden dim, standing alone (``sync`` or ``local``).

    Used where the norm has several readers (ungrouped q/k/v or gate/up), so its statistic cannot
    ride in a single reader's collective.
    """

    def __init__(self, norm: str = "sync"):
        super().__init__()
        check_norm_mode(norm)
        self.norm = "sync" if norm == "online" else norm

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        problem = sharded_norm_problem(module)
        if problem is not None:
            raise ValueError(f"ShardedRMSNormParallel: {problem}")
        warn_if_shard_local(self.norm, device_mesh.size())
        require_divisible("norm weight size", module.weight.shape[0], device_mesh.size())
        shard_parameter(module, "weight", device_mesh, Shard(0))
        swap_forward(
            module,
            _sharded_norm_forward,
            group=group_name(device_mesh),
            mode=self.norm,
            dim=module.weight.shape[0],
        )
        return module


def _sharded_norm_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A standalone norm over the sharded dim, on the local ``[.., d/t]`` shard, before and after."""
    gamma = self.weight.to_local()
    if self._btp_mode == "sync":
        return SyncRMSNorm.apply(x, gamma, norm_eps(self, x.dtype), self._btp_dim, self._btp_group)
    return shard_rms_norm(x, gamma, norm_eps(self, x.dtype))


_SWAPPED: dict[tuple[type, object], type] = {}


def swap_forward(module: nn.Module, forward, **config) -> None:
    """Give ``module`` a new ``forward`` by swapping its class (as FSDP2's ``fully_shard`` does).

    A per-instance ``module.forward = ...`` would make every block's forward a different object,
    which torch.compile guards on: each transformer block would compile again (dynamo's recompile
    limit is 8). A class shared by every block and plain attributes compile once for all of them.
    ``config`` values are stored as ``_btp_<name>`` attributes; modules go into ``__dict__`` so that
    they stay out of ``state_dict`` and ``parameters()``.
    """
    cls = type(module)
    key = (cls, forward)
    if key not in _SWAPPED:
        _SWAPPED[key] = type(f"BTP{cls.__name__}", (cls,), {"forward": forward, "__module__": __name__})
    module.__class__ = _SWAPPED[key]
    for name, value in config.items():
        module.__dict__[f"_btp_{name}"] = value

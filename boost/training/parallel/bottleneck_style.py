"""Bottleneck-aware tensor parallelism as DTensor ``ParallelStyle``s.

``BoostParallelStyle`` shards one bottleneck ``x -> up(σ(down(x)))`` the BOOST way::

    x     [T, d/t]    Shard(-1)   the residual stream stays sharded on the full dim
    A     [R, d/t]    Shard(1)    row-parallel down-projection: output Partial over R
    fwd   z = all_reduce(x A_iᵀ)                     one collective, R wide
    σ, LaX crossing on the replicated latent z         (redundant: every rank computes it whole)
    B     [d_out/t, R] Shard(0)   column-parallel up-projection: output Shard(-1), no collective
    bwd   dz = all_reduce(dy_i B_i)                  one collective, R wide
          dx_i = dz A_i,  dA_i = dzᵀ x_i,  dB_i = dy_iᵀ z      no collective

DTensor's greedy per-op strategy would rather all-gather ``B`` and reduce-scatter a d-wide output
(~6.7× the bytes); both syncs are therefore pinned: ``down``'s Partial output is redistributed to
Replicate in its forward, and the latent feeding ``up`` reaches it as a local tensor, which ``up`` reads
with its local shard and whose gradient (a partial sum per shard) is all-reduced right there, at width R.

``sequence_parallel=True`` splits each all-reduce into its two halves and keeps the latent between them
on this rank's ``T/t`` tokens (the ``[T, R]`` latent's rows), so that σ and LaX's crossing run on a
``t``-th of the tokens instead of whole on every rank::

    fwd   z_i = reduce_scatter(x A_iᵀ)   σ / crossing on z_i   z = all_gather(h_i)   y_i = z B_iᵀ
    bwd   dh_i = reduce_scatter(dy_i B_i)   crossing backward on the rows   dz = all_gather(dz_i)

The same bytes on the wire in two collectives; a crossing's norm and gate see a rank's tokens only, so
their gradients are summed over the group (one small all-reduce a bottleneck), and LaX's carry stays on
the rows, crossing to the next block with no collective. Needs the ``b·s`` tokens divisible by ``t``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import ParallelStyle

from boost.training.parallel.collectives import (
    gather_tokens,
    group_name,
    local_with_grad_summed,
    row_parallel_down,
    summed_on_backward,
)
from boost.training.parallel.norms import (
    OnlineRMSNormDown,
    SyncRMSNorm,
    norm_eps,
    shard_rms_norm,
    sharded_norm_problem,
)
from boost.training.parallel.styles import (
    as_dtensor,
    check_norm_mode,
    require_divisible,
    shard_parameter,
    swap_forward,
    warn_if_shard_local,
)


class BoostParallelStyle(ParallelStyle):
    """Bottleneck-aware TP for one bottleneck module: the public face of BTP.

    Args:
        down: name of the down-projection ``nn.Linear`` (d -> r). Default: ``"down"`` if the module
            has it, else the first ``nn.Linear`` child (e.g. of an ``nn.Sequential``).
        up: name(s) of the up-projection(s) (r -> d'): ``nn.Linear`` (weight sharded on dim 0) or
            a batched ``[G, d_out, r]`` weight (sharded on dim 1). Default: ``"up"`` or the last
            ``nn.Linear`` child.
        latent: name of the submodule whose output is the final r-wide latent (its gradient is
            all-reduced there, once). Default: the input of each up-projection.
        norm: name of an inner pre-norm (``RMSNorm`` over d) applied to the input, or ``None``.
        norm_mode: ``"online"`` (statistic fused into the down-projection's all-reduce),
            ``"sync"`` (its own all-reduce) or ``"local"`` (not equivalent to the dense model).
        input_layouts: placement of the incoming tensor when it is a plain local tensor
            (default ``Shard(-1)``: the residual stream sharded on its hidden dim).
        output_layouts: placement of the d-wide outputs (default ``Shard(-1)``).
        use_local_output: return local tensors (default) or DTensors.
        sequence_parallel: keep the latent on this rank's ``T/t`` tokens between a reduce-scatter and an
            all-gather (module docstring); the modules between ``down`` and ``up`` may hold parameters
            only if they are LaX crossings (``crossed`` / ``crossing_parameters``), and each up-projection
            is an ``nn.Linear`` or has ``project(u, weight)`` (it runs on its local shard).

    Example (2 processes, gloo)::

        >>> mesh = init_device_mesh("cpu", (2,))
        >>> block = nn.Sequential(nn.Linear(64, 16), nn.SiLU(), nn.Linear(16, 64))
        >>> parallelize_module(block, mesh, BoostParallelStyle())
        >>> y_local = block(x_local)          # x_local: this rank's [b, s, 32] slice of x
        >>> sp_block = nn.Sequential(nn.Linear(64, 16), nn.SiLU(), nn.Linear(16, 64))
        >>> parallelize_module(sp_block, mesh, BoostParallelStyle(sequence_parallel=True))  # σ on b·s/2 tokens
    """

    def __init__(
        self,
        *,
        down: str | None = None,
        up: str | Sequence[str] | None = None,
        latent: str | None = None,
        norm: str | None = None,
        norm_mode: str = "online",
        input_layouts: Placement | None = None,
        output_layouts: Placement | None = None,
        use_local_output: bool = True,
        sequence_parallel: bool = False,
    ):
        super().__init__()
        if norm is not None:
            check_norm_mode(norm_mode)
        self.down, self.up, self.latent, self.norm = down, up, latent, norm
        self.norm_mode = norm_mode
        self.input_layouts = input_layouts or Shard(-1)
        self.output_layouts = output_layouts or Shard(-1)
        self.use_local_output = use_local_output
        self.sequence_parallel = sequence_parallel

    def _resolve(self, module: nn.Module) -> tuple[str, list[str]]:
        linears = [n for n, c in module.named_children() if isinstance(c, nn.Linear)]
        down = self.down or ("down" if hasattr(module, "down") else (linears[0] if linears else None))
        up = self.up or ("up" if hasattr(module, "up") else (linears[-1] if len(linears) > 1 else None))
        if down is None or up is None or down == up:
            raise ValueError(
                f"BoostParallelStyle found no bottleneck in {type(module).__name__}: it needs a down "
                "projection nn.Linear(d, r) and an up projection nn.Linear(r, d'); name them with "
                "BoostParallelStyle(down=..., up=...)"
            )
        ups = [up] if isinstance(up, str) else list(up)
        names = dict(module.named_modules())
        unknown = [n for n in (down, *ups, *([self.norm] if self.norm else [])) if n not in names]
        if unknown:  # get_submodule's AttributeError would name neither the style nor what there is
            children = [n for n, _ in module.named_children()]
            raise ValueError(
                f"BoostParallelStyle: {type(module).__name__} has no submodule {unknown[0]!r}; its children are "
                f"{children}: name the down and up projections (and the norm) by these"
            )
        if not isinstance(module.get_submodule(down), nn.Linear):
            raise ValueError(f"BoostParallelStyle: down projection {down!r} must be an nn.Linear")
        return down, ups

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        if device_mesh.ndim != 1:
            raise ValueError("BoostParallelStyle takes a 1-D tensor-parallel mesh")
        t = device_mesh.size()
        down_name, up_names = self._resolve(module)
        down = module.get_submodule(down_name)
        up_units = [m for n in up_names for m in _leaf_projections(module.get_submodule(n))]
        rank = down.out_features
        require_divisible(f"{down_name}.in_features (the full dim d)", down.in_features, t)
        for unit in up_units:
            require_divisible("up-projection output width", unit.weight.shape[-2], t)
            if unit.weight.shape[-1] > rank:
                raise ValueError(
                    f"up-projection reads {unit.weight.shape[-1]} features but the latent is {rank} wide"
                )
        norm = module.get_submodule(self.norm) if self.norm else None
        if norm is not None:
            problem = sharded_norm_problem(norm)
            if problem is not None:
                raise ValueError(f"BoostParallelStyle: norm {self.norm!r}: {problem}")
            warn_if_shard_local(self.norm_mode, t)
            require_divisible("norm weight size", norm.weight.shape[0], t)
        sp = self.sequence_parallel and t > 1  # one rank has no tokens to split
        if sp and self.output_layouts not in (Shard(-1), Replicate()):
            raise ValueError(
                f"BoostParallelStyle(sequence_parallel=True): output_layouts = {self.output_layouts}; the outputs "
                "are computed on the flat tokens and leave sharded on their last dim, Shard(-1), or Replicate()"
            )
        crossings = _latent_modules(module, [down, *up_units, norm]) if sp else []
        for unit in up_units:
            if not isinstance(unit, nn.Linear) and not hasattr(unit, "project"):
                raise ValueError(
                    f"BoostParallelStyle: the up-projection {type(unit).__name__} runs on its local shard, which "
                    "an nn.Linear or a module with project(u, weight) can"
                )

        # Parameters: A on its input dim, B on its output dim, γ on d, biases where their outputs live.
        shard_parameter(down, "weight", device_mesh, Shard(1))
        shard_parameter(down, "bias", device_mesh, Replicate())
        for unit in up_units:
            shard_parameter(unit, "weight", device_mesh, Shard(unit.weight.ndim - 2))
            if getattr(unit, "bias", None) is not None:
                shard_parameter(unit, "bias", device_mesh, Shard(0))
        if norm is not None:
            shard_parameter(norm, "weight", device_mesh, Shard(0))

        group = group_name(device_mesh)
        swap_forward(
            down, _down_forward, norm=norm, mode=self.norm_mode, mesh=device_mesh, group=group, rows=sp
        )
        if norm is not None:
            swap_forward(norm, _identity_forward)
        for crossing in crossings:
            swap_forward(crossing, _crossing_on_rows_forward, group=group)
        # The latent reaches the up-projections as a local tensor (gathered under SP, the replicated latent's
        # own otherwise): they read it with their local shards, and the model's member views of it (split,
        # batched) stay plain strided views, whose gradient no DTensor op meets before it is summed.
        for unit in up_units:
            swap_forward(
                unit,
                _local_linear_forward if isinstance(unit, nn.Linear) else _local_project_forward,
                mesh=None if sp else device_mesh,  # without SP, the d-wide output leaves as Shard(-1)
            )
        if sp:
            gather_output = functools.partial(_gather_output_rows, group)
            gather_input = functools.partial(_gather_input_rows, group)
        else:
            gather_output = functools.partial(_local_latent_output, group)
            gather_input = functools.partial(_local_latent_input, group)
        if self.latent is not None:
            module.get_submodule(self.latent).register_forward_hook(gather_output)
        else:
            for n in up_names:
                module.get_submodule(n).register_forward_pre_hook(gather_input)
        module = distribute_module(
            module,
            device_mesh,
            input_fn=functools.partial(_prepare_inputs, self.input_layouts, sp),
            output_fn=functools.partial(_prepare_outputs, self.output_layouts, self.use_local_output),
        )
        if sp:  # after distribute_module's output hook, which hands the local outputs on as they are
            module.register_forward_hook(
                functools.partial(_tokens_as_input, device_mesh, self.output_layouts, self.use_local_output)
            )
        return module


def _leaf_projections(module: nn.Module) -> list[nn.Module]:
    """The modules under ``module`` (itself included) that own an up-projection weight."""
    return [m for m in module.modules() if isinstance(getattr(m, "weight", None), torch.Tensor)]


def _latent_modules(module: nn.Module, projections: list[nn.Module | None]) -> list[nn.Module]:
    """Under ``sequence_parallel``, the modules with parameters of their own other than ``projections``: they
    run on a rank's rows of the latent, which only a LaX crossing (its gradients summed) is written for."""
    found = []
    for name, sub in module.named_modules():
        if any(sub is p for p in projections) or not any(True for _ in sub.parameters(recurse=False)):
            continue
        if not hasattr(sub, "crossed"):
            raise ValueError(
                f"BoostParallelStyle(sequence_parallel=True): {name or type(module).__name__!r} holds parameters "
                "and would run on this rank's tokens only; keep parameters in the down- and up-projections "
                "and the norm, or use sequence_parallel=False"
            )
        found.append(sub)
    return found


def _local_latent_output(group: str, module: nn.Module, args, out):
    return local_with_grad_summed(out, group)


def _local_latent_input(group: str, module: nn.Module, args):
    return (local_with_grad_summed(args[0], group), *args[1:])


def _gather_output_rows(group: str, module: nn.Module, args, out):
    return gather_tokens(out, group)


def _gather_input_rows(group: str, module: nn.Module, args):
    return (gather_tokens(args[0], group), *args[1:])


def _local_linear_forward(self: nn.Linear, u: torch.Tensor) -> torch.Tensor:
    """A column-parallel up-projection on the (local) latent: its local rows of B, its bias shard."""
    bias = self.bias.to_local() if self.bias is not None else None
    return _sharded_output(self, torch.nn.functional.linear(u, self.weight.to_local(), bias))


def _local_project_forward(self: nn.Module, u: torch.Tensor) -> torch.Tensor:
    return _sharded_output(self, self.project(u, self.weight.to_local()))


def _sharded_output(unit: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """Without SP, a ``Shard(-1)`` DTensor for the module's output hook to lay out; under SP the local
    ``[T, n/t]`` rows, which ``_tokens_as_input`` views as the input's tokens."""
    mesh = unit._btp_mesh
    return y if mesh is None else DTensor.from_local(y, mesh, [Shard(y.ndim - 1)], run_check=False)


def _tokens_as_input(mesh: DeviceMesh, layout: Placement, use_local: bool, module: nn.Module, args, outputs):
    """The d-wide outputs, computed as local ``[T, n/t]`` tensors on the flat tokens, viewed as the input's
    ``[b, s, n/t]`` and handed on in ``layout`` (``Shard(-1)``, or gathered ``Replicate``); the carry
    (``T/t`` rows) left as it is."""
    lead = args[0].shape[:-1]
    tokens = math.prod(lead)

    def view(t):
        if isinstance(t, (tuple, list)):
            return type(t)(view(v) for v in t)
        if not isinstance(t, torch.Tensor) or isinstance(t, DTensor) or t.ndim != 2 or t.shape[0] != tokens:
            return t
        local = t.view(*lead, t.shape[-1])
        if use_local and layout == Shard(-1):
            return local
        out = DTensor.from_local(local, mesh, [Shard(local.ndim - 1)], run_check=False)
        if layout == Replicate():
            out = out.redistribute(mesh, [Replicate()])
        return out.to_local() if use_local else out

    return view(outputs)


def _crossing_on_rows_forward(self: nn.Module, pre: torch.Tensor, carry: torch.Tensor | None = None):
    """A LaX crossing on this rank's rows: its replicated norm and gate read locally, their gradients summed."""
    params = self.crossing_parameters()
    local = summed_on_backward(
        [p.to_local() if isinstance(p, DTensor) else p for p in params.values()], self._btp_group
    )
    return self.crossed(pre, carry, dict(zip(params, local)))


def _down_forward(down: nn.Linear, x: DTensor) -> torch.Tensor:
    """Row-parallel A (optionally after the sharded pre-norm): Partial over r, pinned to Replicate, or
    reduce-scattered to this rank's rows of the flat ``[T, R]`` latent (a local tensor) under ``rows``."""
    norm, mode, mesh, group, rows = (
        down._btp_norm,
        down._btp_mode,
        down._btp_mesh,
        down._btp_group,
        down._btp_rows,
    )
    xl = x.to_local().flatten(0, -2) if rows else x.to_local()
    if rows and xl.shape[0] % mesh.size():
        raise ValueError(
            f"sequence_parallel: the latent's {xl.shape[0]} tokens (batch × sequence) split over {mesh.size()} "
            "tensor-parallel ranks: make the sequence length a multiple of the TP degree"
        )
    if norm is not None and mode == "online":
        y = OnlineRMSNormDown.apply(
            xl,
            norm.weight.to_local(),
            down.weight.to_local(),
            norm_eps(norm, xl.dtype),
            norm.weight.shape[0],
            group,
            rows,
        )
    else:
        if norm is not None:
            gamma = norm.weight.to_local()
            if mode == "sync":
                xl = SyncRMSNorm.apply(xl, gamma, norm_eps(norm, xl.dtype), norm.weight.shape[0], group)
            else:
                xl = shard_rms_norm(xl, gamma, norm_eps(norm, xl.dtype))
        # A's partial product and the forward all-reduce, r wide, pinned (DTensor would otherwise
        # pick its own strategy), as one Function: low-rank AC's recompute then skips the GEMM.
        y = row_parallel_down(xl, down.weight.to_local(), group, rows)
    if rows:
        return y if down.bias is None else y + summed_on_backward([down.bias.to_local()], group)[0]
    y = DTensor.from_local(y, mesh, [Replicate()], run_check=False)
    return y if down.bias is None else y + down.bias


def _normalized(p: Placement, ndim: int) -> Placement:
    return Shard(p.dim % ndim) if isinstance(p, Shard) else p


def _prepare_inputs(layout: Placement, rows: bool, module: nn.Module, inputs, device_mesh: DeviceMesh):
    x, *rest = inputs
    x = as_dtensor(x, device_mesh, layout, Shard(x.ndim - 1))
    # A LaX carry is the previous bottleneck's latent: replicated, or this rank's rows of it (a local tensor).
    if not rows:
        rest = [as_dtensor(c, device_mesh, Replicate(), Replicate()) for c in rest]
    return (x, *rest)


def _prepare_outputs(layout: Placement, use_local: bool, module: nn.Module, outputs, device_mesh: DeviceMesh):
    def convert(t):
        if isinstance(t, (tuple, list)):
            return type(t)(convert(v) for v in t)
        if not isinstance(t, DTensor):
            return t
        # d-wide outputs leave in the requested layout; the replicated r-wide latent stays as it is.
        if t.placements[0].is_shard() and _normalized(t.placements[0], t.ndim) != _normalized(layout, t.ndim):
            t = t.redistribute(device_mesh, [layout])
        return t.to_local() if use_local else t

    return convert(outputs)


def _identity_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return x  # a pre-norm folded into its reader's down-projection (online) or run there (sync/local)

"""Every private torch name ``torchtitan_ext`` uses, with why no public way exists and where it moved
within the supported range (``pyproject.toml``: torch 2.11 to 2.14).

torch rewrote ``torch.distributed.pipelining``'s stage between 2.11 and 2.13; BOOST's stages
(``torchtitan_ext.infra.pipeline``) are given their boundary tensors (static shapes: a dry run's fake
process group delivers no shape message), and hold a second set for validation. Two stage APIs, told
apart by what torch has (``STAGE_META``), not by its version number:

- torch ≥ 2.13 (``pipelining._utils._StageMeta``): the stage's static metadata is ``PipelineStage._user_meta``,
  a ``_StageMeta`` built by ``extract_tensor_metas`` as the constructor builds it; the constructor takes
  ``input_grads`` / ``output_grads`` (required for static DTensor boundaries with a backward), and
  the schedule re-initialises its stages itself when it switches between ``step`` and ``eval``.
- torch 2.11: the stage's static shapes are ``PipelineStage.inputs_meta`` and ``_outputs_meta`` (no
  gradient shapes: they are the tensors' own), and a schedule initialises its stages once
  (``_stage_forward_initialized`` / ``_stage_backward_initialized``, ``_stages_…`` for a multi-stage
  schedule): switching between training and validation shapes re-opens them here.

Overridden elsewhere, both APIs (``torchtitan_ext.infra.pipeline.DryRunStage``): ``get_fwd_recv_ops`` and
``get_bwd_recv_ops`` (public methods; the receive buffers they post, read from the private
``args_recv_info`` / ``grad_recv_info``, filled on a dry run, where nothing is ever received: torch 2.15
allocates each there, 2.11 to 2.14 at start-up), and where torch has it ``_warmup_backward_result`` (2.13 and 2.14:
the schedule's start-up vote on static shapes travels stage to stage, and no peer answers it there;
``STAGE_VOTE``). torch 2.15 votes by an all-reduce that its schedule skips on the fake process group, the
stage no part of it: there is nothing to override, and nothing is required of a newer torch.
``StaticShapeStage`` overrides ``forward_maybe_with_nosync`` (outputs that are views materialised: a
zero-bubble schedule's split backward detaches them in place). The zero-bubble schedules run on the 2.13
stage API only (``EXACT_SPLIT_BACKWARD``). ``schedules._PipelineSchedule`` is a type hint only.

The fake process group (``dist.Backend.FAKE``, a dry run's): on torch 2.11 its reduce-scatters, gathers,
scatters and all-to-alls return with their outputs as allocated (torch ≥ 2.13 fills them from the local
inputs, as if every rank held the same data). ``fill_fake_collective_outputs`` gives the reduce-scatters
BOOST issues those semantics on every torch (no public API replaces a registered backend, and a Python
``ProcessGroup`` cannot override ``_reduce_scatter_base``): it wraps ``torch.distributed``'s and the
functional collectives' reduce-scatter, and the functional all-gather (btp's sequence parallelism gathers
each latent's rows: this rank's rows repeated, as torch ≥ 2.13 fills it), under each name the torch at hand
has (``*_tensor``; ``*_single`` from 2.13), resolving a functional group with ``funcol._resolve_group_name``
and ``distributed_c10d._resolve_process_group`` (the latter behind ``torch.compiler.assume_constant_result``:
dynamo cannot trace it, and a compiled block's gathers meet it). BOOST issues no scatter or all-to-all.

``torch._inductor.config.bucket_all_gathers_fx`` / ``bucket_reduce_scatters_fx``
(``merge_fsdp_collectives_in_compiled_graphs``): inductor's merging of a compiled graph's FSDP
collectives, for SimpleFSDP; no public switch.

``torch._inductor.config.triton.cudagraph_or_error`` (``cudagraphs_or_error``): a CUDA graph inductor
skips raises instead of running without; ``torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]``
(``cudagraph_skips``): how many compiled graphs inductor ran without them; ``CompiledFxGraph.post_compile``'s
arguments (``record_compiled_graphs``): what inductor knows of a graph's inputs, which a CUDA graph's
replay depends on. The same on every torch of the range, no public switch, count or record.

``torch._functorch.config.enable_autograd_cache`` (``keep_ranks_compiled_graphs_apart``): AOTAutograd's
cache of compiled graphs across processes, turned off for multi-rank runs (why: that function).

``torch.optim.Adam._init_group`` (``step_on_local_shards``): the step's lists of parameters, gradients and
moments, handed to the update as the DTensors' local shards; the same signature on every torch of the range.

Named elsewhere in ``torchtitan_ext``, and checked with these: ``torch._utils._get_available_device_type`` and
``_get_device_module`` (``cpu.py``: torchtitan's device on a machine with no accelerator),
``torch._dynamo.callback.callback_handler`` (``startup_clock.py``: compile time, no public hook), and
``torch.distributed._functional_collectives.all_reduce`` (``train.py``, ``validator.py``),
``torch._dynamo.list_backends`` (``preflight/job_rules/job.py``: ``compile.backend``). The library's own
(``boost/`` imports torch alone) are listed in ``boost.runtime.torch_names``.

A torch newer than the range runs where these names are there (``missing_private_api``, by feature:
the newest stage API's names, not 2.11's); the preflight refuses one that lacks any, naming them
(``torch_range.check_newer_torch``). Not found that way: ``PipelineStage._user_meta``, ``args_recv_info``
and ``grad_recv_info`` (attributes each stage sets itself) and inductor's
``cudagraph_skips`` counter (a ``Counter``: an unknown key reads 0).

Context parallelism (``torchtitan_ext.infra.context_parallel``), ``torch.distributed.tensor.experimental._attention``
(the path torchtitan imports it by; torch's CP has no public API beyond ``context_parallel``, whose buffer
sharding torchtitan 0.2.2 no longer uses):

- ``_templated_ring_attention`` and the ``_templated_ring_attention_backward`` of its module, and
  ``DTensor._op_dispatcher._custom_op_handlers`` (``ring_attention_on_cpu_kernel``): torch's ring attention,
  registered for the CPU's SDPA kernel (``aten._scaled_dot_product_flash_attention_for_cpu`` and its
  backward). torch routes the GPU's flash, efficient and cuDNN kernels to the ring and has no rule for the
  CPU's: the same ring, load balancing and merge run here, on the kernel the CPU has. ``_cp_options``
  (``convert_to_f32``): the ring merges its partial outputs in float32, which would round a float64
  run's; BOOST's handler merges in float32 or the inputs' wider dtype.
- ``_ContextParallel`` with ``AttentionType.FLEX`` (``all_gathered_keys_and_values``): torch's
  FlexAttention CP all-gathers keys and values before the kernel (``flex_cp_allgather``, a reduce-scatter
  backward); BOOST puts the same pre-hook on its masked SDPA (block_causal), whose mask rows arrive sharded.
- ``set_rotate_method`` (``ring_rotate_method``): how the ring passes keys and values on
  (``parallelism.context_parallel_rotate_method``), which torchtitan 0.2.2 sets only in a validation
  context it never enters, so its training ring always all-gathers.
- ``_HeadTailLoadBalancer._generate_indices`` (``sequence_order``): the order torchtitan's ``cp_shard``
  deals a window's positions to the CP ranks, which the all-gathered keys follow.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import _utils as pipelining_utils
from torch.distributed.pipelining.schedules import _PipelineSchedule

# torch ≥ 2.13: PipelineStage holds _StageMeta records and takes gradient shapes
STAGE_META: bool = hasattr(pipelining_utils, "_StageMeta")
# Whether the zero-bubble schedules' split backward is exact. torch 2.11's ``stage_backward_weight`` hands the
# summed gradients of a node's several outputs to its first (2.13 gives each output its own): LaX under
# btp's sequence parallelism trains 2e-4 off its one-process curve from the second update on. Told by the
# stage API that came with the fix, as the stage's own bridge is (2.11 also opens a V-shaped schedule's
# links with a message a rank sends itself, which gloo refuses).
EXACT_SPLIT_BACKWARD: bool = STAGE_META
# torch 2.13 and 2.14: the schedule's start-up vote on static shapes is passed from stage to stage, whose last
# word DryRunStage gives on a dry run (2.11 has no vote; 2.15 all-reduces it, skipped on the fake backend)
STAGE_VOTE: bool = hasattr(PipelineStage, "_warmup_backward_result")

PipelineSchedule = _PipelineSchedule  # the base of every schedule class (a type hint)


# The private torch names ``torchtitan_ext`` uses, by the module each is read from (``module.attribute``
# after ``import module``), which ``missing_private_api`` looks up with the library's.
EXTENSION_PRIVATE_TORCH: dict[str, tuple[str, ...]] = {
    "torch.distributed.pipelining._utils": ("_StageMeta", "extract_tensor_metas"),
    "torch.distributed.pipelining.stage": (  # what StaticShapeStage overrides
        "PipelineStage.forward_maybe_with_nosync",
    ),
    # this module's, and the trainer's and validator's agreement on a stop (train.py, validator.py)
    "torch.distributed._functional_collectives": ("_resolve_group_name", "wait_tensor", "all_reduce"),
    "torch.distributed.distributed_c10d": ("_resolve_process_group",),
    "torch._inductor.config": (
        "bucket_all_gathers_fx",
        "bucket_reduce_scatters_fx",
        "triton.cudagraph_or_error",
    ),
    "torch._functorch.config": ("enable_autograd_cache",),
    "torch.optim.adam": ("Adam._init_group",),  # what step_on_local_shards overrides
    "torch.distributed.tensor.experimental._attention": (  # context parallelism
        "_templated_ring_attention",
        "_cp_options",
        "_ContextParallel",
        "set_rotate_method",
        "_HeadTailLoadBalancer",
    ),
    "torch.distributed.tensor.experimental._context_parallel._attention": (
        "_templated_ring_attention_backward",
    ),
    "torch.distributed.tensor": ("DTensor._op_dispatcher._custom_op_handlers",),
    "torch._utils": ("_get_available_device_type", "_get_device_module"),  # cpu.py: torchtitan on a CPU
    "torch._dynamo.callback": ("callback_handler",),  # startup_clock.py: compile time
    "torch._dynamo": ("list_backends",),  # preflight/job_rules/job.py: compile.backend
}


def missing_private_api() -> list[str]:
    """The private torch names BOOST uses that this torch lacks, each as ``module.name``: this module's, the
    stages' overriding torch's methods, the rest of ``torchtitan_ext``'s, and the library's
    (``boost.runtime.torch_names``). None on every torch of the range from 2.13 (2.11 lacks the 2.13 stage
    API, ``_StageMeta`` and its kin, bridged otherwise there). Found by feature: what a torch newer than
    the range must have for BOOST to run it."""
    import importlib
    import inspect

    from boost.runtime.torch_names import LIBRARY_PRIVATE_TORCH

    missing = []
    for module_name, names in [*EXTENSION_PRIVATE_TORCH.items(), *LIBRARY_PRIVATE_TORCH.items()]:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a module a newer torch moved: every name read from it is missing
            missing += [f"{module_name}.{name}" for name in names]
            continue
        for name in names:
            found = module
            for part in name.split("."):
                found = getattr(found, part, None)
            if found is None:
                missing.append(f"{module_name}.{name}")
    stage_keywords = inspect.signature(PipelineStage.__init__).parameters
    missing += [f"PipelineStage({k}=...)" for k in ("input_grads", "output_grads") if k not in stage_keywords]
    return list(dict.fromkeys(missing))  # a name both tables hold, once


def static_stage_arguments(
    inputs: tuple[torch.Tensor, ...], outputs: tuple[torch.Tensor, ...], last: bool
) -> dict[str, Any]:
    """``PipelineStage``'s keywords that give it its boundary tensors (meta ``inputs`` / ``outputs`` of one
    micro-batch), so that it infers no shape at run time. The last stage's outputs get no gradient
    from a next stage: the loss is taken there."""
    if not STAGE_META:
        return {"input_args": inputs, "output_args": outputs}
    return {
        "input_args": inputs,
        "output_args": outputs,
        "input_grads": tuple(_grad_of(x) for x in inputs),
        "output_grads": tuple(None if last else _grad_of(y) for y in outputs),
    }


def _grad_of(x: torch.Tensor) -> torch.Tensor | None:
    return torch.empty_like(x, requires_grad=False) if x.requires_grad else None


def stage_shapes(stage) -> Any:
    """The boundary shapes ``stage`` holds now, as torch holds them (to be given back by ``use_stage_shapes``)."""
    if STAGE_META:
        return stage._user_meta
    return stage.inputs_meta, stage._outputs_meta


def forward_shapes(inputs: tuple[torch.Tensor, ...], outputs: tuple[torch.Tensor, ...]) -> Any:
    """Boundary shapes for a forward-only pass (validation: no gradient shapes), in ``stage_shapes``'s form."""
    if STAGE_META:
        return pipelining_utils._StageMeta(
            inputs=pipelining_utils.extract_tensor_metas(inputs),
            outputs=pipelining_utils.extract_tensor_metas(outputs),
        )
    return tuple(inputs), tuple(outputs)


def use_stage_shapes(stage, shapes: Any) -> None:
    """From the next (re-)initialisation on, ``stage`` allocates its buffers for ``shapes``."""
    if STAGE_META:
        stage._user_meta = shapes
    else:
        stage.inputs_meta, stage._outputs_meta = shapes


def reinitialize_on_switch(schedule: _PipelineSchedule, training: bool, last_training: bool | None) -> None:
    """Before ``schedule`` runs ``step`` (``training``) or ``eval`` after the other one: make it re-initialise its
    stages, with the shapes they hold now. torch ≥ 2.13 does so itself; torch 2.11 initialises once."""
    if STAGE_META or last_training is None or training == last_training:
        return
    for flag in (
        "_stage_forward_initialized",
        "_stage_backward_initialized",
        "_stages_forward_initialized",
        "_stages_backward_initialized",
    ):
        if hasattr(schedule, flag):
            setattr(schedule, flag, False)


# the functional collectives a dry run's fake process group is given outputs for, by name (each torch has
# some of them: ``*_single`` from torch 2.13, its ``*_tensor`` names then deprecated aliases of them)
FAKE_FILLED_FUNCTIONAL = {
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "all_gather_tensor": "all_gather",
    "all_gather_single": "all_gather",
}


def fake_filled_functional() -> dict[str, str]:
    """The functional collectives ``fill_fake_collective_outputs`` wraps on the torch at hand: each of
    ``FAKE_FILLED_FUNCTIONAL`` it has, on a torch whose fake backend leaves their outputs as allocated
    (before 2.13), none from 2.13. They land in compiled graphs, where a wrapper's copy is one more kernel
    (``bench.compiled_cost`` would charge it to the block); the fake backend's own filling is none. Told by
    the version: the fake backend's behaviour cannot be asked before its process group exists, and the
    wrapper's semantics are the 2.13 backend's own, so a torch wrongly placed either side computes the same."""
    import torch.distributed._functional_collectives as funcol
    from packaging.version import Version

    if Version(torch.__version__.split("+")[0]) >= Version("2.13"):
        return {}
    return {name: kind for name, kind in FAKE_FILLED_FUNCTIONAL.items() if hasattr(funcol, name)}


def fill_fake_collective_outputs() -> None:
    """From now on, a reduce-scatter on a fake process group (a dry run's) fills its output as torch ≥ 2.13's
    fake backend does: this rank's chunk of its input, as if every rank held the same data. torch 2.11's
    leaves the output as allocated (FSDP2's gradients, Megatron's sequence-parallel activations came out
    NaN), and no public API replaces a registered backend: the Python functions that issue
    reduce-scatters are wrapped, ``torch.distributed``'s (FSDP2 calls them) and the functional
    collectives' (DTensor's redistribution). Idempotent; a real process group passes through untouched."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    if getattr(dist.reduce_scatter_tensor, "_boost_fills_fake", False):
        return
    reduce_scatter_tensor, reduce_scatter = dist.reduce_scatter_tensor, dist.reduce_scatter

    def fake(group) -> bool:
        return dist.get_backend(group) == dist.Backend.FAKE

    def reduce_scatter_tensor_filled(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        work = reduce_scatter_tensor(output, input, op=op, group=group, async_op=async_op)
        if fake(group):
            with torch.no_grad():
                rank, size = dist.get_rank(group), dist.get_world_size(group)
                output.copy_(input.reshape(size, -1)[rank].view_as(output))
        return work

    def reduce_scatter_filled(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False):
        work = reduce_scatter(output, input_list, op=op, group=group, async_op=async_op)
        if fake(group):
            with torch.no_grad():
                output.copy_(input_list[dist.get_rank(group)])
        return work

    @torch.compiler.assume_constant_result
    def fake_rank_and_size(group_name: str) -> tuple[int, int] | None:
        """This rank's place in the named group and its size where the group is the fake backend's, else
        None. Inside a compiled block (btp's sequence parallelism gathers and reduce-scatters there) dynamo
        cannot trace ``_resolve_process_group``, a pybind function: it calls this once as it traces and
        bakes the answer into the graph (``fullgraph`` allows no break). A group's name, backend, rank and
        size never change while its process group lives."""
        process_group = dist.distributed_c10d._resolve_process_group(group_name)
        if not fake(process_group):
            return None
        return dist.get_rank(process_group), dist.get_world_size(process_group)

    def fill_if_fake(output, group, tag, fill):
        """``output``, on a fake group with ``fill(rank, size)`` written into it (its wait first). Written
        through ``.data``, which leaves the tensor's version counter as it is: low-rank activation
        checkpointing has cached the collective's output by then, and a selective policy's cache refuses a
        tensor whose version moved. Into the same buffer, as torch ≥ 2.13's backend fills it: a new tensor
        in its place would leave the cached buffer held beside it (a 350M dry run at tp 4 with
        ``boost.sequence_parallel``: 0.16–0.22 GiB more peak memory)."""
        place = fake_rank_and_size(funcol._resolve_group_name(group, tag))
        if place is None:
            return output
        output = funcol.wait_tensor(output)
        with torch.no_grad():
            output.data.copy_(fill(*place))
        return output

    def functional_reduce_scatter_filled(original):
        def filled(self, reduceOp, scatter_dim, group, tag=""):
            output = original(self, reduceOp, scatter_dim, group, tag)
            return fill_if_fake(
                output, group, tag, lambda rank, size: self.chunk(size, dim=scatter_dim)[rank]
            )

        return filled

    def functional_all_gather_filled(original):
        def filled(self, gather_dim, group, tag=""):
            output = original(self, gather_dim, group, tag)
            return fill_if_fake(
                output, group, tag, lambda rank, size: torch.cat([self] * size, dim=gather_dim)
            )

        return filled

    makers = {"reduce_scatter": functional_reduce_scatter_filled, "all_gather": functional_all_gather_filled}
    wrappers = [
        (dist, "reduce_scatter_tensor", reduce_scatter_tensor_filled),
        (dist, "reduce_scatter", reduce_scatter_filled),
        *(
            (funcol, name, makers[kind](getattr(funcol, name)))
            for name, kind in fake_filled_functional().items()
        ),
    ]
    for module, name, wrapper in wrappers:
        wrapper.__wrapped__ = getattr(module, name)
        wrapper._boost_fills_fake = True
        setattr(module, name, wrapper)


def merge_fsdp_collectives_in_compiled_graphs() -> None:
    """From now on, inductor merges the FSDP all-gathers of a compiled graph into one all-gather (their
    casts and copies into one buffer) and its reduce-scatters into one (SimpleFSDP's, traced into each
    block: ``torchtitan_ext.infra.simple_fsdp``). ``torch._inductor.config``'s ``bucket_all_gathers_fx``
    and ``bucket_reduce_scatters_fx`` are the switch on every torch of the range (2.11–2.14), with no
    public API; they act on inductor's graphs only (``aot_eager`` runs a graph as traced)."""
    import torch._inductor.config as inductor_config

    inductor_config.bucket_all_gathers_fx = "only_fsdp"
    inductor_config.bucket_reduce_scatters_fx = "all"


def cudagraphs_or_error() -> None:
    """From now on, a compiled graph that asked for CUDA graphs and runs on a GPU without them (an op
    CUDA graphs cannot capture, an input the graph mutates) raises, naming inductor's reason, instead of
    running uncaptured behind one warning line (``boost.cudagraphs``: ``torchtitan_ext.infra.cudagraphs``).
    Graphs on a CPU record none and raise nothing: inductor only counts them."""
    import torch._inductor.config as inductor_config

    inductor_config.triton.cudagraph_or_error = True


def cudagraph_skips() -> int:
    """How many compiled graphs that asked for CUDA graphs inductor has run without them, in this process
    (a CPU's graphs; on a GPU ``cudagraphs_or_error`` makes each one an error)."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


@contextmanager
def record_compiled_graphs() -> Iterator[list[dict[str, Any]]]:
    """Inside, every graph inductor compiles or loads from its cache is recorded with what a CUDA graph's
    replay needs of its inputs: ``cudagraphs`` (whether its compile asked for them), ``backward``, ``inputs``
    (their count), ``static`` (the indices inductor treats as fixed addresses: parameters, buffers, saved
    activations; a replay copies every other input in), ``mutated`` (the indices it writes in place).
    A CPU's graphs are recorded alike, before inductor decides they run without CUDA graphs."""
    import torch._inductor.config as inductor_config
    from torch._inductor.output_code import CompiledFxGraph

    records: list[dict[str, Any]] = []
    post_compile = CompiledFxGraph.post_compile

    def recording(self, example_inputs, constants, graph_kwargs):
        records.append(
            dict(
                cudagraphs=bool(inductor_config.triton.cudagraphs),  # the graph's compile options
                backward=bool(self.fx_kwargs.get("is_backward")),
                inputs=len(example_inputs),
                static=sorted(self.fx_kwargs.get("static_input_idxs") or ()),
                mutated=sorted(self.mutated_input_idxs or ()),
                shapes=[tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in example_inputs],
            )
        )
        return post_compile(self, example_inputs, constants, graph_kwargs)

    CompiledFxGraph.post_compile = recording
    try:
        yield records
    finally:
        CompiledFxGraph.post_compile = post_compile


def keep_ranks_compiled_graphs_apart() -> None:
    """From now on, this process compiles its graphs itself rather than load another rank's from
    AOTAutograd's on-disk cache (inductor's own cache, keyed on the traced graph, still serves).

    A block's collectives, and the loss's under loss-parallel TP, name this rank's process groups
    (tensor-parallel group "11" on ranks 0-1, "12" on ranks 2-3 of tp 2 × FSDP 2), but AOTAutograd's
    cache key sees the device mesh, which is the same on every rank: a rank loads the graph another rank
    compiled and stops with "Could not resolve the process group registered under the name 11" (seen on
    torch 2.13 with gloo at 4 ranks, FSDP2 or SimpleFSDP under inductor, or the loss compiled alone: from
    the second rank to compile on, and on every rank of a second start). Ranks whose devices differ
    (cuda:0, cuda:1) get different keys; ranks of different groups on the same device index sharing a
    cache (one on a shared file system) would not. The price is
    AOTAutograd's tracing at each start."""
    import torch._functorch.config as functorch_config

    functorch_config.enable_autograd_cache = False


_LOCAL_SHARD_OPTIMIZERS: dict[type, type] = {}


def step_on_local_shards(optimizer: torch.optim.Optimizer) -> None:
    """From now on, ``optimizer`` (torch's ``Adam`` or ``AdamW``) runs each step's update on its DTensor
    parameters' local shards: the same kernels on the same local data (Adam is elementwise), without
    DTensor's dispatch of the fused or foreach op over every parameter, its gradient and both moments.

    On the H100 that dispatch was 11 of the 16 ms the host spent in a 7B@16 rank's optimizer step, the GPU
    idle meanwhile (``bench/results/gpu.md``). The lists ``Adam._init_group`` fills (private, the same on
    every torch of the range) are handed over unwrapped; the state stays DTensors, so checkpoints and
    resharding see what they saw. A step whose gradients hold a ``Partial`` placement (a sum still owed
    across ranks: not elementwise-local) keeps DTensor's path, which is exact either way; a gradient laid
    out other than its parameter is first brought to the parameter's layout, as DTensor's update would.
    The optimizer's class is swapped for a subclass, as FSDP2's ``fully_shard`` swaps a module's."""
    from torch.distributed.tensor import DTensor

    cls = type(optimizer)
    if cls in _LOCAL_SHARD_OPTIMIZERS.values():
        return
    if not issubclass(cls, torch.optim.Adam):
        raise TypeError(f"step_on_local_shards takes torch's Adam or AdamW, not {cls.__name__}")

    def _init_group(self, group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps):
        has_complex = cls._init_group(
            self, group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps
        )
        if any(isinstance(g, DTensor) and any(p.is_partial() for p in g.placements) for g in grads):
            return has_complex
        # moments laid out other than their parameter (not seen: they are made, and loaded, as its copies)
        # keep DTensor's path too
        if any(
            isinstance(s, DTensor) and s.placements != p.placements
            for state in (exp_avgs, exp_avg_sqs, max_exp_avg_sqs)
            for p, s in zip(params, state)
        ):
            return has_complex
        # a gradient may be laid out other than its parameter: the vocabulary-sharded embedding's comes back
        # Replicate. DTensor's in-place update would bring it to the moments' (the parameter's) layout, as
        # this does: a Replicate → Shard redistribution is a local slice, the same values, no collective
        grads[:] = [
            g.redistribute(p.device_mesh, p.placements)
            if isinstance(g, DTensor) and g.placements != p.placements
            else g
            for p, g in zip(params, grads)
        ]
        for tensors in (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs):
            tensors[:] = [t._local_tensor if isinstance(t, DTensor) else t for t in tensors]
        return has_complex

    if cls not in _LOCAL_SHARD_OPTIMIZERS:
        _LOCAL_SHARD_OPTIMIZERS[cls] = type(f"LocalShard{cls.__name__}", (cls,), {"_init_group": _init_group})
    optimizer.__class__ = _LOCAL_SHARD_OPTIMIZERS[cls]


# ----------------------------------------------------------------------------- context parallelism

_aten = torch.ops.aten
_CPU_SDPA = _aten._scaled_dot_product_flash_attention_for_cpu.default
_CPU_SDPA_BACKWARD = _aten._scaled_dot_product_flash_attention_for_cpu_backward.default
_SEQ_DIM = 2  # (bs, heads, seqlen, head_dim), as torch's ring assumes


@contextmanager
def _ring_merge_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's ring merges partial outputs in float32 (``convert_to_f32``), float64 ones too: here in float32
    or ``dtype``, the wider."""
    from torch.distributed.tensor.experimental._attention import _cp_options

    before = _cp_options.convert_to_f32
    _cp_options.convert_to_f32 = dtype != torch.float64
    try:
        yield
    finally:
        _cp_options.convert_to_f32 = before


def _ring_on_cpu_kernel(op_call, args: tuple, kwargs: dict):
    """DTensor's handler of the CPU SDPA kernel and its backward on sequence-sharded DTensors: torch's ring."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental._attention import _templated_ring_attention

    # the backward lives beside the forward, wherever a torch of the range keeps them
    _templated_ring_attention_backward = sys.modules[_templated_ring_attention.__module__].__dict__[
        "_templated_ring_attention_backward"
    ]

    sharded = next(a for a in args if isinstance(a, DTensor))
    mesh, placements = sharded.device_mesh, sharded.placements
    local = [a.to_local() if isinstance(a, DTensor) else a for a in args]
    if kwargs.get("attn_mask") is not None:
        raise NotImplementedError("torch's ring attention takes no mask (BOOST all-gathers keys for one)")
    group, scale = mesh.get_group(), kwargs.get("scale")
    if op_call == _CPU_SDPA:
        q, k, v = local[:3]
        dropout_p = local[3] if len(local) > 3 else kwargs.get("dropout_p", 0.0)
        is_causal = local[4] if len(local) > 4 else kwargs.get("is_causal", False)
        with _ring_merge_dtype(q.dtype):
            out, lse = _templated_ring_attention(
                group, _SEQ_DIM, _CPU_SDPA, q, k, v, is_causal=is_causal, dropout_p=dropout_p, scale=scale
            )
        return tuple(DTensor.from_local(t, mesh, placements, run_check=False) for t in (out, lse))
    grad_out, q, k, v, out, lse, dropout_p, is_causal = local[:8]
    with _ring_merge_dtype(q.dtype):
        grads = _templated_ring_attention_backward(
            group,
            _SEQ_DIM,
            _CPU_SDPA_BACKWARD,
            grad_out=grad_out,
            grad_out_name="grad_out",
            query=q,
            key=k,
            value=v,
            out=out,
            logsumexp=lse,
            is_causal=is_causal,
            dropout_p=dropout_p,
            scale=scale,
        )
    return tuple(DTensor.from_local(t, mesh, placements, run_check=False) for t in grads[:3])


def ring_attention_on_cpu_kernel() -> None:
    """DTensor routes the CPU's SDPA kernel on sequence-sharded inputs to torch's ring attention, as torch's
    CP dispatcher (``_enable_context_parallel_dispatcher``, which this follows: it resets the handlers)
    routes the GPU's kernels. CUDA tensors never reach the CPU kernel."""
    from torch.distributed.tensor import DTensor

    handlers = DTensor._op_dispatcher._custom_op_handlers
    handlers[_CPU_SDPA] = _ring_on_cpu_kernel
    handlers[_CPU_SDPA_BACKWARD] = _ring_on_cpu_kernel


def all_gathered_keys_and_values():
    """torch's FlexAttention CP style: a forward pre-hook all-gathers the module's keys and values (its
    2nd and 3rd positional inputs, ``(bs, heads, seqlen, head_dim)``) over the mesh it is applied with."""
    from torch.distributed.tensor.experimental._attention import _ContextParallel

    return _ContextParallel(seq_dim=_SEQ_DIM, attention_type=_ContextParallel.AttentionType.FLEX)


def sequence_order(balancer: str | None, seq_len: int, cp: int, device: torch.device) -> torch.Tensor:
    """``[seq_len]``: the window's positions in the order the CP ranks hold them, rank by rank, as torchtitan's
    ``cp_shard`` deals them (``"headtail"``: chunks ``i`` and ``2·cp - 1 - i`` to rank ``i``; ``None``: in order)."""
    if balancer is None:
        return torch.arange(seq_len, device=device)
    from torch.distributed.tensor.experimental._attention import _HeadTailLoadBalancer

    return _HeadTailLoadBalancer(seq_len, cp, device)._generate_indices()[0]


def ring_rotate_method(method: str) -> None:
    """``"allgather"`` (one all-gather of the keys and values a layer) or ``"alltoall"`` (passed rank to rank)."""
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    set_rotate_method(method)

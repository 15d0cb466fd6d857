"""torchtitan's ``pipeline_llm`` for BOOST: stages that know their shapes, and the loss normalised per token.

``pipeline_boost`` is torchtitan 0.2.2's ``pipeline_llm`` with BOOST's stages built in it: the same stage
count and fqn split, each model part parallelised by ``parallelize_fn``, then one ``StaticShapeStage`` per
part and one schedule over them.

Static shapes. Left to itself, torch's ``PipelineStage`` learns what crosses a stage boundary at
the first step: it runs one micro-batch forward and backward and sends the shapes to the neighbours
(``send/recv_object_list``). BOOST knows them from the config, so each stage is given them
(``input_args`` / ``output_args`` as meta tensors) and the schedule starts from them:

    stage           input                      output
    first           token ids  [mb, s]  int64  residual stream (+ LaX's latents)
    middle          residual stream (+ latents) residual stream (+ latents)
    last            residual stream (+ latents) logits [mb, s, V] (a Shard(-1) DTensor under loss-parallel TP)

    residual stream ``SCHEMES[tp_scheme].residual_shape``: [mb, s, d/t] under BTP (sharded on d),
                    [mb, s/t, d] under Megatron with sequence parallel, else [mb, s, d]; in the dtype
                    the blocks compute in: FSDP's ``mixed_precision_param`` where FSDP2 wraps the
                    model (at a shard degree of 1 too: ``parallelize.fsdp_wraps``), else
                    ``training.dtype`` (torchtitan runs no autocast under PP)
    latents         LaX only: each bottleneck's latent ``[mb, s, G·r]`` (``carry_keys``: qkv, o, gate_up,
                    down grouped; q ... down ungrouped), whole on every TP rank (a rank's rows
                    ``[mb·s/t, G·r]`` under btp's sequence parallelism, ``TPScheme.carry_shape``), in the
                    residual's dtype; across a boundary with a block on each side (``carry_crosses``):
                    not out of an embedding alone, nor into a head without a block

Validation runs the same schedule on micro-batches of ``validation.local_batch_size /
n_microbatches`` × ``validation.seq_len``: the stage holds a second set of shapes for it, and
``PerTokenSchedule`` hands each stage the set of the pass it runs.

A dry run (``--comm.mode fake_backend``: one process as rank 0 of NGPU, a process group that
delivers nothing) needs this: no shape message ever arrives there. ``DryRunStage`` covers the two
other things a stage receives there (torch's start-up vote, the activations and gradients).

torch has no public hook for two shape sets per stage, nor for a vote no peer answers, and its stage
API moved between 2.11 and 2.13: every private name this needs is bridged in ``torchtitan_ext.torch_private``
(its docstring lists them), the one module that names torch's private API.

Per-token loss. torchtitan 0.2.2's pipeline schedules back-propagate the *summed* cross-entropy of
each microbatch, while the non-pipelined trainer divides by the step's global token count before
backward — so gradients under PP are ~tokens× too large (grad_norm ~1000 instead of ~1; torchtitan
issue #2972) and gradient clipping then distorts the update. ``PerTokenSchedule`` divides each
microbatch loss by the step's global token count inside the schedule, and multiplies the recorded
losses back, so that the trainer's logging (which divides by that count itself) is unchanged.

The count is the trainer's own ``global_valid_tokens`` (``PerTokenSchedule.count_step_tokens``, before
each step: the labels of every data-parallel rank and gradient-accumulation step, counted before context
parallelism cuts each window into ``cp`` shares). A count of the stage's own labels would be a CP rank's
share: its loss divided by ``1/cp`` of the step's tokens, and FSDP's sum over the CP ranks ``cp`` times the
gradient (the pp × cp rows of the feature matrix compare the gradient norms with one process's).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    PipelineScheduleMulti,
    ScheduleDualPipeV,
    ScheduleZBVZeroBubble,
    get_schedule_class,
)
from torch.distributed.tensor import DTensor, Shard
from torchtitan.components.loss import IGNORE_INDEX, LossFunction
from torchtitan.config import TORCH_DTYPE_MAP, JobConfig
from torchtitan.distributed import ParallelDims
from torchtitan.distributed.pipeline_parallel import build_pipeline_schedule
from torchtitan.protocols.train_spec import BaseModelArgs, ParallelizeFunction
from torchtitan.tools.logging import logger

from boost.training.model.model import carry_keys, hands_carries_on
from boost.training.rules import (
    KINDS,
    SCHEMES,
    pipeline_stages_problem,
    splits_backward,
)
from torchtitan_ext.infra.parallelize import fsdp_wraps
from torchtitan_ext.infra.stage_split import stage_module_names
from torchtitan_ext.torch_private import (
    STAGE_VOTE,
    PipelineSchedule,
    forward_shapes,
    reinitialize_on_switch,
    stage_shapes,
    static_stage_arguments,
    use_stage_shapes,
)


class StaticShapeStage(PipelineStage):
    """A ``PipelineStage`` given its boundary tensors for training and for validation.

    ``training`` / ``validation``: ``(inputs, outputs)`` example tensors (meta device) of one
    micro-batch. torch keeps one set of static shapes per stage; ``PerTokenSchedule`` hands the stage
    the set of the pass it runs (``use``), and the schedule re-initialises its stages on a switch.
    ``split_backward``: the schedule splits each backward in two (``rules.PIPELINE_SPLIT_BACKWARD``), whose
    first pass detaches the stage's outputs in place (``forward_maybe_with_nosync``).
    """

    def __init__(
        self,
        submodule: nn.Module,
        stage_index: int,
        num_stages: int,
        device: torch.device,
        training: tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]],
        validation: tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]],
        group: dist.ProcessGroup,
        split_backward: bool = False,
    ) -> None:
        inputs, outputs = training
        self._split_backward = split_backward
        last = stage_index == num_stages - 1
        super().__init__(
            submodule,
            stage_index,
            num_stages,
            device,
            group=group,
            **static_stage_arguments(inputs, outputs, last),
        )
        self._shapes = {True: stage_shapes(self), False: forward_shapes(*validation)}

    def use(self, training: bool) -> None:
        """Allocate for training (``True``) or validation micro-batches from the next initialisation on."""
        use_stage_shapes(self, self._shapes[training])

    def forward_maybe_with_nosync(self, *args, **kwargs):
        # A split backward (the zero-bubble schedules' input-gradient pass) detaches the stage's outputs in
        # place, which a view refuses: LaX's carries leave a tensor-parallel block as views of their DTensors'
        # local tensors. There they are materialised (r wide, held until the stage's backward); the other
        # schedules keep the views.
        out = super().forward_maybe_with_nosync(*args, **kwargs)
        if not self._split_backward:
            return out
        if isinstance(out, tuple):
            return tuple(t.clone() if isinstance(t, torch.Tensor) and t._is_view() else t for t in out)
        return out.clone() if out._is_view() else out


class DryRunStage(StaticShapeStage):
    """A ``StaticShapeStage`` on the fake process group of a dry run, where no message ever arrives.

    Two things would come from the neighbours there. torch's start-up vote on whether every stage
    has static shapes (torch 2.13 and 2.14, where it passes from stage to stage; 2.15 skips it on the fake
    backend) reads as "no" (the received flag stays 0): every stage was built by this code, as this one
    was, so the answer is "yes". And the received activations and gradients
    would be whatever memory the buffers were allocated on (a garbage grad_norm, or a NaN that stops
    the step): they are filled as each receive is posted (``get_fwd_recv_ops`` / ``get_bwd_recv_ops``,
    where torch 2.15 allocates them, and torch 2.11 to 2.14 hand out the buffers allocated at start-up),
    and nothing overwrites them. The gradients with zeros; the activations with unit normals, seeded by
    stage and micro-batch (the same every step), a residual stream's scale: zeros would run every block of
    a later stage on zero vectors (attention and SwiGLU of zero are zero, RMSNorm's gradient at zero
    1/sqrt(eps)), so the last stage's loss would be ln(vocabulary) at every step and its weights'
    gradients zero. A dry run that plays the last stage (``DRY_RUN_RANK``) shows a loss that moves.
    """

    if STAGE_VOTE:  # torch 2.13, 2.14: the vote's result, "static", as the stage passes it on

        def _warmup_backward_result(self, received_result=None):
            return torch.ones_like(super()._warmup_backward_result(received_result))

    def get_fwd_recv_ops(self, fwd_chunk_id: int):
        ops = super().get_fwd_recv_ops(fwd_chunk_id)
        _fill_buffers(self.args_recv_info[fwd_chunk_id], seed=self.stage_index << 20 | fwd_chunk_id)
        return ops

    def get_bwd_recv_ops(self, bwd_chunk_id: int):
        ops = super().get_bwd_recv_ops(bwd_chunk_id)
        if ops:  # the last stage receives no gradient
            _fill_buffers(self.grad_recv_info[bwd_chunk_id], seed=None)
        return ops


@torch.no_grad()
def _fill_buffers(recv_infos: tuple, seed: int | None) -> None:
    """One micro-batch's receive buffers (of ``args_recv_info`` or ``grad_recv_info``) zeroed, or, given
    ``seed``, the floating-point ones filled with unit normals drawn from it."""
    generator = None
    for info in recv_infos:
        buffer = getattr(info, "buffer", None)
        if buffer is None:
            continue
        local = buffer.to_local() if isinstance(buffer, DTensor) else buffer
        if seed is None or not local.is_floating_point():
            local.zero_()
            continue
        if generator is None:
            generator = torch.Generator(device=local.device).manual_seed(seed)
        local.normal_(generator=generator)


def stage_examples(
    stage_index: int,
    num_stages: int,
    micro_batch: int,
    seq_len: int,
    training: bool,
    job_config: JobConfig,
    parallel_dims: ParallelDims,
    model_args: BaseModelArgs,
    module_names: list[list[str]],
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """``(inputs, outputs)`` of one stage for one micro-batch, as meta tensors (module docstring's table);
    ``module_names``: every stage's modules, which say where LaX's carries cross (``carry_crosses``)."""
    cfg = job_config.boost
    tp = parallel_dims.tp if parallel_dims.tp_enabled else 1
    d, vocab = model_args.dim, model_args.vocab_size
    residual = SCHEMES[cfg.tp_scheme].residual_shape(micro_batch, seq_len, d, tp, cfg.sequence_parallel)
    mixed = job_config.training.mixed_precision_param
    dtype = TORCH_DTYPE_MAP[mixed if fsdp_wraps(parallel_dims, mixed) else job_config.training.dtype]
    hidden = torch.empty(residual, dtype=dtype, device="meta", requires_grad=training)
    # LaX: the latents the blocks carry cross the boundary beside the residual stream, whole on every
    # TP rank (replicated after BTP's all-reduce; gathered under vanilla), or a rank's rows of the flat
    # latent under btp's sequence parallelism, one per bottleneck
    scheme = SCHEMES[cfg.tp_scheme]
    carried = tuple(
        torch.empty(
            scheme.carry_shape(micro_batch, seq_len, width, tp, cfg.sequence_parallel),
            dtype=dtype,
            device="meta",
            requires_grad=training,
        )
        for width in carry_widths(model_args)
    )
    carried_in = carried if carry_crosses(module_names, stage_index, model_args.n_layers) else ()
    carried_out = carried if carry_crosses(module_names, stage_index + 1, model_args.n_layers) else ()
    first, last = stage_index == 0, stage_index == num_stages - 1
    inputs = (
        (torch.empty(micro_batch, seq_len, dtype=torch.int64, device="meta"),)
        if first
        else (hidden, *carried_in)
    )
    if not last:
        return inputs, (hidden, *carried_out)
    if tp > 1 and not job_config.parallelism.disable_loss_parallel:
        local = torch.empty(micro_batch, seq_len, vocab // tp, dtype=dtype, device="meta")
        logits = DTensor.from_local(
            local,
            parallel_dims.get_mesh("tp"),
            [Shard(-1)],
            run_check=False,
            shape=torch.Size((micro_batch, seq_len, vocab)),
            stride=(seq_len * vocab, vocab, 1),
        )
    else:
        logits = torch.empty(micro_batch, seq_len, vocab, dtype=dtype, device="meta")
    return inputs, (logits,)


def carry_crosses(module_names: list[list[str]], boundary: int, n_layers: int) -> bool:
    """Whether LaX's carries cross the boundary before stage ``boundary``: where the stage before it hands
    them on (the model part's rule, ``hands_carries_on``)."""
    if boundary == 0:
        return False
    layer_ids = (int(name.split(".")[1]) for name in module_names[boundary - 1] if name.startswith("layers."))
    return hands_carries_on(layer_ids, n_layers)


def carry_widths(model_args: BaseModelArgs) -> tuple[int, ...]:
    """The widths of the latents a LaX model part hands the next (``carry_keys`` order), none otherwise."""
    if not KINDS[model_args.linear].latent_crossing:
        return ()
    grouped = {"qkv": 3, "gate_up": 2}
    return tuple(grouped.get(key, 1) * model_args.rank for key in carry_keys(model_args))


def _microbatch_shapes(job_config: JobConfig) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(micro-batch, seq)`` of training and of validation: torch splits each batch into the
    schedule's ``n_microbatches`` (torchtitan's: local batch / pipeline micro-batch size); ``seq`` is a
    context-parallel rank's share."""
    training, validation = job_config.training, job_config.validation
    micro_batch = job_config.parallelism.pipeline_parallel_microbatch_size
    n_microbatches = training.local_batch_size // micro_batch
    cp = job_config.parallelism.context_parallel_degree  # a stage holds its CP rank's share of the sequence
    if not validation.enable:
        return (micro_batch, training.seq_len // cp), (micro_batch, training.seq_len // cp)
    if validation.local_batch_size % n_microbatches:  # the preflight refuses it first (job_rules)
        raise ValueError(
            f"validation.local_batch_size = {validation.local_batch_size} does not split into the pipeline's "
            f"{n_microbatches} micro-batches (training.local_batch_size / "
            "parallelism.pipeline_parallel_microbatch_size); choose a multiple"
        )
    validation_micro_batch = validation.local_batch_size // n_microbatches
    return (micro_batch, training.seq_len // cp), (validation_micro_batch, validation.seq_len // cp)


class PerTokenSchedule:
    """A pipeline schedule that back-propagates each micro-batch's loss per token (module docstring).

    It has the ``step`` and ``eval`` torchtitan's trainer and validator call, and hands them back the
    losses as sums, as they record them. A training step divides by the count the trainer hands it
    (``count_step_tokens``); an evaluation by its own labels' (the validator sums the losses back).
    """

    def __init__(self, job_config: JobConfig, stages: list[PipelineStage], loss_fn: LossFunction) -> None:
        self.loss_fn = loss_fn
        self.tokens: torch.Tensor | float = 1.0  # what a micro-batch's summed loss is divided by
        self._step_tokens: torch.Tensor | None = None
        self.stages = stages
        self.schedule: PipelineSchedule = build_pipeline_schedule(
            without_expert_overlap(job_config), stages, self._loss_per_token
        )
        self._last_training: bool | None = None

    def _loss_per_token(self, pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(pred, labels) / self.tokens

    def count_step_tokens(self, global_valid_tokens: torch.Tensor) -> None:
        """The next training step's token count: the trainer's ``global_valid_tokens`` (on the device: no
        host sync)."""
        self._step_tokens = global_valid_tokens

    def step(self, *args, target: torch.Tensor | None = None, losses: list | None = None, **kwargs) -> Any:
        if self._step_tokens is None:
            raise RuntimeError(
                "PerTokenSchedule.step: the trainer hands it the step's count first (count_step_tokens)"
            )
        return self._run_per_token(True, args, kwargs, target, losses)

    def eval(self, *args, target: torch.Tensor | None = None, losses: list | None = None, **kwargs) -> Any:
        return self._run_per_token(False, args, kwargs, target, losses)

    def _run_per_token(
        self, training: bool, args: tuple, kwargs: dict, target: torch.Tensor | None, losses: list | None
    ) -> Any:
        for stage in self.stages:
            if isinstance(stage, StaticShapeStage):
                stage.use(training)
        reinitialize_on_switch(self.schedule, training, self._last_training)
        self._last_training = training
        run: Callable = self.schedule.step if training else self.schedule.eval
        if training:
            self.tokens = self._step_tokens
        elif target is not None:
            self.tokens = float(int((target != IGNORE_INDEX).sum()))
        out = run(*args, target=target, losses=losses, **kwargs)
        if losses is not None:
            losses[:] = [loss * self.tokens for loss in losses]
        return out


def without_expert_overlap(job_config: JobConfig) -> JobConfig:
    """``job_config`` with ``parallelism.pipeline_parallel_expert_parallel_overlap`` off, for the schedule.

    The field acts only with experts (its doc: DualPipeV, PP and ``expert_parallel_degree`` > 1, which
    BOOST's models refuse), but torchtitan 0.2.2's ``build_pipeline_schedule`` registers its overlap for
    every DualPipeV while the field is on, as it is by default. That overlap runs each paired forward and
    backward in two threads: on a model without experts nothing orders them, so their TP and FSDP
    collectives would reach a process group in a different order on each rank, and it asks the device
    for a stream a CPU does not have. Without it torch runs the pair one after the other, on every device.
    """
    par = dataclasses.replace(job_config.parallelism, pipeline_parallel_expert_parallel_overlap=False)
    return dataclasses.replace(job_config, parallelism=par)


def _stage_indices(pp_rank: int, pp: int, num_stages: int, v_shaped: bool) -> tuple[int, ...]:
    """The stages a pipeline rank holds (torchtitan's ``pipeline_module_split``): ``i, i + pp, ...`` for
    rank ``i`` under a looped schedule; stage ``i`` and its mirror ``num_stages - 1 - i`` under a V-shaped
    one."""
    if v_shaped:
        return pp_rank, num_stages - 1 - pp_rank
    return tuple(range(pp_rank, num_stages, pp))


def _model_part(whole: nn.Module, module_names: list[str]) -> nn.Module:
    """A copy of ``whole`` holding only ``module_names`` (torchtitan's ``pipeline_module_split``): the
    blocks not named are deleted from the ``layers`` ModuleDict (``layers.7`` keeps its name), the other
    top-level modules not named become ``None``, which BOOST's ``forward`` passes over."""
    part = copy.deepcopy(whole)
    keep = set(module_names)
    for name, child in list(part.named_children()):
        if isinstance(child, nn.ModuleDict):
            for key in list(child.keys()):
                if f"{name}.{key}" not in keep:
                    del child[key]
        elif name not in keep:
            setattr(part, name, None)
    return part


def pipeline_boost(
    model: nn.Module,
    parallel_dims: ParallelDims,
    job_config: JobConfig,
    device: torch.device,
    model_args: BaseModelArgs,
    parallelize_fn: ParallelizeFunction,
    loss_fn: LossFunction,
) -> tuple[PerTokenSchedule, list[nn.Module], bool, bool]:
    """torchtitan 0.2.2's ``pipeline_llm``, building BOOST's stages directly: the same stage count and
    fqn split (``infra.stage_split.stage_module_names``: torchtitan's, or ``module_fqns_per_model_part``),
    each of this rank's parts parallelised by ``parallelize_fn`` and given its shapes in a ``StaticShapeStage``
    (a ``DryRunStage`` on a dry run's fake process group), and one schedule over them with the loss per
    token. Returns what ``pipeline_llm`` does: the schedule, the model parts, and whether this rank holds
    the first and the last stage."""
    par = job_config.parallelism
    pp_mesh = parallel_dims.get_mesh("pp")
    pp_rank, pp = pp_mesh.get_local_rank(), pp_mesh.size()
    schedule_class = get_schedule_class(par.pipeline_parallel_schedule)
    multi_stage = issubclass(schedule_class, PipelineScheduleMulti)
    module_names = stage_module_names(par, multi_stage, pp, model_args.n_layers)
    num_stages = len(module_names)
    problem = pipeline_stages_problem(par.pipeline_parallel_schedule, multi_stage, pp, num_stages)
    if problem:  # the preflight refuses it before start (job_rules); this guards a trainer started without it
        field = (
            "module_fqns_per_model_part"
            if par.module_fqns_per_model_part
            else "pipeline_parallel_layers_per_stage"
        )
        raise ValueError(f"parallelism.{field} = {getattr(par, field)}: {problem}")
    for i, names in enumerate(module_names):
        logger.debug(f"Stage {i}: {names}")

    v_shaped = schedule_class in (ScheduleZBVZeroBubble, ScheduleDualPipeV)
    split_backward = splits_backward(par.pipeline_parallel_schedule)
    indices = _stage_indices(pp_rank, pp, num_stages, v_shaped)
    parts = []
    for index in indices:
        parts.append(_model_part(model, module_names[index]))
        logger.info(f"PP rank {pp_rank} is building stage_idx {index} with modules {module_names[index]}")
    # apply SPMD-style techniques to each part, as to a whole model without PP
    parts = [parallelize_fn(part, parallel_dims, job_config) for part in parts]

    group = pp_mesh.get_group("pp")
    stage_class = DryRunStage if dist.get_backend(group) == dist.Backend.FAKE else StaticShapeStage
    train_shape, eval_shape = _microbatch_shapes(job_config)
    stages = []
    for index, part in zip(indices, parts, strict=True):
        examples = {
            training: stage_examples(
                index, num_stages, *shape, training, job_config, parallel_dims, model_args, module_names
            )
            for training, shape in ((True, train_shape), (False, eval_shape))
        }
        stages.append(
            stage_class(
                part, index, num_stages, device, examples[True], examples[False], group, split_backward
            )
        )

    schedule = PerTokenSchedule(job_config, stages, loss_fn)
    return schedule, parts, any(s.is_first for s in stages), any(s.is_last for s in stages)

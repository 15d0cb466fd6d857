"""The warnings torchtitan's start (and FSDP2's first step) prints that cannot apply to a BOOST run, each
answered at its cause.

A rank's log should hold no warning a user cannot act on. ``install`` (the entry point calls it, before
torchtitan's ``main``) removes, each where it arises:

- ``HF assets path  does not exist!``: torchtitan checks that ``model.hf_assets_path`` is a folder, and
  BOOST's ``""`` is no folder but the offline tokenizer (``torchtitan_ext.data.tokenizer``); its check is
  given a folder that exists for that value alone (``torchtitan_private.validate_offline_assets_quietly``).
- ``ENV[TORCH_NCCL_ASYNC_ERROR_HANDLING] = 1 will be overridden to 3``: torchrun puts NCCL's variable in
  every worker's environment and torchtitan overrides it, saying so. Without an accelerator the backend
  is gloo, which reads no NCCL variable: the rank drops it before torchtitan's ``init_distributed``.
- ``In CPU autocast, but the target dtype is not supported`` (one process) and ``Mixed precision
  training with TP or PP is only supported when FSDP/HSDP/CP is enabled`` (TP/PP): torchtitan sets up
  ``training.mixed_precision_param`` without asking whether it is float32, which needs no mixed
  precision at all; a float32 job without FSDP gets no autocast (which torch's CPU autocast would
  disable, warning) and no word about it.
- ``'set_vital' is deprecated``: torchdata's ``StatefulDataLoader`` calls torch's ``set_vital``, a
  no-op since torch 2.13 that warns on lookup; ignored for torchdata's call alone.
- ``torch.distributed.distributed_c10d._set_pg_timeout is deprecated``: torchtitan 0.2.2 lowers the process
  groups' timeouts after the first step through it, which torch 2.14 deprecates for ``set_timeout`` (it
  calls that itself); ignored for torchtitan's call alone.
- ``Pipeline Parallel loss is not visible. Please add rank N to LOG_RANK``: torchtitan's check knows one
  V-shaped schedule, by its exact name "ZBVZeroBubble". Under DualPipeV, or ZBV spelt in another case
  (torch reads any), the loss is rank 0's (``rules.pipeline_loss_rank``), which the console shows, and it
  named the last stage's first rank instead; those schedules skip the check, as "ZBVZeroBubble" does.
- ``Error running lspci``: torchtitan's peak-FLOPs lookup runs ``lspci`` to tell H100 variants apart.
  Where there is none, the device name torch reports tells them apart as well (``NVIDIA H100 PCIe``,
  ``NVIDIA H100 NVL``, ``NVIDIA H100 80GB HBM3``), and the lookup falls back to it without the probe.
  On a CPU, ``torchtitan_ext.cpu`` answers the lookup itself.
- ``FSDP2-wrapped module (FSDPTransformerBlock) returned a view tensor. An in-place op on this view ...
  can cause backward to fail or produce wrong gradients`` (torch 2.13 on; also ``FSDPEmbedding``,
  ``FSDPOptimizedModule``, ``FSDPCheckpointWrapper``): FSDP2 registers its pre-backward hook on a
  module's outputs, which an in-place op on a view would drop. BOOST's modules return views (DTensor's
  ``to_local``, LaX's carries, a compiled block's aliased output) and nothing applies an in-place op to a
  module's output: the blocks add out of place, and every FSDP2 layout of the feature matrix matches one
  process, which a dropped all-gather would not. Ignored for BOOST's modules alone
  (``FSDP2_VIEW_OUTPUT``): another module's still warns.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import types
import warnings
from collections.abc import Callable, Iterator

# torchelastic's default for its NCCL workers (torch.distributed.elastic.agent.server.local_elastic_agent)
NCCL_ERROR_HANDLING_ENV = "TORCH_NCCL_ASYNC_ERROR_HANDLING"
# FSDP2's warning on a view output, for the modules BOOST wraps: its embedding and its blocks, eager,
# compiled or under activation checkpointing
FSDP2_VIEW_OUTPUT = (
    r"FSDP2-wrapped module \(FSDP(Embedding|TransformerBlock|OptimizedModule|CheckpointWrapper)\) returned a view "
    "tensor"
)


def install() -> None:
    """Answer each cause (module docstring); idempotent. Imports torchtitan."""
    from torchtitan_ext.cpu import on_cpu
    from torchtitan_ext.torchtitan_private import validate_offline_assets_quietly

    validate_offline_assets_quietly()
    warnings.filterwarnings(
        "ignore", message="'set_vital' is deprecated", category=UserWarning, module=r"torchdata\."
    )
    warnings.filterwarnings(
        "ignore",
        message="`torch.distributed.distributed_c10d._set_pg_timeout` is deprecated",
        category=FutureWarning,
        module=r"torchtitan\.",
    )
    warnings.filterwarnings(
        "ignore", message=FSDP2_VIEW_OUTPUT, category=UserWarning, module=r"torch\.distributed\.fsdp\."
    )
    _no_float32_autocast()
    _pipeline_loss_check_knows_every_v_schedule()
    if on_cpu():
        os.environ.pop(NCCL_ERROR_HANDLING_ENV, None)
    else:
        _peak_flops_without_missing_lspci()


def _no_float32_autocast() -> None:
    import torchtitan.distributed.utils as dist_utils

    amp = dist_utils.maybe_enable_amp
    if getattr(amp, "boost_no_float32_autocast", False):
        return

    def maybe_enable_amp(parallel_dims, mixed_precision_param: str, device_type: str):
        if mixed_precision_param == "float32" and not parallel_dims.fsdp_enabled:
            return contextlib.nullcontext()  # float32 is what computes without autocast
        if parallel_dims.dp_replicate_enabled:
            # replicas are FSDP2's HSDP at every shard degree (parallelize.fsdp_wraps), which casts the
            # parameters itself; torchtitan's autocast is for its DDP, which BOOST never builds
            return contextlib.nullcontext()
        return amp(parallel_dims, mixed_precision_param, device_type)

    maybe_enable_amp.boost_no_float32_autocast = True
    # torchtitan's trainer calls it as dist_utils.maybe_enable_amp: the module's attribute
    dist_utils.maybe_enable_amp = maybe_enable_amp


def _pipeline_loss_check_knows_every_v_schedule() -> None:
    import torchtitan.train as train

    from boost.training.rules import pipeline_loss_rank

    check = train.ensure_pp_loss_visible
    if getattr(check, "boost_every_v_schedule", False):
        return

    def ensure_pp_loss_visible(parallel_dims, job_config, color) -> None:
        schedule = job_config.parallelism.pipeline_parallel_schedule
        if pipeline_loss_rank(schedule, parallel_dims.pp, parallel_dims.world_size) == 0:
            return  # rank 0 holds the loss: torchtitan's own answer for "ZBVZeroBubble"
        check(parallel_dims, job_config, color)

    ensure_pp_loss_visible.boost_every_v_schedule = True
    # torchtitan's trainer calls it by the name it imported into torchtitan.train
    train.ensure_pp_loss_visible = ensure_pp_loss_visible


def _peak_flops_without_missing_lspci() -> None:
    import torchtitan.tools.utils as utils

    if getattr(utils.get_peak_flops, "boost_no_missing_lspci", False):
        return
    peak_flops = peak_flops_without_missing_lspci(utils.get_peak_flops, utils)
    peak_flops.boost_no_missing_lspci = True
    # the trainer and the metrics processor call it as utils.get_peak_flops: the module's attribute
    utils.get_peak_flops = peak_flops


def peak_flops_without_missing_lspci(
    lookup: Callable[[str], float], lookup_module: types.ModuleType
) -> Callable[[str], float]:
    """torchtitan's ``lookup`` (``get_peak_flops``, defined in ``lookup_module``), with ``lspci`` run only
    where there is one: elsewhere its probe answers nothing and the lookup reads the device name."""

    def peak_flops(device_name: str) -> float:
        if shutil.which("lspci") is not None:
            return lookup(device_name)
        with _lspci_answers_nothing(lookup_module):
            return lookup(device_name)

    return peak_flops


@contextlib.contextmanager
def _lspci_answers_nothing(module: types.ModuleType) -> Iterator[None]:
    def run(args, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(args, 0, stdout="")

    module.subprocess = types.SimpleNamespace(run=run, PIPE=subprocess.PIPE)
    try:
        yield
    finally:
        module.subprocess = subprocess

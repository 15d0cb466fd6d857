"""Every private torchtitan 0.2.2 name BOOST uses, in one place, with why no public way exists.

Called here (wrappers, so the rest of BOOST names no private attribute):

- ``ConfigManager._maybe_add_custom_config``: the job-config class merged with
  ``job.custom_config_module``'s. The preflight type-checks a TOML against it *before* torchtitan's
  own parse, which would accept a scalar for a section or a string for an int; the public
  ``parse_args`` only returns the parsed instance.
- ``ConfigManager._dict_to_dataclass`` and ``ConfigManager._validate_config``: a TOML with no
  command-line overrides is parsed exactly as ``parse_args`` would (TOML → dataclass, then its
  checks) without building tyro's parser (0.2 s per call, on every rank).
- ``ConfigManager._validate_config``, replaced for every later parse by
  ``validate_offline_assets_quietly``: torchtitan warns that ``model.hf_assets_path`` does not exist
  when it is BOOST's ``""`` (the offline tokenizer, no folder); its other checks stay. No public hook
  runs between the parse and that check.
- ``ParallelDims._global_meshes``: the data-parallel mesh dims at degree 1. ``get_mesh`` refuses a dim
  of size 1, and BOOST shards with FSDP2 over a degree of 1 so that its mixed-precision policy holds
  under TP/PP (``torchtitan_ext.infra.parallelize``); the size-1 dims exist, unflattened from the same
  root as ``tp``, and FSDP2 communicates nothing over a group of one.

- ``torchtitan.experiments.simple_fsdp.simple_fsdp._distribute_dtensor``: a tensor-parallel DTensor
  parameter sharded further over the data-parallel mesh as SimpleFSDP lays it out (the 2-D spec,
  ``_StridedShard`` where both split one dim). torchtitan's public ``data_parallel`` calls it for a
  whole model with one shard dim and one class per module; BOOST wraps per parameter
  (``torchtitan_ext.infra.simple_fsdp``).
- ``torchtitan.components.validate.build_text_validation_dataloader``, the module global through which
  ``Validator.__init__`` builds its loader (it takes neither a loader nor a builder): for the span of
  ``validators_built_with``, BOOST's builder, so the validator reads BOOST's held-out loaders (the
  ``tokens`` dataset, which torchtitan's text builder cannot read, and text restarted at every
  validation) and builds one loader, not torchtitan's as well.
- ``torchtitan.components.metrics._get_metrics_rank``, the module global through which
  ``MetricsProcessor.__init__`` chooses the rank that writes TensorBoard / W&B: for the span of
  ``metrics_logged_on``, BOOST's ``rules.pipeline_loss_rank``. torchtitan's knows one V-shaped schedule, by
  its exact name "ZBVZeroBubble": under DualPipeV, or ZBV spelt in another case (torch reads any), its
  logger sat on a rank whose loss is -1.
- ``torchtitan.distributed.utils.init_fake_mode``, the module global through which ``init_distributed``
  starts a dry run's fake process group, as rank 0 always: for the span of ``fake_process_group_as``, as the
  rank ``DRY_RUN_RANK`` names (``torchtitan_ext.start``), so a dry run can play a pipeline's last stage.

Overridden elsewhere, because the behaviour to change has no public hook (named here so that an
upgrade of torchtitan knows where to look):

- ``CheckpointManager._save_last_step`` and ``CheckpointManager._find_load_step``
  (``torchtitan_ext.guards.checkpoint_manager``): purge stale checkpoints after the last save too, and
  resume only from step folders whose ``.metadata`` is complete.
- ``Trainer.__init__`` builds ``Trainer.checkpointer`` as a plain ``CheckpointManager``: BOOST adopts
  that instance as its subclass (``BoostCheckpointManager.adopt``, a class swap) and sets its
  ``exclude_from_loading`` to skip a data position that cannot be resharded.
- ``Trainer.train_step`` (``torchtitan_ext.train.BoostTrainer._train_step``): torchtitan's step with
  the global valid-token count kept on the device (no host sync but the log step's) and the gradient
  norm taken on local shards.
- ``Trainer.post_dataloading_process`` and ``Validator.post_dataloading_process``
  (``torchtitan_ext.infra.context_parallel.prepare_batch``): the masks of every attention kernel (torchtitan
  builds them for flex and varlen only) and the SDPA mask's rows under context parallelism.
- ``Validator.validate`` (``torchtitan_ext.validator.BoostValidator``): torchtitan's, with the valid tokens
  counted before the context-parallel sharding (torchtitan reports ``cp`` times the loss).
- ``torchtitan.distributed.utils.maybe_enable_amp``, ``torchtitan.tools.utils.get_peak_flops`` and
  ``torchtitan.train.ensure_pp_loss_visible``, the module attributes the trainer calls
  (``torchtitan_ext.start_warnings``): no autocast for a float32 job without FSDP, no ``lspci`` run where
  there is none, and no warning that the loss is not shown under a V-shaped schedule, whose loss rank 0 holds.

Public API used instead of private names: torchtitan's ``register_train_spec`` (called once, by the
entry point) rather than ``_extra_train_specs``; torch's ``create_selective_checkpoint_contexts``
rather than torchtitan's ``_op_sac_save_list``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def merged_job_config_class(argv: list[str], toml_values: dict | None) -> type:
    """torchtitan's ``JobConfig`` merged with the custom config module that ``argv``/the TOML names."""
    from torchtitan.config import ConfigManager

    return ConfigManager()._maybe_add_custom_config(argv, toml_values)


def job_config_from_toml(config_cls: type, toml_values: dict[str, Any], config_file: str):
    """The job a TOML alone describes, parsed and checked as torchtitan's ``parse_args`` would."""
    from torchtitan.config import ConfigManager

    manager = ConfigManager(config_cls)
    job = manager.config = manager._dict_to_dataclass(config_cls, toml_values)
    job.job.config_file = config_file
    manager._validate_config()
    return job


def validate_offline_assets_quietly() -> None:
    """torchtitan's config check from now on, given a folder that exists for ``model.hf_assets_path = ""``
    (BOOST's offline tokenizer, no folder to look for): the rest of its checks run as they were."""
    from torchtitan.config import ConfigManager

    validate = ConfigManager._validate_config
    if getattr(validate, "boost_offline_assets", False):
        return

    def _validate_config(self) -> None:
        model = self.config.model
        offline = model.hf_assets_path == "" and not model.tokenizer_path
        if offline:
            model.hf_assets_path = os.curdir
        try:
            validate(self)
        finally:
            if offline:
                model.hf_assets_path = ""

    _validate_config.boost_offline_assets = True
    ConfigManager._validate_config = _validate_config


def data_parallel_mesh(parallel_dims, names: list[str]):
    """The ``names`` dims (``dp_replicate``, ``fsdp``) of torchtitan's dense mesh, whatever their size."""
    return parallel_dims._global_meshes["dense"][tuple(names)]


@contextmanager
def validators_built_with(build_loader: Callable[..., Any]) -> Iterator[None]:
    """While open, torchtitan's ``Validator`` builds its loader with ``build_loader`` (called with the keywords
    ``job_config``, ``dp_world_size``, ``dp_rank``, ``tokenizer``, ``infinite``, as torchtitan calls its own)."""
    import torchtitan.components.validate as validate

    original = validate.build_text_validation_dataloader
    validate.build_text_validation_dataloader = build_loader
    try:
        yield
    finally:
        validate.build_text_validation_dataloader = original


@contextmanager
def metrics_logged_on(rank: int) -> Iterator[None]:
    """While open, torchtitan's ``MetricsProcessor`` puts its TensorBoard / W&B logger on ``rank`` (unless
    ``metrics.save_for_all_ranks``) instead of where ``_get_metrics_rank`` would."""
    import torchtitan.components.metrics as metrics

    original = metrics._get_metrics_rank
    metrics._get_metrics_rank = lambda parallel_dims, job_config: rank
    try:
        yield
    finally:
        metrics._get_metrics_rank = original


@contextmanager
def fake_process_group_as(rank: int) -> Iterator[None]:
    """While open, torchtitan's dry run (``init_fake_mode``, which ``init_distributed`` calls for
    ``comm.mode = "fake_backend"``) starts its fake process group as ``rank`` of the world instead of 0."""
    import torch.distributed as dist
    import torchtitan.distributed.utils as dist_utils

    original = dist_utils.init_fake_mode

    def init_fake_mode(world_size: int, comm_mode: str = "fake_backend") -> None:
        if comm_mode != "fake_backend" or rank == 0:
            return original(world_size, comm_mode)
        dist.init_process_group("fake", rank=rank, world_size=world_size)

    dist_utils.init_fake_mode = init_fake_mode
    try:
        yield
    finally:
        dist_utils.init_fake_mode = original


def distribute_tensor_parallel_parameter(param, dp_mesh, placements: tuple):
    """A tensor-parallel DTensor parameter sharded further over ``dp_mesh`` (SimpleFSDP's FSDP × TP
    layout: a 2-D DTensor on the data-parallel and tensor-parallel dims, ``_StridedShard`` where both
    split one dim). torchtitan's SimpleFSDP keeps this step in its private ``_distribute_dtensor``,
    which its public ``data_parallel`` calls for every module at once with one shard dim; BOOST picks a
    dim per parameter (``torchtitan_ext.infra.simple_fsdp``)."""
    from torchtitan.experiments.simple_fsdp.simple_fsdp import _distribute_dtensor

    return _distribute_dtensor(param, dp_mesh, placements)

"""``optimizer.name = "LORO"`` and ``lr_scheduler.decay_type = "cosine_restart"`` in torchtitan's trainer, and
torchtitan's Adam(W) stepping on local shards (``torch_private.step_on_local_shards``: the same update without
DTensor's dispatch of it).

torchtitan builds one optimizer per model part (a pipeline stage each) in an ``OptimizersContainer``,
whose ``state_dict`` is torch's ``get_optimizer_state_dict`` of every part, flattened by parameter name:
that is what goes into the DCP checkpoint and what reshards. LORO's container differs in one thing: it
hands each part's optimizer the *model part* (``boost.training.optim.LORO`` finds its factor pairs there) rather
than its parameter list. Everything LORO keeps — each parameter's Adam moments and step count, and the
position in the exact/refresh cycle (``updates``) — is in that state dict. The schedule is torchtitan's
``LRSchedulersContainer`` over ``boost.training.optim.cosine_restart_factor``, loading into pipeline stages whose
optimizers hold different numbers of param groups (``PerPartLRSchedulers``).
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR, LRScheduler
from torchtitan.components.lr_scheduler import LRSchedulersContainer, build_lr_schedulers
from torchtitan.components.optimizer import OptimizersContainer, build_optimizers
from torchtitan.tools.logging import logger

from boost.training.optim import LORO, cosine_restart_factor
from torchtitan_ext.torch_private import step_on_local_shards

LORO_NAME = "LORO"
COSINE_RESTART = "cosine_restart"


class LoroOptimizersContainer(OptimizersContainer):
    """torchtitan's container with one ``LORO`` per model part."""

    def __init__(self, model_parts: list[nn.Module], optimizer_kwargs: dict) -> None:
        self.model_parts = model_parts
        self.optimizers = [LORO(part, **optimizer_kwargs) for part in model_parts]
        all_params = [p for part in model_parts for p in part.parameters() if p.requires_grad]
        self._validate_length(len(model_parts))
        self._post_init(all_params, optimizer_kwargs)


def build_boost_optimizers(
    model_parts, optimizer_config, parallel_dims, ft_manager=None
) -> OptimizersContainer:
    """torchtitan's ``build_optimizers``, each Adam(W) stepping on its parameters' local shards
    (``torch_private.step_on_local_shards``), and LORO when ``optimizer.name = "LORO"``."""
    if optimizer_config.name != LORO_NAME:
        container = build_optimizers(model_parts, optimizer_config, parallel_dims, ft_manager)
        for optimizer in getattr(container, "optimizers", []):
            if isinstance(optimizer, torch.optim.Adam):
                step_on_local_shards(optimizer)
        return container
    kwargs = {
        "lr": optimizer_config.lr,
        "betas": (optimizer_config.beta1, optimizer_config.beta2),
        "eps": optimizer_config.eps,
        "weight_decay": optimizer_config.weight_decay,
        "loro_freq": optimizer_config.loro_freq,
        "refresh_freq": optimizer_config.loro_refresh_freq,
        "lr_scaler": optimizer_config.loro_lr_scaler,
    }
    logger.info(
        f"LORO: exact step every {optimizer_config.loro_freq} steps, Adam moments refreshed every "
        f"{optimizer_config.loro_refresh_freq or 'never'}, lazy learning-rate scaler "
        f"{'rank / dim' if optimizer_config.loro_lr_scaler < 0 else optimizer_config.loro_lr_scaler}"
    )
    return LoroOptimizersContainer(model_parts, kwargs)


class PerPartLRSchedulers(LRSchedulersContainer):
    """torchtitan's container of one ``LambdaLR`` per model part, whose parts' optimizers may hold different
    numbers of param groups: a LORO stage holding only the embedding (interleaved pipeline schedules with
    one layer a stage) has its AdamW group alone, a block's stage a factor group too.

    torchtitan saves the first part's scheduler state and loads it into every part; its per-group lists
    (base and last learning rates) then have another part's length, and ``LambdaLR`` fails to load them.
    Every group of a part runs one schedule from one base learning rate, so those lists hold one value,
    spread here to each part's group count (a list of different values is refused, not guessed)."""

    def __init__(self, schedulers: list[LRScheduler]) -> None:
        self.schedulers = schedulers

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for scheduler in self.schedulers:
            groups = len(scheduler.optimizer.param_groups)
            own = copy.deepcopy(state_dict)
            for key, value in state_dict.items():
                if isinstance(value, list) and len(value) != groups:
                    if len({repr(v) for v in value}) != 1:
                        raise ValueError(
                            f"lr_scheduler.{key} = {value}: one value per param group, which differ, cannot be "
                            f"spread over a model part of {groups} group(s)"
                        )
                    own[key] = value[:1] * groups
            scheduler.load_state_dict(own)


def build_boost_lr_schedulers(optimizers, lr_scheduler_config, training_steps: int) -> LRSchedulersContainer:
    """torchtitan's ``build_lr_schedulers``, and the LORO authors' schedule for ``decay_type = "cosine_restart"``,
    in a container that loads into model parts of any param-group count (``PerPartLRSchedulers``)."""
    if lr_scheduler_config.decay_type != COSINE_RESTART:
        return PerPartLRSchedulers(
            build_lr_schedulers(optimizers, lr_scheduler_config, training_steps).schedulers
        )
    factor = partial(
        cosine_restart_factor,
        total_steps=lr_scheduler_config.total_steps or training_steps,
        warmup_steps=lr_scheduler_config.warmup_steps,
        restart_every=lr_scheduler_config.restart_every,
        restart_warmup_steps=lr_scheduler_config.restart_warmup_steps,
        min_lr_ratio=lr_scheduler_config.min_lr_factor,
        adjust_steps=lr_scheduler_config.restart_adjust_steps,
    )
    return PerPartLRSchedulers([LambdaLR(optimizer, factor) for optimizer in optimizers])

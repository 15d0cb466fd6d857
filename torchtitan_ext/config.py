"""The ``[boost]`` section of a torchtitan TOML (``--job.custom_config_module``), LORO's fields of
``[optimizer]`` and ``[lr_scheduler]``, and the overrides for a linear kind.

torchtitan merges a module's ``JobConfig`` dataclass into its own schema, recursively: a section both
define gets the fields of both, and a field both define takes this module's type and default. So every
field of ``boost.training.options.BoostOptions`` is both a TOML key under ``[boost]`` and a command-line override
``--boost.<field> value``, and ``--training.dataset_seed``, ``--optimizer.loro_freq`` and
``--lr_scheduler.restart_every`` join torchtitan's own sections.
"""

from dataclasses import dataclass, field
from typing import Literal

from boost.training.options import BoostOptions
from boost.training.rules import linear_kind, lowrank_ac_applies

DRY_RUN_COMM_MODE = "fake_backend"
"""The ``comm.mode`` of a dry run (``DRY_RUN=1``): one process playing one rank of ``NGPU`` on torchtitan's
fake process group. torchtitan's other simulated mode, ``local_tensor``, is refused (``job_rules``)."""


@dataclass
class TrainingData:
    dataset_seed: int | None = None
    """Shuffle seed of the ``tokens`` dataset's global order; unset: ``debug.seed``, else 0."""


@dataclass
class LoroOptimizer:
    """``[optimizer]`` fields of ``name = "LORO"`` (``boost.training.optim.LORO``; the authors' ``run_c4.py`` flags
    in brackets). LORO takes ``lr``, ``beta1``, ``beta2``, ``eps`` and ``weight_decay`` from torchtitan's
    fields; the authors' values are 0.9, 0.999, 1e-6 and 0 (their recipes' TOMLs set them)."""

    loro_freq: int = 500
    """An exact (Riemannian) step every this many steps, lazy steps between [--loro_freq]."""

    loro_refresh_freq: int = 500
    """Zero every Adam moment every this many steps, 0 never [--loro_refresh all --loro_refresh_freq]."""

    loro_lr_scaler: float = -1.0
    """The lazy steps' learning-rate factor; -1 means rank / dim [--loro_lr_scaler]."""


@dataclass
class CosineRestartScheduler:
    """``[lr_scheduler]``: ``decay_type = "cosine_restart"`` is the LORO authors' schedule
    (``boost.training.optim.cosine_restart_factor``; their ``run_c4.py --scheduler cosine_restart`` flags in
    brackets). It reads ``warmup_steps``, ``total_steps`` (else ``training.steps``) and ``min_lr_factor``
    [--warmup_steps, --num_training_steps, --min_lr_ratio] and these three; ``decay_ratio`` is not used."""

    decay_type: Literal["linear", "sqrt", "cosine", "cosine_restart"] = "linear"
    """linear | sqrt | cosine: torchtitan's decay after warmup; cosine_restart: the LORO authors' schedule."""

    restart_every: int = 500
    """cosine_restart: the cycle length, a short re-warmup at each cycle's start [--cosine_restart_freq]."""

    restart_warmup_steps: int = 5
    """cosine_restart: the re-warmup's length [--cosine_restart_warmup]."""

    restart_adjust_steps: int = 0
    """cosine_restart: shifts the cycles and the cosine; the authors' recipes use -warmup_steps [--lr_adjust_steps]."""


@dataclass
class JobConfig:
    boost: BoostOptions = field(default_factory=BoostOptions)
    training: TrainingData = field(default_factory=TrainingData)
    optimizer: LoroOptimizer = field(default_factory=LoroOptimizer)
    lr_scheduler: CosineRestartScheduler = field(default_factory=CosineRestartScheduler)


def linear_kind_overrides(linear: str, toml_values: dict) -> list[str]:
    """The command-line overrides that turn a shipped flavor TOML (CoLA, BTP) into one of ``linear``.

    The kind's TP scheme (``boost.training.rules.KINDS``) and "full" AC where "lowrank" no longer applies —
    the lines each TOML's header lists.

    Example::

        >>> linear_kind_overrides("full", tomllib.loads(Path("train_configs/7B.toml").read_text()))
        ['--boost.linear', 'full', '--boost.tp_scheme', 'megatron', '--boost.activation_checkpoint', 'full']
    """
    kind = linear_kind(linear)
    tp = toml_values["parallelism"]["tensor_parallel_degree"]
    overrides = ["--boost.linear", linear]
    if kind.tp_scheme != toml_values["boost"]["tp_scheme"]:
        overrides += ["--boost.tp_scheme", kind.tp_scheme]
    if toml_values["boost"]["activation_checkpoint"] == "lowrank" and not lowrank_ac_applies(
        kind.tp_scheme, tp
    ):
        overrides += ["--boost.activation_checkpoint", "full"]
    return overrides

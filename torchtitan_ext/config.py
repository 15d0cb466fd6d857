"""The ``[boost]`` section of a torchtitan TOML (``--job.custom_config_module``), and the overrides for a linear kind.

torchtitan merges a module's ``JobConfig`` dataclass into its own schema, so every field of
``boost.options.BoostOptions`` is both a TOML key under ``[boost]`` and a command-line override
``--boost.<field> value``. Sections merge field by field (torchtitan's ``ConfigManager._merge_configs``
merges two dataclasses of one name recursively), so ``training.dataset_seed`` joins torchtitan's
``[training]``.
"""

from dataclasses import dataclass, field

from boost.options import BoostOptions
from boost.rules import linear_kind, lowrank_ac_applies


@dataclass
class TrainingData:
    dataset_seed: int | None = None
    """Shuffle seed of the ``tokens`` dataset's global order; unset: ``debug.seed``, else 0."""


@dataclass
class JobConfig:
    boost: BoostOptions = field(default_factory=BoostOptions)
    training: TrainingData = field(default_factory=TrainingData)


def linear_kind_overrides(linear: str, toml_values: dict) -> list[str]:
    """The command-line overrides that turn a shipped flavor TOML (CoLA, BTP) into one of ``linear``.

    The kind's TP scheme (``boost.rules.KINDS``), "full" AC where "lowrank" no longer applies, and no
    pipeline split for a kind that cannot be pipelined — the lines each TOML's header lists.

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
    if toml_values["parallelism"]["pipeline_parallel_degree"] > 1 and not kind.pipelines:
        overrides += ["--parallelism.pipeline_parallel_degree", "1"]
    return overrides

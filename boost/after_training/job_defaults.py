"""torchtitan's defaults for the job-config fields the after-training tools read from a run's TOML.

A run's TOML is read with ``tomllib`` (``boost`` never imports torchtitan), so a field the TOML omits takes the
value torchtitan's ``JobConfig`` would have given the trainer, stated here once:
``tests/unit/test_job_defaults.py`` holds each equal to the ``JobConfig`` the trainer parses (torchtitan's,
merged with ``torchtitan_ext.config``).

Example::

    >>> job_value({"validation": {"enable": True}}, "validation", "seq_len")   # the trainer's RoPE covers it too
    2048
"""

from __future__ import annotations

from typing import Any

JOB_DEFAULTS: dict[tuple[str, str], Any] = {
    ("job", "dump_folder"): "./outputs",
    ("checkpoint", "folder"): "checkpoint",
    ("training", "seq_len"): 2048,
    ("validation", "dataset"): "c4_validation",
    ("validation", "dataset_path"): None,
    ("validation", "seq_len"): 2048,
}


def job_value(config: dict, section: str, field: str) -> Any:
    """``config[section][field]`` as the trainer reads it: the TOML's value, else torchtitan's default."""
    return config.get(section, {}).get(field, JOB_DEFAULTS[(section, field)])

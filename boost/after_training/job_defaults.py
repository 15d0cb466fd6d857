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

import dataclasses
import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from boost.training.data.run_tokenizer import RunError, read_toml, with_overrides
from boost.training.options import BoostOptions

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


def read_run_config(path: str | Path, overrides: Sequence[str] = ()) -> dict:
    """The run's TOML with its command-line ``overrides`` over it, each override checked first: a ``[boost]``
    field must be BOOST's (``BoostOptions``); another section's, where neither the TOML nor ``JOB_DEFAULTS``
    has it but one is that close (a typo: ``--job.dump-foldr``), is refused naming it, rather than read over
    nothing while the tool reads another run's folder. Other fields the tools do not read pass, so that a run
    is read back with the overrides it was started with.

    Example::

        >>> import tempfile
        >>> toml = Path(tempfile.mkdtemp()) / "run.toml"
        >>> _ = toml.write_text('[job]\\ndump_folder = "./outputs/a"\\n')
        >>> read_run_config(toml, ["--job.dump_folder", "./outputs/b", "--training.steps", "20"])["job"]
        {'dump_folder': './outputs/b'}
        >>> read_run_config(toml, ["--job.dump-foldr", "./outputs/b"])
        Traceback (most recent call last):
        ...
        boost.training.data.run_tokenizer.RunError: --job.dump_foldr: ... did you mean --job.dump_folder? ...
    """
    config = read_toml(path)
    for section, fields in with_overrides({}, overrides).items():
        for field in fields:
            _check_override(config, section, field, path)
    return with_overrides(config, overrides)


def _check_override(config: dict, section: str, field: str, path: str | Path) -> None:
    if section == "boost":
        known = [f.name for f in dataclasses.fields(BoostOptions)]
        if field not in known:
            close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
            guess = f"; did you mean --boost.{close[0]}?" if close else ""
            raise RunError(f"--boost.{field}: BOOST has no such option{guess}")
        return
    table = config.get(section, {})
    known = {*(table if isinstance(table, dict) else ()), *(f for s, f in JOB_DEFAULTS if s == section)}
    if field in known:
        return
    close = difflib.get_close_matches(field, sorted(known), n=1, cutoff=0.75)
    if close:
        raise RunError(
            f"--{section}.{field}: {path} has no such field, and --{section}.{close[0]} is read here: did you mean "
            f"--{section}.{close[0]}? (a field no tool reads is passed over; this one is too close to tell)"
        )

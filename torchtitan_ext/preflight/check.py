"""Read a job the way torchtitan does and check it: the TOML file, value types, the rule table, input files.

``check_job(argv, world_size)`` reads the TOML and the command line and checks, in order: the TOML
file itself (exists, UTF-8, TOML syntax), every value's type against the dataclasses
(``torchtitan_ext.preflight.config_types``; the command line's overrides are read against the same
annotations by ``torchtitan_ext.preflight.command_line``), the range and combination rules
(``torchtitan_ext.preflight.job_rules.RULES``, one table) on the values before torchtitan builds its
dataclasses from them, then torchtitan's own parse, and the input files (corpus, tokenizer,
checkpoint). A ``ConfigError`` names the field or file, the value and the fix; ``main`` (the
preflight in ``run_train.sh``) prints it as one line and exits 2. ``torchtitan_ext.train`` runs
``check_config`` again on every rank, before any process group exists. docs/config_errors.md lists
the rules; tests/unit/test_preflight.py and tests/unit/test_config_fuzz.py hold them to it."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
import warnings
from dataclasses import is_dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from boost.config_error import ConfigError, refuse
from boost.rules import SHARD_LOCAL_NORM_WARNING, norm_is_shard_local
from torchtitan_ext.guards.checkpoint_guard import check_resume
from torchtitan_ext.preflight.command_line import HELP_FLAGS, parse_overrides
from torchtitan_ext.preflight.config_types import check_instance, check_table, field_types
from torchtitan_ext.preflight.job_rules import JobContext, broken_rule
from torchtitan_ext.torchtitan_private import job_config_from_toml, merged_job_config_class

CONFIG_FILE_FLAGS = ("--job.config_file", "--job.config-file")
BOOST_CONFIG_MODULE = "torchtitan_ext.config"

__all__ = ["ConfigError", "check_config", "check_job", "load_toml", "main"]


def load_toml(path: str) -> dict[str, Any]:
    """The parsed TOML at ``path``; a missing, unreadable, non-UTF-8 or malformed file is refused with the place."""
    file = Path(path)
    if not file.is_file():
        refuse("job.config_file", path, "no such file; pass an existing TOML (see train_configs/)")
    try:
        raw = file.read_bytes()
    except OSError as e:
        refuse("job.config_file", path, f"cannot be read ({e.strerror}); check its permissions")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {e.start}, line {line}); a TOML file is UTF-8 text: "
            "re-save it as UTF-8, or pass the right file"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: TOML syntax error: {e} — fix the file at that line") from None


def _config_file_argument(argv: list[str]) -> str | None:
    """The config file named in ``argv``, as torchtitan's ``ConfigManager._maybe_load_toml`` finds it (the first
    one); a second, different one is refused, since torchtitan would silently train the first."""
    found = []
    for i, arg in enumerate(argv):
        key, _, value = arg.partition("=")
        if key in CONFIG_FILE_FLAGS:
            if not value and i + 1 >= len(argv):
                refuse(
                    "job.config_file",
                    None,
                    "the flag needs a path: --job.config_file train_configs/debug.toml",
                )
            found.append(value or argv[i + 1])
    for other in found[1:]:
        if os.path.realpath(other) != os.path.realpath(found[0]):
            refuse(
                "job.config_file",
                other,
                f"a second config file, after {found[0]!r} (CONFIG_FILE, or an earlier --job.config_file); "
                f"torchtitan reads the first alone: name one, as CONFIG_FILE={other} or --job.config_file {other}",
            )
    return found[0] if found else None


def _job_config_class(argv: list[str], toml_values: dict, config_file: str | None) -> type:
    """torchtitan's JobConfig merged with ``job.custom_config_module``'s, as the trainer will build it."""
    try:
        return merged_job_config_class(argv, toml_values)
    except (
        ImportError,
        AttributeError,
        TypeError,
        ValueError,
    ) as e:  # not a module name, or no JobConfig in it
        module = next(
            (
                a.partition("=")[2] or argv[i + 1]
                for i, a in enumerate(argv)
                if a.partition("=")[0] in ("--job.custom_config_module", "--job.custom-config-module")
                and (("=" in a) or i + 1 < len(argv))
            ),
            None,
        )
        if module is None and isinstance(toml_values.get("job"), dict):
            module = toml_values["job"].get("custom_config_module")
        where = f" (in {config_file})" if config_file else ""
        refuse(
            "job.custom_config_module",
            module,
            f'cannot be imported as a JobConfig module ({e}); set it to "{BOOST_CONFIG_MODULE}"{where}',
        )


# torchtitan's dry-run modes: one process, rank 0 of NGPU on a fake process group (init_distributed).
FAKE_COMM_MODES = ("fake_backend", "local_tensor")


def world_size_from_env(job=None) -> int:
    """``WORLD_SIZE`` (run_train.sh sets it from ``NGPU``), or ``NGPU`` itself where ``job`` is a dry run
    (``--comm.mode fake_backend``: torchtitan's world size then, with no torchrun to set ``WORLD_SIZE``);
    refused unless it is a whole number."""
    dry = job is not None and getattr(getattr(job, "comm", None), "mode", None) in FAKE_COMM_MODES
    raw = os.environ.get("NGPU", "1") if dry else os.environ.get("WORLD_SIZE", "1")
    try:
        return int(raw)
    except ValueError:
        refuse("NGPU", raw, "must be a whole number of processes, at least 1")


def check_job(argv: list[str], world_size: int | None = None):
    """Read ``argv`` (and the TOML it names) as torchtitan would, check it, and return torchtitan's
    ``JobConfig``."""
    from torchtitan.config import ConfigManager

    config_file = _config_file_argument(argv)
    toml_values = load_toml(config_file) if config_file else {}
    config_cls = _job_config_class(argv, toml_values, config_file)
    if config_file:
        # Before torchtitan's own parse, which would take a scalar for a section or a string for an int.
        known = field_types(config_cls)
        # Known sections first: a misspelt job.custom_config_module is named before the [boost] it unlocks.
        check_table({k: v for k, v in toml_values.items() if k in known}, config_cls, source=config_file)
        if "boost" in toml_values and "boost" not in known:
            job_table = toml_values.get("job") if isinstance(toml_values.get("job"), dict) else {}
            refuse(
                "job.custom_config_module",
                job_table.get("custom_config_module", ""),
                f'the [boost] section needs it: set it to "{BOOST_CONFIG_MODULE}" (in {config_file})',
            )
        check_table(toml_values, config_cls, source=config_file)
    if any(arg in HELP_FLAGS for arg in argv):
        return ConfigManager().parse_args(argv)  # tyro prints the help and exits
    overrides = parse_overrides(argv, config_cls)
    # BOOST's rules read the values before torchtitan's dataclasses exist: their __post_init__ checks
    # would refuse some values without naming the field, and the rule table names it with the fix.
    values = job_values(config_cls, _merged(toml_values, overrides))
    world_size = world_size if world_size is not None else world_size_from_env(values)
    _check_boost_section(values)
    check_rules(values, world_size)
    job = _torchtitan_job(argv, config_cls, toml_values, config_file, overrides)
    check_instance(job)  # what torchtitan built, typed as its annotations say; the rules ran on its values
    _check_built_job(job, world_size)
    return job


def _merged(toml_values: dict, overrides: dict) -> dict:
    """The TOML's values with the command line's over them, section by section."""
    merged = dict(toml_values)
    for name, value in overrides.items():
        merged[name] = _merged(merged.get(name, {}), value) if isinstance(value, dict) else value
    return merged


def job_values(config_cls: type, values: dict) -> SimpleNamespace:
    """``values`` over ``config_cls``'s defaults, read as the ``JobConfig`` built from them will be
    (``job.training.steps``), without building it."""

    def section(cls: type, default, table: dict) -> SimpleNamespace:
        return SimpleNamespace(
            **{
                name: section(hint, getattr(default, name), table.get(name, {}))
                if is_dataclass(hint)
                else table.get(name, getattr(default, name))
                for name, hint in field_types(cls).items()
            }
        )

    return section(config_cls, config_cls(), values)


def _torchtitan_job(
    argv: list[str], config_cls: type, toml_values: dict, config_file: str | None, overrides: dict
):
    """The ``JobConfig`` torchtitan builds from values the preflight has read and checked."""
    from torchtitan.config import ConfigManager

    captured = io.StringIO()
    try:
        if config_file and set(overrides) <= {"job"} and set(overrides.get("job", {})) <= {"config_file"}:
            # Only the TOML: torchtitan's TOML-to-dataclass step is then the whole parse (tyro would
            # return its defaults unchanged, after 0.2 s of building a parser).
            return job_config_from_toml(config_cls, toml_values, config_file)
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return ConfigManager().parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        # The preflight's reading of the command line accepted what tyro refuses: tyro's own words, then ours.
        sys.stderr.write(captured.getvalue())
        raise ConfigError(
            "command line: torchtitan's parser (tyro) refused it (above), though the preflight "
            "read it: a gap in torchtitan_ext.preflight.command_line"
        ) from None
    except (AssertionError, ValueError) as e:  # a __post_init__ check the rule table does not state
        raise ConfigError(f"torchtitan refused the configuration: {e or type(e).__name__}") from None


def check_rules(job, world_size: int) -> None:
    """Refuse ``job`` (a ``JobConfig``, or its values) for the first rule of the table it breaks; the
    values are well typed (``config_types``), and [boost] is there."""
    found = broken_rule(job, world_size)
    if found is not None:
        rule, value, message = found
        refuse(rule.field, value, message)


def _check_boost_section(job) -> None:
    if not hasattr(job, "boost"):
        refuse("job.custom_config_module", job.job.custom_config_module, f'set it to "{BOOST_CONFIG_MODULE}"')


def check_config(job, world_size: int) -> None:
    """Raise ``ConfigError`` for the first thing that cannot work; warn for what works but misleads."""
    _check_boost_section(job)
    check_instance(job)
    check_rules(job, world_size)
    _check_built_job(job, world_size)


def _check_built_job(job, world_size: int) -> None:
    """What a job whose values passed the rules still needs: its input files, and the warnings."""
    check_input_files(job, world_size)
    if norm_is_shard_local(job.boost.norm, job.boost.tp_scheme, job.parallelism.tensor_parallel_degree):
        warnings.warn(SHARD_LOCAL_NORM_WARNING, stacklevel=3)


def check_input_files(job, world_size: int) -> None:
    """The files a run reads at start: corpus, tokenizer, initial checkpoint, custom import."""
    from torchtitan_ext.data.text_datasets import check_dataset
    from torchtitan_ext.data.token_checks import check_token_data
    from torchtitan_ext.data.token_sources import is_tokens
    from torchtitan_ext.data.tokenizer import check_tokenizer_assets

    dp = JobContext(job, world_size).dp
    # the tokenizer first: the tokens checks compare prepared folders with it
    check_tokenizer_assets(job.model.hf_assets_path, job.parallelism.tensor_parallel_degree)
    if is_tokens(job.training.dataset):
        check_token_data(job, "training", dp)
    else:
        check_dataset(job.training.dataset, job.training.dataset_path, "training", dp)
    if job.validation.enable and is_tokens(job.validation.dataset):
        check_token_data(job, "validation", dp)
    elif job.validation.enable:
        check_dataset(
            job.validation.dataset,
            job.validation.dataset_path,
            "validation",
            dp,
            batch_tokens=job.validation.local_batch_size * (job.validation.seq_len + 1),
        )
    if job.checkpoint.initial_load_path and not Path(job.checkpoint.initial_load_path).exists():
        refuse("checkpoint.initial_load_path", job.checkpoint.initial_load_path, "does not exist")
    module = job.experimental.custom_import
    if module:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            refuse(
                "experimental.custom_import",
                module,
                "no such module; BOOST's trainer needs none (it registers its model itself): leave it unset",
            )


def main(argv: list[str] | None = None) -> None:
    try:
        job = check_job(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"BOOST config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    check_resume(job)  # the run folder and the checkpoint it would resume from; refuses with SystemExit

"""Read a job as torchtitan will, before torch or torchtitan is imported: the TOML, its types, the overrides.

``read_job(argv)`` finds the config file as torchtitan does, reads it (exists, UTF-8, TOML syntax),
type-checks every value against the job's dataclasses (``config_types``; torchtitan's schema rebuilt by
``schema`` from its snapshot, merged with ``job.custom_config_module``'s), reads the command line's
overrides as torchtitan's parser would (``command_line``), and returns the values the ``JobConfig``
will hold, read as one (``job.training.steps``), without building it. A ``ConfigError`` names the
field or file, the value and the fix.

This module and everything it imports load neither torch nor torchtitan: ``run_train.sh``'s launcher
(``torchtitan_ext.start``) refuses a value that does not parse in a fraction of a second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from boost.training.config_error import ConfigError, refuse
from torchtitan_ext.preflight.command_line import HELP_FLAGS, parse_overrides
from torchtitan_ext.preflight.config_types import check_table, field_types
from torchtitan_ext.preflight.schema import job_config_class

CONFIG_FILE_FLAGS = ("--job.config_file", "--job.config-file")
CUSTOM_CONFIG_FLAGS = ("--job.custom_config_module", "--job.custom-config-module")
BOOST_CONFIG_MODULE = "torchtitan_ext.config"


def load_toml(path: str) -> dict[str, Any]:
    """The parsed TOML at ``path``; a missing, unreadable, non-UTF-8 or malformed file is refused with the place."""
    file = Path(path)
    if not file.is_file():
        # named in full: run_train.sh runs from the repository's root, which a relative path is read from
        where = f" ({file.resolve()})" if not file.is_absolute() else ""
        refuse("job.config_file", path, f"no such file{where}; pass an existing TOML (see train_configs/)")
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


def config_file_argument(argv: list[str]) -> str | None:
    """The config file named in ``argv``, as torchtitan's ``ConfigManager._maybe_load_toml`` finds it (the first
    one); a second, different one is refused, since torchtitan would silently train the first."""
    found = []
    for i, arg in enumerate(argv):
        key, attached, value = arg.partition("=")
        if key in CONFIG_FILE_FLAGS:
            # "--job.config_file=" is an empty path (torchtitan opens ""), not the next argument's
            path = value if attached else argv[i + 1] if i + 1 < len(argv) else None
            if not path:
                refuse(
                    "job.config_file",
                    path,
                    "the flag needs a path: --job.config_file train_configs/debug.toml",
                )
            found.append(path)
    for other in found[1:]:
        if os.path.realpath(other) != os.path.realpath(found[0]):
            refuse(
                "job.config_file",
                other,
                f"a second config file, after {found[0]!r} (CONFIG_FILE, or an earlier --job.config_file); "
                f"torchtitan reads the first alone: name one, as CONFIG_FILE={other} or --job.config_file {other}",
            )
    return found[0] if found else None


def custom_config_module(argv: list[str], toml_values: dict) -> str | None:
    """The custom config module torchtitan's ``ConfigManager._maybe_add_custom_config`` merges: the first
    on the command line, else the TOML's ``job.custom_config_module``."""
    for i, arg in enumerate(argv):
        key, has_value, value = arg.partition("=")
        if key in CUSTOM_CONFIG_FLAGS and (has_value or i + 1 < len(argv)):
            return value if has_value else argv[i + 1]
    job = toml_values.get("job")
    return job.get("custom_config_module") if isinstance(job, dict) else None


def read_config_class(argv: list[str], toml_values: dict, config_file: str | None) -> type:
    """The job's dataclass (torchtitan's ``JobConfig`` merged with ``job.custom_config_module``'s)."""
    module = custom_config_module(argv, toml_values)
    try:
        return job_config_class(module or None)
    except (
        ImportError,
        AttributeError,
        TypeError,
        ValueError,
    ) as e:  # not a module name, or no JobConfig in it
        where = f" (in {config_file})" if config_file else ""
        refuse(
            "job.custom_config_module",
            module,
            f'cannot be imported as a JobConfig module ({e}); set it to "{BOOST_CONFIG_MODULE}"{where}',
        )


@dataclass(frozen=True)
class ReadJob:
    """A job as read from its command line and TOML, every value type-checked."""

    config_file: str | None
    toml_values: dict
    """The TOML as parsed."""
    overrides: dict
    """The command line's values, as nested sections (``{"training": {"steps": 3}}``)."""
    values: SimpleNamespace
    """What the ``JobConfig`` built from them will hold, read the same way (``values.training.steps``)."""
    help_asked: bool = False
    """``-h``/``--help`` is on the command line: torchtitan's parser prints the help (the overrides are not read)."""


def read_job(argv: list[str]) -> ReadJob:
    """Read ``argv`` and the TOML it names; ``ConfigError`` for anything that does not parse or type-check."""
    config_file = config_file_argument(argv)
    toml_values = load_toml(config_file) if config_file else {}
    config_cls = read_config_class(argv, toml_values, config_file)
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
    help_asked = any(arg in HELP_FLAGS for arg in argv)
    overrides = {} if help_asked else parse_overrides(argv, config_cls)
    values = with_torchtitan_aliases(job_values(config_cls, merged(toml_values, overrides)))
    return ReadJob(config_file, toml_values, overrides, values, help_asked)


def merged(toml_values: dict, overrides: dict) -> dict:
    """The TOML's values with the command line's over them, section by section."""
    result = dict(toml_values)
    for name, value in overrides.items():
        result[name] = merged(result.get(name, {}), value) if isinstance(value, dict) else value
    return result


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


def with_torchtitan_aliases(values: SimpleNamespace) -> SimpleNamespace:
    """``values`` with the deprecated fields torchtitan's ``ConfigManager._validate_config`` copies over their
    successors once it has parsed: ``experimental.custom_args_module`` over ``job.custom_config_module``,
    ``model.tokenizer_path`` over ``model.hf_assets_path``. The rules and the input checks then read what the
    trainer will use."""
    if values.experimental.custom_args_module:
        values.job.custom_config_module = values.experimental.custom_args_module
    if values.model.tokenizer_path:
        values.model.hf_assets_path = values.model.tokenizer_path
    return values


def as_dict(values: SimpleNamespace) -> dict:
    """The nested values as plain dicts (what ``dataclasses.asdict`` gives for the built ``JobConfig``)."""
    return {k: as_dict(v) if isinstance(v, SimpleNamespace) else v for k, v in vars(values).items()}

"""Read a job the way torchtitan does and check it: the TOML file, value types, the rule table, input files.

``check_job(argv, world_size)`` reads the command line and TOML the way torchtitan does and checks,
in order: the TOML file itself (exists, UTF-8, TOML syntax), every value's type against the
dataclasses (``torchtitan_ext.preflight.config_types``), the range and combination rules
(``torchtitan_ext.preflight.job_rules.RULES``, one table), then the input files (corpus, tokenizer,
checkpoint). A ``ConfigError`` names the field or file, the value and the fix; ``main`` (the
preflight in ``run_train.sh``) prints it as one line and exits 2. ``torchtitan_ext.train`` runs
``check_config`` again on every rank, before any process group exists. docs/config_errors.md lists
the rules; tests/unit/test_preflight.py and tests/unit/test_config_fuzz.py hold them to it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from boost.config_error import ConfigError, refuse
from boost.rules import norm_is_shard_local
from torchtitan_ext.guards.checkpoint_guard import check_resume
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
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}, line {line}); a TOML file is UTF-8 text: "
                          "re-save it as UTF-8, or pass the right file") from None
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
                refuse("job.config_file", None, "the flag needs a path: --job.config_file train_configs/debug.toml")
            found.append(value or argv[i + 1])
    for other in found[1:]:
        if os.path.realpath(other) != os.path.realpath(found[0]):
            refuse("job.config_file", other,
                   f"a second config file, after {found[0]!r} (CONFIG_FILE, or an earlier --job.config_file); "
                   f"torchtitan reads the first alone: name one, as CONFIG_FILE={other} or --job.config_file {other}")
    return found[0] if found else None


def _job_config_class(argv: list[str], toml_values: dict | None, config_file: str) -> type:
    """torchtitan's JobConfig merged with ``job.custom_config_module``'s, as the trainer will build it."""
    try:
        return merged_job_config_class(argv, toml_values)
    except (ImportError, AttributeError, TypeError, ValueError) as e:  # not a module name, or no JobConfig in it
        module = next((a.partition("=")[2] or argv[i + 1] for i, a in enumerate(argv)
                       if a.partition("=")[0] in ("--job.custom_config_module", "--job.custom-config-module")
                       and (("=" in a) or i + 1 < len(argv))), None)
        if module is None and isinstance((toml_values or {}).get("job"), dict):
            module = toml_values["job"].get("custom_config_module")
        refuse("job.custom_config_module", module, f"cannot be imported as a JobConfig module ({e}); "
                                                   f'set it to "{BOOST_CONFIG_MODULE}" (in {config_file})')


def _one_line(tyro_message: str, argv: list[str]) -> str:
    """tyro's boxed error, as one line: the body of its first section, and its first suggestion."""
    sections, current = [], []
    for line in tyro_message.splitlines():
        text = line.strip().strip("│╭╮╰╯").strip()
        if re.fullmatch(r"[-─╭╮╰╯ ]*", text):
            if current:
                sections.append(current)
            current = []
        elif text:
            current.append(text)
    sections.append(current)
    body = next((s for s in sections[1:] if s and not s[0].startswith(("For full helptext", "Argument helptext"))),
                sections[0])
    message = " ".join(body)
    suggestion = next((s[1].split()[0] for s in sections if len(s) > 1 and s[0] == "Perhaps you meant:"), None)
    if suggestion:
        message += f"; did you mean {suggestion}?"
    # tyro spells fields with dashes (--optimizer.weight-decay); the TOML and BOOST's messages use the field name.
    message = re.sub(r"--[\w.-]+", lambda m: "--" + m.group(0)[2:].replace("-", "_"), message)
    unrecognized = re.match(r"Unrecognized options:\s*(.*)", message)
    for value in (unrecognized.group(1).split(", ") if unrecognized else []):
        # A value after a bool field: tyro's bools are flags (--x.y / --x.no-y) and take none.
        flag = next((argv[i - 1] for i, a in enumerate(argv) if a == value and i and argv[i - 1].startswith("--")), None)
        if flag and not value.startswith("--"):
            section, _, name = flag.partition("=")[0][2:].rpartition(".")
            message += (f"; {value!r} follows {flag}, a flag that takes no value: write --{section}.{name} "
                        f"or --{section}.no-{name.replace('_', '-')}")
            break
    return f"command line: {message} (run with --help for every field)"


def _parse_command_line(manager, argv: list[str]):
    """torchtitan's parse (tyro) with its boxed usage errors turned into one ``ConfigError`` line."""
    if "--help" in argv or "-h" in argv:
        return manager.parse_args(argv)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return manager.parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        raise ConfigError(_one_line(captured.getvalue(), argv)) from None
    except (AssertionError, ValueError) as e:  # a torchtitan __post_init__ check on an overridden value
        raise ConfigError(f"command line: torchtitan refused the configuration: {e or type(e).__name__}") from None


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
    """Parse ``argv`` as torchtitan would and validate it; return the ``JobConfig``."""
    from torchtitan.config import ConfigManager

    manager = ConfigManager()
    config_file = _config_file_argument(argv)
    toml_values = load_toml(config_file) if config_file else None
    if toml_values is None:
        job = _parse_command_line(manager, argv)
    else:
        # Before torchtitan's own parse, which would take a scalar for a section or a string for an int.
        config_cls = _job_config_class(argv, toml_values, config_file)
        known = field_types(config_cls)
        # Known sections first: a misspelt job.custom_config_module is named before the [boost] it unlocks.
        check_table({k: v for k, v in toml_values.items() if k in known}, config_cls, source=config_file)
        if "boost" in toml_values and "boost" not in known:
            job_table = toml_values.get("job") if isinstance(toml_values.get("job"), dict) else {}
            refuse("job.custom_config_module", job_table.get("custom_config_module", ""),
                   f'the [boost] section needs it: set it to "{BOOST_CONFIG_MODULE}" (in {config_file})')
        check_table(toml_values, config_cls, source=config_file)
        if len(argv) == 2:
            # Only the TOML: torchtitan's TOML-to-dataclass step is then the whole parse (tyro would
            # return its defaults unchanged, after 0.2 s of building a parser).
            try:
                job = job_config_from_toml(config_cls, toml_values, config_file)
            except (AssertionError, ValueError) as e:  # a torchtitan __post_init__ check
                raise _refusal_of_post_init(config_cls, toml_values, world_size, e) from None
        else:
            job = _parse_command_line(manager, argv)
    check_config(job, world_size if world_size is not None else world_size_from_env(job))
    return job


def _assign(target, values: dict) -> None:
    for name, value in values.items():
        if isinstance(value, dict):
            _assign(getattr(target, name), value)
        else:
            setattr(target, name, value)


def _refusal_of_post_init(config_cls: type, toml_values: dict, world_size: int | None, error: Exception) -> ConfigError:
    """The ``ConfigError`` for a TOML that one of torchtitan's ``__post_init__`` checks refused.

    Their messages name no field ("validation steps must be positive or -1"); the same values set
    onto a default config, past those checks, meet BOOST's rule table, which names field and fix.
    """
    job = config_cls()
    _assign(job, toml_values)
    try:
        check_config(job, world_size if world_size is not None else world_size_from_env(job))
    except ConfigError as refusal:
        return refusal
    return ConfigError(f"torchtitan refused the configuration: {error or type(error).__name__}")


def check_config(job, world_size: int) -> None:
    """Raise ``ConfigError`` for the first thing that cannot work; warn for what works but misleads."""
    if not hasattr(job, "boost"):
        refuse("job.custom_config_module", job.job.custom_config_module, f'set it to "{BOOST_CONFIG_MODULE}"')
    check_instance(job)
    found = broken_rule(job, world_size)
    if found is not None:
        rule, value, message = found
        refuse(rule.field, value, message)
    check_input_files(job, world_size)
    if norm_is_shard_local(job.boost.norm, job.boost.tp_scheme, job.parallelism.tensor_parallel_degree):
        warnings.warn('boost.norm = "local": each rank normalises its shard alone; the model is NOT the dense '
                      "model and changes with the TP degree", stacklevel=2)


def check_input_files(job, world_size: int) -> None:
    """The files a run reads at start: corpus, tokenizer, initial checkpoint, custom import."""
    from torchtitan_ext.data.text_datasets import check_dataset
    from torchtitan_ext.data.tokenizer import check_tokenizer_assets

    dp = JobContext(job, world_size).dp
    check_dataset(job.training.dataset, job.training.dataset_path, "training", dp)
    if job.validation.enable:
        check_dataset(job.validation.dataset, job.validation.dataset_path, "validation", dp,
                      batch_tokens=job.validation.local_batch_size * (job.validation.seq_len + 1))
    check_tokenizer_assets(job.model.hf_assets_path, job.parallelism.tensor_parallel_degree)
    if job.checkpoint.initial_load_path and not Path(job.checkpoint.initial_load_path).exists():
        refuse("checkpoint.initial_load_path", job.checkpoint.initial_load_path, "does not exist")
    module = job.experimental.custom_import
    if module:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            refuse("experimental.custom_import", module, 'no such module; BOOST\'s is "torchtitan_ext.train_spec"')


def main(argv: list[str] | None = None) -> None:
    try:
        job = check_job(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"BOOST config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    check_resume(job)  # the run folder and the checkpoint it would resume from; refuses with SystemExit

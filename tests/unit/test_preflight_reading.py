"""The preflight reads a job as torchtitan will: the TOML alone, and every command-line form tyro takes, give
torchtitan's own values; every annotation of the merged JobConfig is understood by the type check."""

from __future__ import annotations

from pathlib import Path

from torchtitan_ext.preflight import check_job, load_toml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "train_configs" / "debug.toml")


def test_type_matching_follows_the_annotation():
    from typing import Literal

    from torchtitan_ext.preflight.config_types import matches

    assert matches(1, float) and not matches(True, int) and not matches(True, float) and not matches(1.0, int)
    assert matches("a", Literal["a", "b"]) and not matches(1, Literal["1"]) and not matches(True, Literal[1])
    assert matches(None, int | None) and matches(3, int | None) and not matches("3", int | None)
    assert (
        matches([["a"]], list[list[str]] | None) and not matches([[1]], list[list[str]]) and matches([], list)
    )
    assert matches({"a": 1}, dict[str, int]) and not matches({"a": "1"}, dict[str, int])


def test_every_field_annotation_is_understood():
    from dataclasses import is_dataclass

    from torchtitan_ext.preflight.config_types import describe, field_types
    from torchtitan_ext.torchtitan_private import merged_job_config_class

    def walk(cls):
        for hint in field_types(cls).values():
            walk(hint) if is_dataclass(hint) else describe(hint)  # raises TypeError for an unknown kind

    walk(merged_job_config_class(["--job.custom_config_module", "torchtitan_ext.config"], None))


def test_toml_only_parse_equals_torchtitans():
    from dataclasses import asdict

    from torchtitan.config import ConfigManager

    argv = ["--job.config_file", CONFIG]
    assert asdict(check_job(argv, 1)) == asdict(ConfigManager().parse_args(argv))


def _override_for(option) -> list[str]:
    """A command-line override of ``option``'s field in the form its annotation takes."""
    import typing

    hint, origin = option.hint, typing.get_origin(option.hint)
    if option.flag is not None:
        return [option.name if option.flag else option.name.rsplit(".", 1)[0] + ".no-" + option.path[-1]]
    if origin is typing.Literal:
        return [option.name, str(typing.get_args(hint)[-1])]
    if hint in (int, float) or hint == float | int:
        return [option.name, "7"]
    if str(hint) == "list[list[str]] | None":
        return [option.name, "a,b", "c"]
    if str(hint) == "list[str]":
        return [f"{option.name}=a,b"]
    if type(None) in typing.get_args(hint):
        return [option.name, "None"]
    return [f"{option.name}=v"]


def _as_dict(values) -> dict:
    from types import SimpleNamespace

    return {k: _as_dict(v) if isinstance(v, SimpleNamespace) else v for k, v in vars(values).items()}


def test_command_line_reading_equals_torchtitans():
    """command_line.parse_overrides against tyro (torchtitan's parse_args): every field of the merged
    JobConfig overridden at once, then tyro's other forms (dashes, "=", no- flags, negative numbers,
    repeats, lists)."""
    from dataclasses import asdict

    from torchtitan.config import ConfigManager

    from torchtitan_ext.preflight.command_line import options
    from torchtitan_ext.preflight.read import read_job
    from torchtitan_ext.torchtitan_private import merged_job_config_class

    base = ["--job.config_file", CONFIG]
    config_cls = merged_job_config_class(base, load_toml(CONFIG))
    # the base's TOML and module stand: a second config file is refused, and the module must import
    kept = {"--job.config_file", "--job.custom_config_module"}
    fields = {o.path: o for o in options(config_cls).values() if o.flag is not False}.values()
    every = [arg for option in fields if option.name not in kept for arg in _override_for(option)]
    forms = [
        "--training.local-batch-size",
        "4",
        "--optimizer.lr=-1e-3",
        "--boost.no_group_linears",
        "--boost.rank",
        "-5",
        "--training.steps",
        "3",
        "--training.steps=1_000",
        "--model.converters=",
        "--debug.seed=None",
        "--training.dataset_path=--x",
        "--training.dataloader.num-workers=2",
        "--training.max_norm",
        "-inf",
        "--parallelism.module_fqns_per_model_part",
        "--lr-scheduler.total-steps",
        "None",
        "--",
    ]
    # torchtitan's _validate_config copies these deprecated aliases over their successors after its parse
    aliases = ["--model.tokenizer_path", "/nonexistent", "--experimental.custom_args_module=some.module"]
    # a list of lists reads on after a value attached with "=" (a later repeat would hide it in `forms`)
    attached = ["--parallelism.module_fqns_per_model_part=a,b", "c", "d,e", "--training.steps", "3"]
    for overrides in (every, forms, attached, aliases):
        argv = [*base, *overrides]
        ours = _as_dict(read_job(argv).values)
        theirs = asdict(ConfigManager().parse_args(argv))
        assert ours == theirs, [k for k in theirs if ours[k] != theirs[k]]

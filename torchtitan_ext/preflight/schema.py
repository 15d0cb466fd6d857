"""torchtitan's job schema without importing torchtitan: its ``JobConfig`` dataclasses rebuilt from a snapshot.

The preflight reads a job against the annotations and defaults of torchtitan's ``JobConfig`` merged
with the custom config module's (BOOST's ``[boost]``). torchtitan's ``job_config.py`` cannot be
imported without torch and the whole of torchtitan (seconds), and the launcher refuses a value that
does not parse before either loads. So the schema of the installed torchtitan is a snapshot,
``torchtitan_schema.py`` (sections, fields, annotations as text, defaults; and the names in its
dataset registry), which :func:`job_config_class` rebuilds into dataclasses and merges with the
custom module's ``JobConfig`` by torchtitan's own rule (``ConfigManager._merge_configs``).

``python -m torchtitan_ext.preflight.schema`` writes the snapshot from the installed torchtitan;
tests/unit/test_start_up.py holds it equal to torchtitan's dataclasses, and the merged class equal to
torchtitan's merged class, so neither can drift (a torchtitan upgrade fails that test until the
snapshot is written again).
"""

from __future__ import annotations

import functools
import importlib
import pprint
import types
import typing
from dataclasses import MISSING, Field, field, fields, is_dataclass, make_dataclass
from pathlib import Path
from typing import Any, Literal, Union

SNAPSHOT_FILE = Path(__file__).with_name("torchtitan_schema.py")
# Every name an annotation in the snapshot may use; read back with nothing else in scope.
_TYPE_NAMES = {
    "Any": Any,
    "Literal": Literal,
    "bool": bool,
    "int": int,
    "float": float,
    "str": str,
    "list": list,
    "dict": dict,
}


def type_text(hint: Any) -> str:
    """An annotation as the text the snapshot holds (``"str | None"``, ``"Literal['a', 'b']"``).

    Example::

        >>> type_text(list[str] | None)
        'list[str] | None'
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None):
        return "None"
    if hint is Any:
        return "Any"
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_text(a) for a in args)}]"
    if hint in _TYPE_NAMES.values() and isinstance(hint, type):
        return hint.__name__
    raise TypeError(f"the schema snapshot cannot hold the annotation {hint!r}; teach type_text about it")


def _type_from_text(text: str) -> Any:
    return eval(text, {"__builtins__": {}}, _TYPE_NAMES)  # noqa: S307 - the snapshot's own annotation text


def _default(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default


def describe_class(cls: type) -> dict:
    """A dataclass as the snapshot holds it: its name and fields, a section nested as its own class."""
    hints = typing.get_type_hints(cls)
    described = []
    for f in fields(cls):
        hint = hints[f.name]
        if is_dataclass(hint):
            described.append({"name": f.name, "section": describe_class(hint)})
        else:
            described.append({"name": f.name, "type": type_text(hint), "default": _default(f)})
    return {"class": cls.__name__, "fields": described}


def _rebuild(spec: dict) -> type:
    members = []
    for item in spec["fields"]:
        if "section" in item:
            section = _rebuild(item["section"])
            members.append((item["name"], section, field(default_factory=section)))
        else:
            default = item["default"]
            # a list default is copied per instance, as a dataclass default_factory gives it
            made = (
                field(default_factory=functools.partial(list, default))
                if isinstance(default, list)
                else field(default=default)
            )
            members.append((item["name"], _type_from_text(item["type"]), made))
    return make_dataclass(spec["class"], members)


def merge(base: type, custom: type) -> type:
    """``base`` extended by ``custom``, as torchtitan's ``ConfigManager._merge_configs`` merges them:
    a section in both is merged recursively, any other field of ``custom`` replaces ``base``'s, and
    ``custom``'s new fields follow."""
    custom_fields = {f.name: f for f in fields(custom)}
    base_names = {f.name for f in fields(base)}
    merged: list[tuple[str, Any, Field]] = []
    for f in fields(base):
        other = custom_fields.get(f.name)
        if other is not None and is_dataclass(f.type) and is_dataclass(other.type):
            section = merge(f.type, other.type)
            merged.append((f.name, section, field(default_factory=section)))
        elif other is not None:
            merged.append((f.name, other.type, other))
        else:
            merged.append((f.name, f.type, f))
    merged += [(name, f.type, f) for name, f in custom_fields.items() if name not in base_names]
    return make_dataclass(f"Merged{base.__name__}", merged, bases=(base,))


@functools.cache
def torchtitan_job_config() -> type:
    """torchtitan's ``JobConfig``, rebuilt from the snapshot (same sections, fields, annotations, defaults)."""
    from torchtitan_ext.preflight.torchtitan_schema import JOB_CONFIG

    return _rebuild(JOB_CONFIG)


def torchtitan_datasets() -> tuple[str, ...]:
    """The names in torchtitan's own dataset registry (``DATASETS``), before BOOST registers its own."""
    from torchtitan_ext.preflight.torchtitan_schema import DATASETS

    return DATASETS


@functools.cache
def job_config_class(custom_config_module: str | None) -> type:
    """The ``JobConfig`` class torchtitan's parser will fill, merged with ``custom_config_module``'s
    ``JobConfig`` (importing that module; BOOST's, ``torchtitan_ext.config``, needs no torch).

    Raises what the import raises (``ImportError``; ``AttributeError`` for a module with no
    ``JobConfig``; ``TypeError`` for one that is not a dataclass)."""
    if not custom_config_module:
        return torchtitan_job_config()
    custom = importlib.import_module(custom_config_module).JobConfig
    return merge(torchtitan_job_config(), custom)


def snapshot_text() -> str:
    """The snapshot module for the installed torchtitan (imports torchtitan: run it where it is installed)."""
    from importlib.metadata import version

    from torchtitan.config import JobConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS

    return (
        f'"""torchtitan {version("torchtitan")}\'s JobConfig schema and dataset names, read by '
        "torchtitan_ext.preflight.schema.\n\n"
        "Written by ``python -m torchtitan_ext.preflight.schema``; do not edit.\n"
        'tests/unit/test_start_up.py holds it equal to torchtitan."""\n\n'
        f"TORCHTITAN = {version('torchtitan')!r}\n"
        f"DATASETS = {tuple(sorted(DATASETS))!r}\n"
        f"JOB_CONFIG = {pprint.pformat(describe_class(JobConfig), width=100, sort_dicts=False)}\n"
    )


if __name__ == "__main__":
    SNAPSHOT_FILE.write_text(snapshot_text())
    print(f"wrote {SNAPSHOT_FILE}; run ruff format on it")

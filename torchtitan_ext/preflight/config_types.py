"""Type-check a configuration against its dataclasses' annotations, generically.

torchtitan builds ``JobConfig`` from a TOML without looking at the values' types (a TOML's
``steps = "abc"`` reaches the trainer as a string), and merges BOOST's ``[boost]`` dataclass into it.
The checks here read the annotations (``typing.get_type_hints``: ``int``, ``float``, ``bool``,
``str``, ``Literal[...]``, ``X | None``, ``list[X]``, nested dataclasses), so a field added later to
either dataclass is covered with no change here.

- :func:`check_table` walks a parsed TOML: unknown sections and fields, a scalar where a section
  belongs (or the reverse) and values of the wrong type are refused, naming the field, the value
  and the expected type.
- :func:`check_instance` walks a built ``JobConfig`` the same way (the command line's values are
  already typed by tyro; this catches whatever reached the object another way).

``bool`` is refused where an ``int`` or ``float`` belongs (Python's ``True == 1`` would hide a
mistake), an ``int`` is accepted where a ``float`` belongs (``lr = 1`` means 1.0).
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from dataclasses import fields, is_dataclass
from typing import Any, Literal, Union

from boost.training.config_error import ConfigError, refuse


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of every dataclass field of ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def describe(hint: Any) -> str:
    """A type annotation in words, for messages ("int", "str or None", "one of ('a', 'b')").

    Raises ``TypeError`` for an annotation this checker does not understand, so a new kind of field
    fails a test (tests/unit/test_preflight.py walks every field) instead of passing unchecked.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any value"
    if hint is type(None):
        return "None"
    if is_dataclass(hint):
        return "a section (a TOML table)"
    if origin is Literal:
        return f"one of {args}"
    if origin in (Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if hint is list or origin is list:
        return f"a list of {describe(args[0])}" if args else "a list"
    if hint is dict or origin is dict:
        return f"a table of {describe(args[1])}" if args else "a table"
    if hint in (bool, int, float, str):
        return hint.__name__
    raise TypeError(
        f"config_types cannot check the annotation {hint!r}; teach describe() and matches() about it"
    )


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is an instance of the annotation ``hint`` (see the module docstring for bool/int/float)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if is_dataclass(hint):
        return is_dataclass(value) and not isinstance(value, type)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if hint is list or origin is list:
        return isinstance(value, list) and (not args or all(matches(item, args[0]) for item in value))
    if hint is dict or origin is dict:
        return isinstance(value, dict) and (
            not args or all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
        )
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (bool, str):
        return isinstance(value, hint)
    describe(hint)  # raises TypeError for an annotation not handled above
    return False


def _type_name(value: Any) -> str:
    return "a section (table)" if isinstance(value, dict) else type(value).__name__


def check_value(value: Any, hint: Any, field: str, source: str = "") -> None:
    """Refuse ``value`` for ``field`` unless it matches ``hint``; recurse into sections."""
    where = f" (in {source})" if source else ""
    if is_dataclass(hint):
        if not isinstance(value, dict):
            refuse(
                field,
                value,
                f"[{field}] is a section: write it as a TOML table `[{field}]` with its fields{where}",
            )
        check_table(value, hint, field, source)
    elif not matches(value, hint):
        if isinstance(value, dict):
            refuse(
                field,
                value,
                f"expected {describe(hint)}, got a section (table): "
                f"write `{field.rsplit('.', 1)[-1]} = <value>` under [{field.rsplit('.', 1)[0]}]{where}",
            )
        refuse(field, value, f"expected {describe(hint)}, got {_type_name(value)}{where}")


def check_table(table: dict[str, Any], cls: type, prefix: str = "", source: str = "") -> None:
    """Refuse unknown keys and wrongly typed values of a parsed TOML ``table`` for dataclass ``cls``."""
    known = field_types(cls)
    where = f" (in {source})" if source else ""
    for key, value in table.items():
        field = f"{prefix}.{key}" if prefix else key
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            kind = "section" if not prefix else f"field of [{prefix}]"
            raise ConfigError(f"{field}: unknown {kind}; {hint}known: {', '.join(known)}{where}")
        check_value(value, known[key], field, source)


def check_instance(obj: Any, prefix: str = "") -> None:
    """Refuse any field of the dataclass instance ``obj`` whose value does not match its annotation."""
    for name, hint in field_types(type(obj)).items():
        value, field = getattr(obj, name), f"{prefix}.{name}" if prefix else name
        if is_dataclass(hint):
            if not matches(value, hint):
                refuse(field, value, f"expected {describe(hint)}, got {_type_name(value)}")
            check_instance(value, field)
        elif not matches(value, hint):
            refuse(field, value, f"expected {describe(hint)}, got {_type_name(value)}")

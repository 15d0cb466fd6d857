"""The command line's overrides, read as torchtitan's parser (tyro) reads them, into typed values.

torchtitan hands argv to tyro, whose usage errors are a box of text for a terminal. The preflight
reads the overrides first, against the annotations of the job's dataclasses
(``config_types.field_types``), so that a refusal names the option, the value and the fix; torchtitan
is handed argv only once every override reads. The grammar is tyro's, as torchtitan configures it::

    --section.field value   --section.field=value     one value; in a name "_" and "-" are one character
    --section.flag          --section.no-flag         a bool is a flag, and takes no value
    --model.converters a,b                            a list[str] is one comma-separated value
    --parallelism.module_fqns_per_model_part a,b c    a list[list[str]] takes any number of them
    --parallelism.module_fqns_per_model_part=a,b c    (the first may be attached; the rest still follow)
    None                                              the value None, where the field may be None

A repeated option keeps its last value. A token that starts with "-" and a letter is an option, never
a value (``-5``, ``-.5``, ``-inf`` are values); after "=", anything is the value.
tests/unit/test_preflight.py holds this reading equal to tyro's, form by form.
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from dataclasses import dataclass, is_dataclass
from typing import Any, Literal, Union

from boost.training.config_error import ConfigError
from torchtitan_ext.preflight.config_types import describe, field_types

HELP_FLAGS = ("-h", "--help")
# float() reads these after a "-", and tyro takes such a token as a value (a negative number).
_SPECIAL_FLOATS = ("inf", "infinity", "nan")


@dataclass(frozen=True)
class Option:
    """One spelling of a field on the command line."""

    path: tuple[str, ...]
    """The field, section by section (``("training", "dataloader", "num_workers")``)."""
    hint: Any
    """The field's annotation."""
    flag: bool | None = None
    """For a bool: the value the flag sets (``--x.y`` True, ``--x.no-y`` False); ``None`` otherwise."""

    @property
    def name(self) -> str:
        return "--" + ".".join(self.path)

    def flag_forms(self) -> str:
        section, last = ".".join(self.path[:-1]), self.path[-1]
        return f"--{section}.{last} or --{section}.no-{last.replace('_', '-')}"


def _key(option: str) -> str:
    """An option as tyro matches it: "_" and "-" are one character."""
    return option.replace("_", "-")


@functools.cache
def options(config_cls: type) -> dict[str, Option]:
    """Every option of ``config_cls``'s fields, by :func:`_key`; a bool has its ``no-`` form too."""
    found = {}

    def walk(cls: type, path: tuple[str, ...]) -> None:
        for name, hint in field_types(cls).items():
            if is_dataclass(hint):
                walk(hint, (*path, name))
                continue
            option = Option((*path, name), hint, True if hint is bool else None)
            found[_key(option.name)] = option
            if hint is bool:
                found[_key("--" + ".".join((*path, "no-" + name)))] = Option(option.path, hint, False)

    walk(config_cls, ())
    return found


def _is_negative_number(token: str) -> bool:
    rest = token[1:]
    return (
        token.startswith("-")
        and rest[:1] != "-"
        and rest != ""
        and (rest[0].isdigit() or rest[0] == "." or rest.lower() in _SPECIAL_FLOATS)
    )


def _is_option(token: str, known: dict[str, Option]) -> bool:
    """Whether ``token`` ends the values of the option before it (tyro's rule)."""
    key = token.partition("=")[0]
    if token == "--" or _key(key) in known or key in HELP_FLAGS:
        return True
    return key.startswith("-") and key.lstrip("-")[:1].isalpha() and not _is_negative_number(key)


def _refuse(message: str) -> typing.NoReturn:
    raise ConfigError(f"command line: {message} (run with --help for every field)")


def convert(raw: str, hint: Any) -> Any:
    """The value of one token for a field annotated ``hint``, as tyro converts it; ``ValueError`` if none."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is str:
        return raw
    if hint in (int, float):
        return hint(raw)
    if origin is Literal:
        for choice in args:
            if str(choice) == raw:
                return choice
        raise ValueError(raw)
    if origin in (Union, types.UnionType):
        if type(None) in args and raw == "None":
            return None
        for member in (a for a in args if a is not type(None)):  # the first member that reads it, in order
            try:
                return convert(raw, member)
            except ValueError:
                pass
        raise ValueError(raw)
    if origin is list and args == (str,):
        return raw.split(",")  # torchtitan's tyro rule: one comma-separated value
    raise ValueError(f"no command-line form for {hint!r}")


def _takes_many(hint: Any) -> bool:
    """A list of lists: any number of comma-separated values (or the one value None)."""
    members = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    return any(
        typing.get_origin(m) is list and typing.get_origin(typing.get_args(m)[0]) is list for m in members
    )


def _many(raws: list[str], hint: Any) -> list[list[str]] | None:
    may_be_none = typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(hint)
    return None if raws == ["None"] and may_be_none else [raw.split(",") for raw in raws]


def parse_overrides(argv: list[str], config_cls: type) -> dict[str, Any]:
    """The fields ``argv`` sets, as nested sections of typed values (``{"training": {"steps": 3}}``);
    ``ConfigError`` naming the option, the value and the fix for anything tyro would refuse."""
    known = options(config_cls)
    values: dict[str, Any] = {}
    previous: tuple[Option, str] | None = None  # the option just read, and the token that named it
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            if i < len(argv):
                _refuse(f"{argv[i]!r} follows '--', after which torchtitan reads no option")
            break
        if token in HELP_FLAGS:
            continue
        name, has_value, attached = token.partition("=")
        option = known.get(_key(name))
        if option is None and not _is_option(token, known):  # a value that no option takes
            if previous is not None and previous[0].flag is not None:
                _refuse(
                    f"{token!r} follows {previous[1]}, a flag that takes no value: "
                    f"write {previous[0].flag_forms()}"
                )
            where = f"follows {previous[1]}, which takes one value" if previous else "is not an option"
            _refuse(f"{token!r} {where}: write --section.field value")
        if option is None:
            value = argv[i] if i < len(argv) and not _is_option(argv[i], known) else None
            close = difflib.get_close_matches(_key(name), list(known), n=1)
            suggestion = f"; did you mean {known[close[0]].name}?" if close else ""
            shown = f"{name} {value}" if value is not None and not has_value else token
            _refuse(f"{shown}: unknown option{suggestion}")
        previous = (option, name)
        if option.flag is not None:
            if has_value:
                _refuse(
                    f"{attached!r} follows {name}, a flag that takes no value: write {option.flag_forms()}"
                )
            value = option.flag
        elif _takes_many(option.hint):
            raws = [attached] if has_value else []  # tyro reads on after an attached value too
            while i < len(argv) and not _is_option(argv[i], known):
                raws.append(argv[i])
                i += 1
            value = _many(raws, option.hint)
        else:
            if has_value:
                raw = attached
            elif i < len(argv) and not _is_option(argv[i], known):
                raw, i = argv[i], i + 1
            else:
                _refuse(f"{name} needs a value: {describe(option.hint)}")
            try:
                value = convert(raw, option.hint)
            except ValueError:
                _refuse(f"{name} {raw!r}: expected {describe(option.hint)}")
        section = values
        for part in option.path[:-1]:
            section = section.setdefault(part, {})
        section[option.path[-1]] = value
    return values

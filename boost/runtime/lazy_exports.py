"""A package's names loaded from their modules on first use (PEP 562), so that importing the package
loads none of them: what lets the launcher refuse a bad job before torch loads."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__`` for ``exports`` (name → the module defining it).

    Example::

        __getattr__, __dir__ = lazy_exports(__name__, {"Transformer": "boost.training.model.model"})
    """

    def __getattr__(name: str) -> object:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*vars(importlib.import_module(package)), *exports])

    return __getattr__, __dir__

"""The installed torch against the supported range, stated once in ``pyproject.toml``
(``[tool.boost] supported-torch``), read without importing torch: ``run_train.sh`` refuses an unsupported
torch in a fraction of a second, before any process starts.

The package's requirement on torch is that range's lower bound alone, so that installing BOOST never
replaces a torch a user has (a newer, untested one included): the refusal is where the upper end holds.
A wheel install has no ``pyproject.toml``: there the installed metadata's requirement (the lower bound)
is what is checked.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

DISTRIBUTION = "boost-lowrank"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def supported_torch() -> SpecifierSet:
    """The torch versions BOOST supports: ``pyproject.toml``'s ``[tool.boost] supported-torch`` in a
    checkout (installed editable or on ``PYTHONPATH``), else the installed requirement on torch."""
    pyproject = _pyproject()
    if pyproject is not None:
        return SpecifierSet(pyproject["tool"]["boost"]["supported-torch"])
    return torch_requirement(metadata.requires(DISTRIBUTION) or [])


def torch_requirement(requirements: list[str]) -> SpecifierSet:
    """The specifier of the requirement on ``torch`` among ``requirements``."""
    for requirement in requirements:
        parsed = Requirement(requirement)
        if parsed.name == "torch":
            return parsed.specifier
    raise LookupError(f"{DISTRIBUTION} states no requirement on torch")


def supported_range() -> str:
    """The supported range as written, the lower bound first: ``>=2.11,<2.15``."""
    return ",".join(sorted(map(str, supported_torch()), key=lambda spec: not spec.startswith(">")))


def _pyproject() -> dict | None:
    if not PYPROJECT.is_file():
        return None
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    pyproject = tomllib.loads(PYPROJECT.read_text())
    return pyproject if pyproject.get("project", {}).get("name") == DISTRIBUTION else None


def torch_version_problem() -> str | None:
    """One line saying that the installed torch is outside the supported range (or absent), else ``None``."""
    supported = supported_range()
    try:
        installed = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return f"BOOST needs torch{supported}, and no torch is installed: pip install 'torch{supported}'"
    # a local build (2.11.0+cu130) is its release; a pre-release inside the range is accepted
    if supported_torch().contains(Version(installed), prereleases=True):
        return None
    return (
        f"BOOST supports torch{supported} (pyproject.toml), and torch {installed} is installed: "
        f"install a torch in that range, e.g. pip install 'torch{supported}'"
    )

"""The installed torch against the supported range, read from where it is stated once: ``pyproject.toml``'s
requirement on torch (a checkout, installed editable or on ``PYTHONPATH``), else the installed
distribution's metadata (a wheel install). Neither imports torch: ``run_train.sh`` refuses an
unsupported torch in a fraction of a second, before any process starts.
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
    """The torch versions BOOST supports: its requirement on ``torch``."""
    for requirement in _requirements():
        parsed = Requirement(requirement)
        if parsed.name == "torch":
            return parsed.specifier
    raise LookupError(f"{DISTRIBUTION} states no requirement on torch")


def supported_range() -> str:
    """The supported range as written, the lower bound first: ``>=2.11,<2.15``."""
    return ",".join(sorted(map(str, supported_torch()), key=lambda spec: not spec.startswith(">")))


def _requirements() -> list[str]:
    if PYPROJECT.is_file():
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
        project = tomllib.loads(PYPROJECT.read_text()).get("project", {})
        if project.get("name") == DISTRIBUTION:
            return project.get("dependencies", [])
    return metadata.requires(DISTRIBUTION) or []


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

"""The installed torch against the supported range, stated once in ``pyproject.toml`` (the
``tested-torch`` extra), read without importing torch: ``run_train.sh`` refuses a torch older than the
range (or none) in a fraction of a second, before any process starts.

The range is what CI tests, not a wall: a torch newer than its upper end runs where the private torch
names BOOST bridges are there (``torch_private.missing_private_api``, found by feature, not by version),
saying in one line which range was tested (``newer_torch_line``); one that lacks any is refused, naming
them. The package's requirement on torch is the range's lower bound alone, so that installing BOOST
never replaces a torch a user has. A wheel install has no ``pyproject.toml``: there the range is read
from the installed metadata, which carries the extra's requirement.
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
TESTED_EXTRA = "tested-torch"


def supported_torch() -> SpecifierSet:
    """The torch versions BOOST supports: the ``tested-torch`` extra's requirement on torch, read from
    ``pyproject.toml`` in a checkout (installed editable or on ``PYTHONPATH``: an editable install's
    metadata is as old as the install), else from the installed package's metadata."""
    pyproject = _pyproject()
    if pyproject is not None:
        return torch_requirement(pyproject["project"]["optional-dependencies"][TESTED_EXTRA])
    return torch_requirement([r for r in metadata.requires(DISTRIBUTION) or [] if _only_in_tested_extra(r)])


def _only_in_tested_extra(requirement: str) -> bool:
    # metadata lists every extra's requirements beside the package's own, each marked `extra == "..."`
    marker = Requirement(requirement).marker
    return (
        marker is not None and marker.evaluate({"extra": TESTED_EXTRA}) and not marker.evaluate({"extra": ""})
    )


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


def installed_torch() -> Version | None:
    """The installed torch's version, from its package metadata (torch not imported), or ``None``."""
    try:
        return Version(metadata.version("torch"))
    except metadata.PackageNotFoundError:
        return None


def _lower_bound() -> SpecifierSet:
    return SpecifierSet(",".join(str(spec) for spec in supported_torch() if spec.operator in (">=", ">")))


def torch_version_problem() -> str | None:
    """One line saying that the installed torch is older than the supported range (or absent), else
    ``None``: a torch newer than the range is no problem here (``newer_torch``)."""
    supported = supported_range()
    installed = installed_torch()
    if installed is None:
        return f"BOOST needs torch{supported}, and no torch is installed: pip install 'torch{supported}'"
    # a local build (2.11.0+cu130) is its release; a pre-release inside the range is accepted
    if _lower_bound().contains(installed, prereleases=True):
        return None
    return (
        f"BOOST supports torch{supported} (pyproject.toml), and torch {installed} is installed: "
        f"install a torch in that range, e.g. pip install 'torch{supported}'"
    )


def newer_torch() -> Version | None:
    """The installed torch's version where it is newer than the supported range, else ``None``."""
    installed = installed_torch()
    if installed is None or supported_torch().contains(installed, prereleases=True):
        return None
    return installed if _lower_bound().contains(installed, prereleases=True) else None


def check_newer_torch() -> None:
    """Where the installed torch is newer than the range: the private torch names BOOST bridges looked up
    (torch imported), and ``newer_torch_line`` said; ``SystemExit`` with that line where it lacks any.
    The preflight calls it where it first imports torch, so that a job it refuses is refused as fast on
    every torch."""
    newer = newer_torch()
    if newer is None:
        return
    from torchtitan_ext.torch_private import missing_private_api

    missing = missing_private_api()
    line = newer_torch_line(newer, missing)
    if missing:
        raise SystemExit(line)
    print(line, file=sys.stderr, flush=True)


def newer_torch_line(installed: Version, missing: list[str]) -> str:
    """The one line for a torch newer than the range: it runs (``missing`` empty), or is refused for the
    private torch names BOOST bridges that it lacks (``torch_private.missing_private_api``)."""
    supported = supported_range()
    tested = f"BOOST was tested with torch{supported} (pyproject.toml); torch {installed} is newer"
    if not missing:
        return f"{tested} and has every private torch name BOOST bridges (torchtitan_ext/torch_private.py): running it"
    return (
        f"{tested} and lacks private torch names BOOST bridges (torchtitan_ext/torch_private.py): "
        f"{', '.join(missing)}; install a torch in that range, e.g. pip install 'torch{supported}'"
    )

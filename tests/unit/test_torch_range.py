"""The supported torch range: stated once (pyproject.toml), held by the torch each CI environment runs
(the main suite's and the compatibility tier's, .ci/compat), and a torch outside it refused by
run_train.sh in one line before any process starts."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from torchtitan_ext.torch_range import (
    PYPROJECT,
    supported_range,
    supported_torch,
    torch_requirement,
    torch_version_problem,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_requirement_on_torch_is_the_ranges_lower_bound_alone():
    """Installing never replaces a torch a user has, a newer one included: the upper end is the refusal's."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    requirement = torch_requirement(tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"])
    lower = [spec for spec in supported_torch() if spec.operator == ">="]
    assert list(requirement) == lower, (str(requirement), supported_range())


def test_the_torch_running_the_suite_is_in_the_range():
    assert supported_torch().contains(Version(metadata.version("torch")), prereleases=True)
    assert torch_version_problem() is None


@pytest.mark.parametrize("version", ["2.10.0", "2.15.0", "2.15.0.dev20260101+cu130"])
def test_run_train_refuses_a_torch_outside_the_range_in_one_line(version, tmp_path):
    # a torch distribution of that version first on the path: what importlib.metadata reads
    info = tmp_path / "site" / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    path = os.pathsep.join(p for p in (str(info.parent), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out")],
        cwd=ROOT,
        env=dict(os.environ, PYTHON=sys.executable, PYTHONPATH=path, NGPU="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    supported = supported_range()
    assert supported.startswith(">=2.11,<"), supported  # the oldest end, 2.11: the GPU images' torch
    assert proc.stderr.splitlines() == [
        f"BOOST supports torch{supported} (pyproject.toml), and torch {version} is installed: "
        f"install a torch in that range, e.g. pip install 'torch{supported}'"
    ]
    assert not (tmp_path / "out").exists()

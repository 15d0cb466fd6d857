"""The supported torch range: stated once (pyproject.toml), held by the torch each CI environment runs
(the main suite's and the compatibility tier's, .ci/compat); a torch older than it refused by run_train.sh
in one line before any process starts, and a newer one run, told in one line which range was tested,
where it has every private torch name BOOST bridges (found by feature).

A torch of another version is a distribution of that version first on the path, the installed torch
behind it: what importlib.metadata reads, and what ``import torch`` loads."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from torchtitan_ext import torch_private
from torchtitan_ext.torch_private import missing_private_api
from torchtitan_ext.torch_range import (
    PYPROJECT,
    newer_torch_line,
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


def _run_train_with_torch(version: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    info = tmp_path / "site" / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    path = os.pathsep.join(p for p in (str(info.parent), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHON=sys.executable, PYTHONPATH=path, NGPU="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("version", ["2.10.0", "2.10.1+cu128", "1.13.1"])
def test_run_train_refuses_an_older_torch_in_one_line(version, tmp_path):
    proc = _run_train_with_torch(version, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    supported = supported_range()
    assert supported.startswith(">=2.11,<"), supported  # the oldest end, 2.11: the GPU images' torch
    assert proc.stderr.splitlines() == [
        f"BOOST supports torch{supported} (pyproject.toml), and torch {version} is installed: "
        f"install a torch in that range, e.g. pip install 'torch{supported}'"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # the newer torch's private names are looked up: its process imports torch
@pytest.mark.parametrize("version", ["2.15.0", "2.15.0.dev20260101+cu130"])
def test_run_train_runs_a_newer_torch_saying_which_range_was_tested(version, tmp_path):
    # past the torch check, the preflight: a job it refuses stops there, before any process
    proc = _run_train_with_torch(version, tmp_path, "--training.steps", "0")
    assert proc.returncode == 2, proc.stderr[-2000:]
    missing = missing_private_api()  # the installed torch's, which the newer version number stands on
    if missing:  # torch 2.11, without the 2.13 stage API: a newer torch like it is refused in one line
        assert proc.stderr.splitlines() == [newer_torch_line(Version(version), missing)]
    else:
        assert proc.stderr.splitlines() == [
            f"BOOST was tested with torch{supported_range()} (pyproject.toml); torch {version} is newer and has "
            "every private torch name BOOST bridges (torchtitan_ext/torch_private.py): running it",
            "BOOST config error: training.steps = 0: must be at least 1",
        ]
    assert not (tmp_path / "out").exists()


def test_the_private_torch_names_bridged_are_found_by_feature(monkeypatch):
    """What a newer torch must have: every name on each torch of the range from 2.13 (2.11 bridges the
    2.13 stage API it lacks otherwise); a torch without one of them is told which."""
    missing = missing_private_api()
    if torch_private.STAGE_META:
        assert missing == []
    else:  # torch 2.11
        assert missing and all("pipelining" in name or name.startswith("PipelineStage(") for name in missing)
    import torch.distributed.distributed_c10d as c10d

    monkeypatch.delattr(c10d, "_resolve_process_group")  # a torch that moved it
    missing = missing_private_api()
    assert "torch.distributed.distributed_c10d._resolve_process_group" in missing
    supported = supported_range()
    assert newer_torch_line(Version("2.15.0"), missing) == (
        f"BOOST was tested with torch{supported} (pyproject.toml); torch 2.15.0 is newer and lacks private "
        f"torch names BOOST bridges (torchtitan_ext/torch_private.py): {', '.join(missing)}; install a torch "
        f"in that range, e.g. pip install 'torch{supported}'"
    )

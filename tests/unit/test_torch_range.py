"""The supported torch range: stated once (pyproject.toml), held by the torch each CI environment runs
(the main suite's and the compatibility tier's, .ci/compat); a torch older than it refused by run_train.sh
in one line before any process starts, and a newer one run, told in one line which range was tested,
where it has every private torch name BOOST bridges (found by feature).

A torch of another version is a distribution of that version first on the path, the installed torch
behind it: what importlib.metadata reads, and what ``import torch`` loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

from torchtitan_ext import torch_private
from torchtitan_ext.torch_private import missing_private_api
from torchtitan_ext.torch_range import (
    DISTRIBUTION,
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


def test_an_installed_wheel_knows_the_range_a_newer_torch_is_told_of(tmp_path):
    """A wheel install has no pyproject.toml beside the package: the range comes from its metadata, which
    pip wrote from pyproject.toml (this environment's install's; a wheel's says the same), so a newer torch
    is still found newer there and its private names looked up, not run unchecked."""
    import shutil

    installed = metadata.distribution(DISTRIBUTION)
    site = tmp_path / "site"
    info = site / f"{installed.name.replace('-', '_')}-{installed.version}.dist-info"
    info.mkdir(parents=True)
    # what a wheel's METADATA says and torch_range reads (an editable install's may be an egg-info's PKG-INFO)
    said = [f"Name: {installed.metadata['Name']}", f"Version: {installed.version}"]
    said += [f"Requires-Dist: {requirement}" for requirement in installed.requires or []]
    (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.1", *said]) + "\n")
    shutil.copytree(
        ROOT / "torchtitan_ext", site / "torchtitan_ext", ignore=shutil.ignore_patterns("__pycache__")
    )
    newer = site / "torch-2.15.0.dist-info"
    newer.mkdir()
    (newer / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\n")
    probe = (
        "from torchtitan_ext import torch_range as t; "
        "print(t.PYPROJECT.is_file(), t.__file__.startswith(sys.argv[1]), t.supported_range(), t.newer_torch())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; {probe}", str(site)],
        cwd=tmp_path,
        # the copy first; the fast tier's guard (on the PYTHONPATH) still watches the process for torch
        env=dict(
            os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the metadata pip wrote when this environment was installed: an edited pyproject.toml needs a reinstall
    assert proc.stdout.split() == ["False", "True", supported_range(), "2.15.0"], (
        proc.stdout,
        "reinstall if pyproject.toml's tested-torch extra changed since: pip install -e .",
    )


def test_the_torches_ci_runs_are_the_range_its_ends_and_one_inside():
    """The range says what CI tests: the main suite's torch (README's command, which .ci/run runs) inside
    it, the compatibility tier's (.ci/compat's default entries) at its two ends. Read from the files, so
    that the suite itself runs on any torch run_train.sh runs, a newer one included."""
    main_suite = re.search(r"pip install torch==(\S+) ", (ROOT / "README.md").read_text()).group(1)
    assert (
        re.search(r"pip install --quiet torch==(\S+) ", (ROOT / ".ci" / "run").read_text()).group(1)
        == main_suite
    )
    entries = re.search(r'COMPAT_TORCHES:-([^}"]+)', (ROOT / ".ci" / "compat").read_text()).group(1).split()
    compat = sorted(Version(entry.split("@")[0]) for entry in entries)
    supported = supported_torch()
    assert all(supported.contains(v) for v in [Version(main_suite), *compat]), (main_suite, entries)
    (lower,) = (Version(spec.version) for spec in supported if spec.operator == ">=")
    (upper,) = (Version(spec.version) for spec in supported if spec.operator == "<")
    assert compat[0].release[:2] == lower.release[:2], (entries, str(supported))
    assert compat[-1].release[:2] == (upper.major, upper.minor - 1), (entries, str(supported))


def test_run_train_takes_the_torch_running_the_suite():
    assert torch_version_problem() is None, metadata.version("torch")


def _run_train_with_torch(version: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    info = tmp_path / "site" / f"torch-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
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
    # a job the preflight refuses before it imports torch is refused as on any torch: one line
    proc = _run_train_with_torch(version, tmp_path, "--training.steps", "0")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == ["BOOST config error: training.steps = 0: must be at least 1"]
    assert not (tmp_path / "out").exists()
    # where the preflight imports torch (the checkpoint it would resume from: here one whose save never
    # finished), the newer torch is checked first
    unfinished = tmp_path / "out" / "checkpoint" / "step-3"
    unfinished.mkdir(parents=True)
    proc = _run_train_with_torch(version, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    missing = missing_private_api()  # the installed torch's, which the newer version number stands on
    if missing:  # torch 2.11, without the 2.13 stage API: a newer torch like it is refused in one line
        assert proc.stderr.splitlines() == [newer_torch_line(Version(version), missing)]
    else:
        lines = proc.stderr.splitlines()
        assert lines[0] == (
            f"BOOST was tested with torch{supported_range()} (pyproject.toml); torch {version} is newer and has "
            "every private torch name BOOST bridges (torchtitan_ext/torch_private.py): running it"
        )
        assert len(lines) == 2 and lines[1].startswith(
            f"BOOST checkpoint error: no intact checkpoint in {unfinished.parent} "
        ), lines
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*")) == [
        Path("out/checkpoint"),
        Path("out/checkpoint/step-3"),
    ]


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


def test_a_private_torch_name_the_library_or_the_glue_reads_is_checked(monkeypatch):
    """Names read outside torch_private.py are looked up too: the library's (``boost.runtime.torch_names``:
    ``boost/`` cannot import torchtitan_ext) and the rest of torchtitan_ext's; a torch without one is told
    which, once."""
    import torch._dynamo.callback as callback
    import torch._utils
    import torch.distributed.tensor._utils as dtensor_utils

    monkeypatch.delattr(dtensor_utils, "compute_local_shape_and_global_offset")  # boost's seeded init
    monkeypatch.delattr(callback, "callback_handler")  # torchtitan_ext/startup_clock.py
    monkeypatch.delattr(torch._utils, "_get_available_device_type")  # torchtitan_ext/cpu.py
    import torch.distributed.distributed_c10d as c10d

    monkeypatch.delattr(c10d, "_resolve_process_group")  # in both tables: named once
    missing = missing_private_api()
    assert {
        "torch.distributed.tensor._utils.compute_local_shape_and_global_offset",
        "torch._dynamo.callback.callback_handler",
        "torch._utils._get_available_device_type",
    } <= set(missing), missing
    assert missing.count("torch.distributed.distributed_c10d._resolve_process_group") == 1, missing


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _private_torch_names_read(path: Path) -> set[str]:
    """Every private torch name a file reads, as ``module.attribute``: imported from a private module or by
    a private name, or reached by attributes from ``torch`` or from a private module's alias."""
    import ast

    tree = ast.parse(path.read_text())
    found, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            found |= {f"{node.module}.{a.name}" for a in node.names if _private(f"{node.module}.{a.name}")}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname: a.name for a in node.names if a.asname and a.name.startswith("torch.")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Del):
            parts, base = [], node
            while isinstance(base, ast.Attribute):
                parts.insert(0, base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in ("torch", *aliases):
                dotted = ".".join([aliases.get(base.id, base.id), *parts])
                if _private(dotted):
                    found.add(dotted)
    return found


def test_every_private_torch_name_boost_reads_is_checked():
    """Each private torch name read in ``boost/`` and ``torchtitan_ext/`` (torch_private.py apart: the
    methods its stages override are its own table's) is in a table ``missing_private_api`` looks up: the
    name itself, or what it is read from (``torch.ops.aten._local_scalar_dense`` for its ``.default``)."""
    from boost.runtime.torch_names import LIBRARY_PRIVATE_TORCH
    from torchtitan_ext.torch_private import EXTENSION_PRIVATE_TORCH

    checked = {
        f"{module}.{name}"
        for table in (EXTENSION_PRIVATE_TORCH, LIBRARY_PRIVATE_TORCH)
        for module, names in table.items()
        for name in names
    }
    root = Path(__file__).resolve().parents[2]
    unchecked = {}
    for folder in ("boost", "torchtitan_ext"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "torch_private.py":
                continue
            for dotted in _private_torch_names_read(path):
                parts = dotted.split(".")
                prefixes = {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
                # a private module reached on the way (torch._utils, before ._get_device_module) is read from
                if not prefixes & checked and not any(c.startswith(dotted + ".") for c in checked):
                    unchecked.setdefault(dotted, str(path.relative_to(root)))
    assert not unchecked, unchecked

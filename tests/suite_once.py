"""Work that tests on several pytest-xdist workers share, done once a suite.

Each xdist worker is a pytest session of its own, so a session or module fixture would be made once per
worker. Here the first worker to ask makes it in the folder every worker shares, the others wait on its
lock and read what it wrote.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def once_per_suite(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], str]
) -> tuple[Path, str]:
    """``(folder, make(folder))``: ``make`` runs once a suite, in ``folder`` (shared by every worker);
    a worker that finds it made reads its text. A ``make`` that raised wrote nothing: the next worker to
    ask starts it afresh."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the workers' common folder
    folder, done = base / name, base / f"{name}.txt"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(make(folder))
    return folder, done.read_text()

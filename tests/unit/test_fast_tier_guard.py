"""The fast tier's guard (``tests/conftest.py``, ``tests/fast_tier_guard/sitecustomize.py``): a process started
with the guard's environment records its first import of torch, and only that."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GUARD = Path(__file__).resolve().parents[1] / "fast_tier_guard"


@pytest.mark.slow  # it starts a process that imports torch, on purpose
def test_a_started_process_that_imports_torch_is_recorded(tmp_path):
    log = tmp_path / "log"
    env = dict(os.environ, PYTHONPATH=str(GUARD), BOOST_TORCH_IMPORT_LOG=str(log))
    subprocess.run([sys.executable, "-c", "import json, tomllib"], env=env, check=True, timeout=60)
    assert not log.exists()  # a process without torch is no slow test's
    subprocess.run([sys.executable, "-c", "import torch.nn"], env=env, check=True, timeout=120)
    assert log.read_text() == "-c\n"  # once, naming the process by its arguments

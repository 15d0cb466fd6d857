# The suite tests the CPU path (gloo, several processes on one machine) on any machine. A GPU machine's
# GPUs are hidden from it and from every process it starts: otherwise torchtitan puts each rank of a
# run_train.sh test on cuda:LOCAL_RANK under NCCL, and NGPU=2 on a one-GPU machine fails. Set before
# anything asks CUDA for its devices (torch reads the variable then), so before torchtitan_ext.
import os
from pathlib import Path

os.environ["CUDA_VISIBLE_DEVICES"] = ""

# torchtitan_ext installs its CPU adaptation on import: before any test module imports torchtitan.
import torchtitan_ext  # noqa: F401,E402,I001

import pytest
import torch

# One intra-op thread in the pytest process: its tests compute on tiny tensors, where a second
# OpenMP thread costs more in synchronisation than it computes, and many times more when the other
# core is busy (a 2-core machine; test_generate.py's sampling: 0.45 s on one thread, 8.9 s on two
# beside other work). Processes the tests start choose their own (run_train.sh's share, a gloo rank 1).
torch.set_num_threads(1)

# Under pytest-xdist (pyproject.toml's -n auto) the workers share the cores: the processes a test
# starts take their worker's share (run_train.sh and tests/rank_server.py honour OMP_NUM_THREADS),
# not all of them each; OpenMP threads past the cores spin against each other.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _workers))


def pytest_report_header(config):
    # the suite runs on a torch newer than the tested range too (tests/trainer.stderr_lines): say so once
    from torchtitan_ext.torch_range import newer_torch, supported_range

    newer = newer_torch()
    if newer is not None:
        return f"BOOST: torch {newer} is newer than the range CI tests (torch{supported_range()})"


def pytest_collection_modifyitems(config, items):
    # The suite's longest tests (marked `long`) first. pytest-xdist's worksteal hands each worker a contiguous
    # share of the collected list and steals from the end of another's: a long test in the middle of the
    # list (the GPU rows' layout was 66th of 740, after 50 feature-matrix rows) starts last, and the other
    # worker idles through it. The rest keep their order (a stable sort).
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


_FAST_TIER_GUARD = str(Path(__file__).resolve().parent / "fast_tier_guard")


@pytest.fixture(autouse=True)
def _fast_tests_start_no_torch_process(request, tmp_path_factory, monkeypatch):
    """A test not marked ``slow`` fails when a Python process it starts imports torch (a run_train.sh, a
    gloo rank, a CLI that loads torch): ``tests/fast_tier_guard``'s sitecustomize notes the import in every
    process started with this process's environment (a test that hands a child an environment of its own
    without the PYTHONPATH goes unwatched)."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    log = tmp_path_factory.mktemp("torch-imports", numbered=True) / "log"
    monkeypatch.setenv("BOOST_TORCH_IMPORT_LOG", str(log))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [_FAST_TIER_GUARD, os.environ.get("PYTHONPATH")]))
    )
    yield
    if log.exists():
        pytest.fail(
            "a test of the fast tier started processes that import torch; mark it @pytest.mark.slow:\n"
            + log.read_text(),
            pytrace=False,
        )

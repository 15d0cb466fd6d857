"""The compatibility tier's install test (``.ci/compat``): installing BOOST over a torch leaves that torch's
stack as it was (torch, triton, every nvidia-* / cuda-* package), which ``.ci/torch_stack`` reads from
``pip freeze`` listings taken before and after. A package the install adds to the stack is a change as
much as one it replaces or removes; BOOST's own requirements (torchtitan, torchdata) are not the stack."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# pip freeze of torch 2.11.0's CUDA build alone (an excerpt: its stack and one of torch's other requirements)
BEFORE = """\
filelock==3.20.0
nvidia-cublas==13.0.0.19
nvidia-nccl-cu13==2.27.7
sympy==1.14.0
torch==2.11.0+cu130
triton==3.6.0
"""
# after an install that kept the stack: BOOST's requirements came, and a requirement of torch's moved
KEPT = BEFORE.replace("sympy==1.14.0", "sympy==1.13.3") + (
    "-e git+https://example.org/boost@0000000#egg=boost_lowrank\ntorchdata==0.11.0\ntorchtitan==0.2.2\n"
)


def _changes(tmp_path: Path, before: str, after: str) -> subprocess.CompletedProcess:
    (tmp_path / "before.txt").write_text(before)
    (tmp_path / "after.txt").write_text(after)
    return subprocess.run(
        [ROOT / ".ci" / "torch_stack", "changes", tmp_path / "before.txt", tmp_path / "after.txt"],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_stack_is_torch_triton_and_the_cuda_packages(tmp_path):
    (tmp_path / "after.txt").write_text(KEPT)
    listed = subprocess.run(
        [ROOT / ".ci" / "torch_stack", "list", tmp_path / "after.txt"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert listed.splitlines() == [
        "nvidia-cublas==13.0.0.19",
        "nvidia-nccl-cu13==2.27.7",
        "torch==2.11.0+cu130",
        "triton==3.6.0",
    ]


def test_an_install_that_keeps_the_stack_passes(tmp_path):
    proc = _changes(tmp_path, BEFORE, KEPT)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "edit, changed",
    [
        # a CUDA library the install adds beside torch's own: two stacks in one environment
        (("triton==3.6.0", "nvidia-cublas-cu12==12.8.4.1\ntriton==3.6.0"), ["+nvidia-cublas-cu12==12.8.4.1"]),
        (("triton==3.6.0", "cuda-bindings==13.0.1\ntriton==3.6.0"), ["+cuda-bindings==13.0.1"]),
        # torch or triton replaced by another release
        (("torch==2.11.0+cu130", "torch==2.14.1"), ["-torch==2.11.0+cu130", "+torch==2.14.1"]),
        (("triton==3.6.0", "triton==3.7.0"), ["-triton==3.6.0", "+triton==3.7.0"]),
        # a CUDA library removed
        (("nvidia-nccl-cu13==2.27.7\n", ""), ["-nvidia-nccl-cu13==2.27.7"]),
    ],
    ids=["nvidia added", "cuda added", "torch replaced", "triton replaced", "nvidia removed"],
)
def test_an_install_that_changes_the_stack_is_named(tmp_path, edit, changed):
    old, new = edit
    assert old in KEPT
    proc = _changes(tmp_path, BEFORE, KEPT.replace(old, new))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == changed

"""Dry runs at the real world size: one process as rank 0 of NGPU on torchtitan's fake process group,
through ``run_train.sh`` (``DRY_RUN=1``), the shipped TOML as is but for a short sequence, fp32, one step.

The world size reaches every part from ``NGPU``: torchtitan's mesh (the global batch is the local batch ×
the FSDP degree), BOOST's checks (tp 4 at world size 1 would be refused) and the pipeline split (rank 0
builds stage 0 of ``pp`` and runs the 1F1B schedule with static stage shapes: no shape message can
arrive on a fake process group). The memory check is the dry run's bound (``DryRun.within_prediction``):
peak RSS ≤ 1.5 × ``boost.planning.layout_planner``'s per-rank prediction + the process overhead.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

from bench.dry_run import dry_run
from tests.trainer import ROOT, losses, stderr_lines, train

# (flavor, world size, extra overrides, layout), CPU-seconds measured on this machine: 7B at 16 ~35-45,
# 30B at 32 ~80 (rank 0 holds pipeline stage 0, 9 of 36 layers, and its FSDP share of them: 175
# CPU-seconds and 12.6 GiB at tp4 × fsdp8 while FSDP sharded the batched up-projections on their 2-3
# members). 30B runs its pp4: the pipeline's dry-run path is tested there.
CASES = [
    ("7B", 16, [], "tp4 pp1 fsdp4 btp"),
    ("30B", 32, [], "tp4 pp4 fsdp2 btp"),
]


# the compatibility tier (.ci/compat) dry-runs 7B@16 on every end of the torch range
COMPAT = {"7B-16"}
LONG = {"30B-32"}  # about a minute on 2 cores: started first (tests/conftest.py)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flavor,world_size,extra,layout",
    [
        pytest.param(
            *c,
            marks=[
                m
                for m, ids in ((pytest.mark.compat, COMPAT), (pytest.mark.long, LONG))
                if f"{c[0]}-{c[1]}" in ids
            ],
        )
        for c in CASES
    ],
    ids=[f"{c[0]}-{c[1]}" for c in CASES],
)
def test_cola_dry_runs_at_real_world_size(flavor, world_size, extra, layout):
    run = dry_run(
        flavor, "cola", world_size, steps=1, seq_len=16, extra=["--compile.no-enable", *extra], timeout=600
    )
    assert run.layout.startswith(layout), run.layout
    # local batch: one micro-batch per stage (1 without PP) on each of the data-parallel ranks
    assert run.global_batch == run.dp * run.pp
    assert len(run.grad_norms) == 1 and math.isfinite(run.grad_norms[0]), run.grad_norms
    if run.pp == 1:
        assert len(run.losses) == 1 and math.isfinite(run.losses[0]), run.losses
    else:
        assert run.losses == [-1.0]  # torchtitan's mark for a rank without the last stage
    assert run.within_prediction, run.row()


@pytest.mark.slow
def test_a_megatron_dry_run_keeps_a_models_gradient_scale(tmp_path):
    """Megatron splits the embedding over the vocabulary. On the fake process group every token outside
    rank 0's shard entered as a zero vector, and RMSNorm's gradient at zero (1/sqrt(eps)) compounded
    block by block: the 7B@16 megatron dry run overflowed at step 8 on the H100, and this one reached a
    gradient norm of 6e4 by step 29. A dry run's tokens are folded into rank 0's shard
    (``torchtitan_ext.dry_run``); its norms stay a model's (1–3 here)."""
    env = dict(os.environ, DRY_RUN="1", NGPU="4", PYTHON=sys.executable, BOOST_CACHE=str(tmp_path / "cache"))
    layout = ["--parallelism.tensor_parallel_degree", "4", "--parallelism.data_parallel_shard_degree", "1"]
    dense = ["--boost.linear", "full", "--boost.tp_scheme", "megatron"]
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), "--training.steps", "30",
         "--metrics.log_freq", "1", "--checkpoint.no-enable", "--validation.no-enable", *layout, *dense],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    norms = [float(v) for v in re.findall(r"grad_norm:\s+(\S+)", re.sub(r"\x1b\[[0-9;]*m", "", out))]
    assert len(norms) == 30 and all(math.isfinite(n) for n in norms), norms
    assert max(norms) < 20, norms


@pytest.mark.slow
@pytest.mark.compat  # torch 2.11's pipeline stage API as well as 2.13's
def test_a_dry_run_plays_the_pipelines_last_stage_where_dry_run_rank_says(tmp_path):
    """``DRY_RUN_RANK=2`` of pp 2 × tp 2: the fake process group's rank 2, which holds the last stage and
    the loss. It receives no activations on the fake group; filled with unit normals, its blocks compute
    at a model's scale, so the loss moves and the weights get gradients (with zeros, the loss would be
    ln(vocabulary) at every step and the gradient norm 0). A rank outside NGPU is refused before any
    work, naming the variable."""
    env = dict(os.environ, DRY_RUN="1", NGPU="4", PYTHON=sys.executable, BOOST_CACHE=str(tmp_path / "cache"))
    layout = ["--parallelism.pipeline_parallel_degree", "2", "--parallelism.tensor_parallel_degree", "2",
              "--parallelism.data_parallel_shard_degree", "1"]  # fmt: skip
    argv = ["./run_train.sh", "--job.dump_folder", str(tmp_path / "out"), "--training.steps", "4",
            "--metrics.log_freq", "1", "--checkpoint.no-enable", "--validation.no-enable", *layout]  # fmt: skip
    proc = subprocess.run(
        argv, cwd=ROOT, env=dict(env, DRY_RUN_RANK="2"), capture_output=True, text=True, timeout=600
    )
    out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert proc.returncode == 0, out[-3000:]
    assert "Dry run: rank 2 of 4 on a fake process group" in out
    losses = [float(v) for v in re.findall(r"(?<!validate )step:\s+\d+\s+loss:\s+(\S+)", out)]
    norms = [float(v) for v in re.findall(r"grad_norm:\s+(\S+)", out)]
    assert len(losses) == 4 and all(math.isfinite(v) and v > 0 for v in losses), losses
    assert len(set(losses)) == 4, losses  # it moves: its inputs are not zeros
    assert len(norms) == 4 and all(math.isfinite(n) and n > 0 for n in norms), norms
    assert re.search(r"comm/step: .*\(rank 2, one step", out), out[-3000:]

    argv[2] = str(tmp_path / "refused")  # --job.dump_folder
    refused = subprocess.run(
        argv, cwd=ROOT, env=dict(env, DRY_RUN_RANK="4"), capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and stderr_lines(refused.stderr) == [
        "BOOST config error: DRY_RUN_RANK = 4: must be one of the dry run's NGPU = 4 ranks, 0 to 3"
    ], refused.stderr[-2000:]
    assert not (tmp_path / "refused").exists()  # refused before any work


@pytest.mark.slow
def test_a_context_parallel_dry_run_logs_a_real_runs_loss(tmp_path):
    """Rank 0 of cp 2 on the fake process group holds half of each window's loss, and the fake all-reduce
    over the cp mesh adds nothing to it: counted over the whole window, its loss was half a real run's
    (4.06 against 8.15 at step 1) and its gradients smaller. It counts its own share
    (``context_parallel.counted_labels``): the loss is the real run's to what attention over one share
    of the keys changes (the real run's ranks see all of them)."""
    layout = ("--parallelism.context_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1")
    common = ("--training.seq_len", "64", "--training.local_batch_size", "4", "--metrics.log_freq", "1",
              "--checkpoint.no-enable", "--validation.no-enable", *layout)  # fmt: skip
    real_log = train(tmp_path, *common, ngpu=2, steps=1, folder="real")
    real = losses(real_log)
    env = dict(
        os.environ,
        DRY_RUN="1",
        NGPU="2",
        PYTHON=sys.executable,
        BOOST_CACHE=str(tmp_path.parent / "boost-cache"),
    )
    proc = subprocess.run(
        ["./run_train.sh", "--job.dump_folder", str(tmp_path / "dry"), "--training.steps", "1", *common],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert proc.returncode == 0, out[-3000:]
    dry = losses(out)
    # the whole window's attention against one share's: 0.07 % apart (8.1532 against 8.1476); halved, 50 %
    assert dry[1] == pytest.approx(real[1], rel=5e-3), (dry, real)
    norms = [float(re.search(r"grad_norm:\s+(\S+)", log).group(1)) for log in (out, real_log)]
    # one share's mean gradient, a smaller batch's: a larger norm than the window's (1.51 against 1.25), not
    # a smaller one (halved: 0.76)
    assert norms[1] <= norms[0] < 1.5 * norms[1], norms


@pytest.mark.slow
def test_ranks_compiling_only_the_loss_compile_their_own_graphs(tmp_path):
    """Only the loss compiled (``compile.components = ["loss"]``) under tp 2 × FSDP 2: rank 0 and then rank 2
    (another TP group) dry-run on one inductor cache. Under loss-parallel TP the loss's graph names this
    rank's TP group; were AOTAutograd's cache on, rank 2 would load rank 0's graph, keyed alike, and stop
    with "Could not resolve the process group registered under the name 11"
    (``torch_private.keep_ranks_compiled_graphs_apart``, applied whenever anything is compiled)."""
    env = dict(os.environ, DRY_RUN="1", NGPU="4", PYTHON=sys.executable, BOOST_CACHE=str(tmp_path / "cache"))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor-cache")
    args = ["--training.steps", "2", "--metrics.log_freq", "1", "--checkpoint.no-enable", "--validation.no-enable",
            "--training.local_batch_size", "2", "--training.seq_len", "64", "--parallelism.tensor_parallel_degree",
            "2", "--compile.enable", "--compile.components", "loss"]  # fmt: skip
    for rank in ("0", "2"):
        proc = subprocess.run(
            ["./run_train.sh", "--job.dump_folder", str(tmp_path / f"out{rank}"), *args],
            cwd=ROOT, env=dict(env, DRY_RUN_RANK=rank), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
        assert proc.returncode == 0, (rank, out[-3000:])
        assert len(re.findall(r"(?<!validate )step:\s+\d+\s+loss:", out)) == 2, (rank, out[-3000:])

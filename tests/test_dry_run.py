"""Dry runs at the real world size: one process as rank 0 of NGPU on torchtitan's fake process group,
through ``run_train.sh`` (``DRY_RUN=1``), the shipped TOML as is but for a short sequence, fp32, one step.

The world size reaches every part from ``NGPU``: torchtitan's mesh (the global batch is the local batch ×
the FSDP degree) and BOOST's checks (tp 4 at world size 1 would be refused). The memory check is the
issue-11 bound: peak RSS ≤ 1.5 × ``boost.plan``'s per-rank prediction + the process overhead.
"""

from __future__ import annotations

import math

import pytest

from bench.dry_run import dry_run

# 30B CoLA at 32 passes the same checks (bench/results/dry_run.md) but costs ~250 CPU-seconds (rank 0
# holds 775M parameters: FSDP2 gives it whole members of the batched up-projections, see
# boost.plan.fsdp_rank0_excess), over this suite's budget; 7B at 16 is ~50 CPU-seconds.
CASES = [("7B_cola", 16, [], 4)]


@pytest.mark.slow
@pytest.mark.parametrize("config,world_size,extra,fsdp", CASES, ids=[c[0] for c in CASES])
def test_cola_dry_runs_at_real_world_size(config, world_size, extra, fsdp):
    run = dry_run(config, world_size, steps=1, seq_len=16, extra=["--compile.no-enable", *extra], timeout=600)
    assert run.layout.startswith(f"tp4 pp1 fsdp{fsdp} btp"), run.layout
    assert run.global_batch == fsdp  # local batch 1 on each of the fsdp ranks: the mesh has NGPU ranks
    assert len(run.losses) == 1 and math.isfinite(run.losses[0]), run.losses
    assert run.within_prediction, run.row()

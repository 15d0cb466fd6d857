"""Replicas (``parallelism.data_parallel_replicate_degree > 1``) are FSDP2's HSDP at every shard degree, 1
included, never torchtitan's DDP: the trainer (``parallelize.fsdp_wraps``), the preflight
(``JobContext.fsdp_wraps``, which the CUDA-graphs rule reads) and the precision line say so alike.
tests/end_to_end/test_data_parallel_replicate.py trains these layouts against one process."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchtitan.distributed import ParallelDims

from torchtitan_ext.infra.parallelize import compute_precision, fsdp_wraps
from torchtitan_ext.preflight import check_job
from torchtitan_ext.preflight.job_rules import JobContext

CONFIG = str(Path(__file__).resolve().parents[2] / "train_configs" / "debug.toml")


@pytest.mark.parametrize(
    "tp,pp", [(1, 1), (2, 1), (1, 2)], ids=["replicate2", "replicate2×tp2", "replicate2×pp2"]
)
def test_replicas_are_wrapped_by_fsdp_at_a_shard_degree_of_one(tp: int, pp: int):
    ngpu = 2 * tp * pp
    layout = {
        "data_parallel_replicate_degree": 2,
        "data_parallel_shard_degree": 1,
        "tensor_parallel_degree": tp,
        "pipeline_parallel_degree": pp,
    }
    argv = [a for k, v in layout.items() for a in (f"--parallelism.{k}", str(v))]
    # debug.toml computes in float32, where no precision asks for FSDP: only the replicas do
    job = check_job(["--job.config_file", CONFIG, *argv], ngpu)
    assert job.training.mixed_precision_param == "float32"
    assert JobContext(job, ngpu).fsdp_wraps
    dims = ParallelDims(dp_replicate=2, dp_shard=1, cp=1, tp=tp, pp=pp, ep=1, etp=1, world_size=ngpu)
    assert fsdp_wraps(dims, "float32")
    # FSDP2's policy casts the replicas' parameters, at any TP/PP beside them
    assert compute_precision(dims, "bfloat16") == "bfloat16 (FSDP2, shard degree 1)"

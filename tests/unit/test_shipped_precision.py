"""Every shipped TOML computes in bf16 at the NGPU its header names: none trains in fp32 silently.

The layout comes from the TOML through the preflight's own parse at that world size, the decision from
``compute_precision``, the function ``parallelize_boost`` applies (the bf16 rows of the feature matrix
train through it: tests/end_to_end/test_feature_matrix.py)."""

from __future__ import annotations

import re

import pytest
from torchtitan.distributed import ParallelDims

from tests.trainer import ROOT
from torchtitan_ext.infra.parallelize import compute_precision
from torchtitan_ext.preflight import check_job

TOMLS = sorted(p for p in (ROOT / "train_configs").glob("*.toml") if p.stem != "debug")
TOMLS += sorted((ROOT / "train_configs" / "loro").glob("*.toml"))  # the LORO authors' recipes


def _header_ngpu(path) -> int:
    return int(re.search(r"^#\s+NGPU=(\d+) CONFIG_FILE=", path.read_text(), re.M).group(1))


@pytest.mark.parametrize(
    "path", TOMLS, ids=lambda p: p.relative_to(ROOT / "train_configs").with_suffix("").as_posix()
)
def test_shipped_toml_computes_in_bf16_at_its_header_ngpu(path):
    ngpu = _header_ngpu(path)
    job = check_job(["--job.config_file", str(path)], world_size=ngpu)
    p = job.parallelism
    dims = ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree,
        dp_shard=p.data_parallel_shard_degree,
        cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree,
        pp=p.pipeline_parallel_degree,
        ep=1,
        etp=1,
        world_size=ngpu,
    )
    assert job.training.mixed_precision_param == "bfloat16"
    assert compute_precision(dims, job.training.mixed_precision_param).startswith("bfloat16"), (
        path.stem,
        dims,
    )


def test_tp_without_fsdp_would_have_been_fp32_under_torchtitan_alone():
    # the case the shard-degree-1 wrap exists for: torchtitan's maybe_enable_amp turns mixed precision off
    from torchtitan.distributed.utils import maybe_enable_amp

    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=4, pp=1, ep=1, etp=1, world_size=4)
    assert maybe_enable_amp(dims, "bfloat16", "cpu").__class__.__name__ == "nullcontext"
    assert compute_precision(dims, "bfloat16") == "bfloat16 (FSDP2, shard degree 1)"

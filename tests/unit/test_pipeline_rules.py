"""The pipeline rules hold to torch's own schedules: the stage and micro-batch counts their constructors
accept, the schedules that refuse a compiled stage, and the split backward refused where torch computes it
wrong (torch 2.11), by the preflight and by the launcher's check."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchtitan_ext.preflight import ConfigError, check_job

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "train_configs" / "debug.toml")


def test_pipeline_rules_accept_exactly_what_torchs_schedules_accept():
    """boost.training.rules' stage and micro-batch rules against the real schedule constructors of
    torch.distributed.pipelining, at pp 2 and 4, 1 to 3 stages per rank and up to 3 micro-batches per
    stage (fake process group: no communication)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from boost.training.rules import pipeline_microbatch_problem, pipeline_stages_problem

    disagreements, tried = [], 0
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        for name in (
            "1F1B",
            "GPipe",
            "Interleaved1F1B",
            "LoopedBFS",
            "InterleavedZeroBubble",
            "ZBVZeroBubble",
            "DualPipeV",
        ):
            schedule = get_schedule_class(name)
            multi_stage = issubclass(schedule, PipelineScheduleMulti)
            for pp in (2, 4):
                group = dist.new_group(list(range(pp)))
                for per_rank in (2, 3) if multi_stage else (1,):
                    stages = pp * per_rank
                    v_shape = name in ("ZBVZeroBubble", "DualPipeV") and per_rank == 2
                    rank0_stages = [0, stages - 1] if v_shape else list(range(0, stages, pp))
                    for n in range(1, 3 * stages + 2):
                        built = [
                            PipelineStage(torch.nn.Linear(2, 2), i, stages, torch.device("cpu"), group=group)
                            for i in rank0_stages
                        ]
                        try:
                            schedule(
                                built if multi_stage else built[0],
                                n_microbatches=n,
                                loss_fn=lambda y, t: y.sum(),
                            )
                            accepted = True
                        except ValueError:
                            accepted = False
                        problem = pipeline_stages_problem(
                            name, multi_stage, pp, stages
                        ) or pipeline_microbatch_problem(name, n, 1, pp, stages)
                        tried += 1
                        if accepted != (problem is None):
                            disagreements.append((name, pp, per_rank, n, accepted, problem))
    finally:
        dist.destroy_process_group()
    assert tried > 300 and not disagreements, disagreements


def test_split_backward_rule_is_torchs_refusal_of_compiled_stages():
    """``rules.PIPELINE_SPLIT_BACKWARD`` (refused with a compiled model) names exactly the schedules whose
    constructors refuse a compiled stage module (fake process group: no communication)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from boost.training.rules import PIPELINE_SPLIT_BACKWARD, PIPELINE_TWO_STAGES_PER_RANK

    refused = set()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        for name in ("1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", *PIPELINE_SPLIT_BACKWARD):
            schedule = get_schedule_class(name)
            multi = issubclass(schedule, PipelineScheduleMulti)
            indices = ([0, 3] if name.lower() in PIPELINE_TWO_STAGES_PER_RANK else [0, 2]) if multi else [0]
            stages = [
                PipelineStage(torch.compile(torch.nn.Linear(2, 2)), i, 4 if multi else 2, torch.device("cpu"))
                for i in indices
            ]
            try:
                schedule(stages if multi else stages[0], n_microbatches=4, loss_fn=lambda y, t: y.sum())
            except RuntimeError as e:
                assert "torch.compile" in str(e), e
                refused.add(name.lower())
    finally:
        dist.destroy_process_group()
    assert refused == set(PIPELINE_SPLIT_BACKWARD)


@pytest.mark.compat
def test_a_split_backward_schedule_is_refused_where_torch_computes_it_wrong():
    """A zero-bubble schedule runs where torch's split backward is exact (the 2.13 stage API) and is refused,
    before any process starts, on the older one (torch 2.11: the compatibility tier)."""
    from torchtitan_ext.torch_private import EXACT_SPLIT_BACKWARD

    argv = [
        "--job.config_file",
        str(ROOT / "train_configs" / "debug.toml"),
        *("--parallelism.tensor_parallel_degree", "2", "--parallelism.pipeline_parallel_degree", "2"),
        *("--parallelism.data_parallel_shard_degree", "1"),
        *("--parallelism.pipeline_parallel_schedule", "InterleavedZeroBubble"),
        *("--training.mixed_precision_param", "float32"),
    ]
    if EXACT_SPLIT_BACKWARD:
        check_job(argv, 4)
    else:
        with pytest.raises(ConfigError, match=r"parallelism.pipeline_parallel_schedule .*before 2.13"):
            check_job(argv, 4)


def test_the_launcher_refuses_a_split_backward_schedule_where_torch_computes_it_wrong(tmp_path, monkeypatch):
    """The launcher's check (``preflight``) asks this torch what the ranks would, before any process starts:
    torch 2.11's split backward (``EXACT_SPLIT_BACKWARD`` False there) refuses a zero-bubble schedule."""
    from torchtitan_ext import torch_private
    from torchtitan_ext.preflight import preflight

    argv = [
        *("--job.config_file", CONFIG, "--job.dump_folder", str(tmp_path)),
        *("--parallelism.pipeline_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1"),
        *("--parallelism.pipeline_parallel_schedule", "InterleavedZeroBubble"),
    ]
    if torch_private.EXACT_SPLIT_BACKWARD:
        preflight(argv, 2)
    monkeypatch.setattr(torch_private, "EXACT_SPLIT_BACKWARD", False)  # torch 2.11's stage API
    with pytest.raises(
        ConfigError, match=r"^parallelism.pipeline_parallel_schedule = 'InterleavedZeroBubble'"
    ):
        preflight(argv, 2)

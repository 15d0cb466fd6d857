"""``pipeline_boost`` forks torchtitan 0.2.2's split (``pipeline_module_split``) so as to build BOOST's own
stages once: the fork must give every pipeline rank the stages and the modules torchtitan's would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore
from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part, pipeline_module_split

from boost.training.model import ModelArgs, Transformer
from torchtitan_ext.infra.pipeline import _microbatch_shapes, _model_part, _stage_indices

N_LAYERS = 8


@pytest.mark.parametrize(
    "schedule,stages_per_rank,v_shaped",
    [
        ("1F1B", 1, False),
        ("Interleaved1F1B", 2, False),
        ("Interleaved1F1B", 3, False),
        ("ZBVZeroBubble", 2, True),
    ],
)
@pytest.mark.parametrize("pp", [2, 3])
def test_fork_splits_as_torchtitan_does(schedule: str, stages_per_rank: int, v_shaped: bool, pp: int):
    num_stages = pp * stages_per_rank
    module_names = generate_llm_fqn_per_model_part(num_stages, N_LAYERS, 1, 1)
    with torch.device("meta"):
        model = Transformer(ModelArgs.from_flavor("debug", linear="cola", vocab_size=512, n_layers=N_LAYERS))
    for pp_rank in range(pp):
        # a fake process group as this rank: torchtitan's split reads the rank from the mesh
        dist.init_process_group("fake", store=FakeStore(), rank=pp_rank, world_size=pp)
        try:
            mesh = init_device_mesh("cpu", (pp,), mesh_dim_names=("pp",))
            stages, parts = pipeline_module_split(model, mesh, schedule, torch.device("cpu"), module_names)
        finally:
            dist.destroy_process_group()
        indices = _stage_indices(pp_rank, pp, num_stages, v_shaped)
        assert indices == tuple(stage.stage_index for stage in stages), (pp_rank, indices)
        for index, theirs in zip(indices, parts, strict=True):
            ours = _model_part(model, module_names[index])
            assert list(ours.state_dict()) == list(theirs.state_dict()), (pp_rank, index)
            assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]


def test_a_lax_carry_crosses_a_stage_whole_or_as_a_ranks_rows():
    """What a pipeline stage declares for each LaX latent it hands on (``torchtitan_ext.infra.pipeline``): the
    whole ``[b, s, w]``, or under btp's sequence parallelism this rank's rows ``[b·s/t, w]`` of the flat one."""
    from boost.training.rules import SCHEMES

    btp, vanilla = SCHEMES["btp"], SCHEMES["vanilla"]
    assert btp.carry_shape(2, 16, 24, 4, sequence_parallel=False) == (2, 16, 24)
    assert btp.carry_shape(2, 16, 24, 4, sequence_parallel=True) == (8, 24)
    assert btp.carry_shape(2, 16, 24, 1, sequence_parallel=True) == (2, 16, 24)  # one rank: nothing split
    assert vanilla.carry_shape(2, 16, 24, 4, sequence_parallel=True) == (2, 16, 24)  # no plan: whole


@pytest.mark.parametrize("num_stages", [4, 6])
def test_lax_carries_cross_a_stage_boundary_only_between_blocks(num_stages: int):
    """Chained, the parts of a LaX model compute the whole model, each handing on the carries exactly where
    the stages declare them (``carry_crosses``): not out of an embedding alone (6 stages of 4 blocks: it has
    made none), nor into a head that holds no block (it would not read them)."""
    from boost.training.model.model import carry_keys
    from torchtitan_ext.infra.pipeline import carry_crosses

    torch.manual_seed(0)
    model = Transformer(ModelArgs.from_flavor("debug", linear="lax", vocab_size=512, n_layers=4)).double()
    model.init_weights()
    names = generate_llm_fqn_per_model_part(num_stages, 4, 1, 1)
    assert names[-1] == ["norm", "output"] and (names[0] == ["tok_embeddings"]) == (num_stages == 6)
    tokens = torch.randint(0, 512, (2, 8))
    carried = len(carry_keys(model.model_args))
    out: tuple = (tokens,)
    for boundary, part_names in enumerate(names[:-1], start=1):
        out = _model_part(model, part_names)(*out)
        out = out if isinstance(out, tuple) else (out,)
        assert len(out) == 1 + (carried if carry_crosses(names, boundary, 4) else 0), (boundary, len(out))
    logits = _model_part(model, names[-1])(*out)
    torch.testing.assert_close(logits, model(tokens), rtol=1e-12, atol=1e-12)


def test_stages_named_by_hand_are_held_to_the_splits_torchtitan_makes():
    """``rules.module_split_problem`` (the preflight's check of ``parallelism.module_fqns_per_model_part``)
    accepts every split torchtitan's ``generate_llm_fqn_per_model_part`` makes, and refuses a split that
    leaves a block out, names one twice, or names one the model lacks: its names are the model's own."""
    from boost.training.rules import model_part_names, module_split_problem

    with torch.device("meta"):
        model = Transformer(ModelArgs.from_flavor("debug", linear="cola", vocab_size=512, n_layers=N_LAYERS))
    top = [name for name, _ in model.named_children()]
    assert model_part_names(N_LAYERS) == [
        f"layers.{key}" if name == "layers" else name
        for name in top
        for key in (model.layers.keys() if name == "layers" else [None])
    ]
    made = 0
    for n_layers in (1, 2, 4, N_LAYERS):
        for num_stages in range(1, n_layers + 3):
            for first_less, last_less in ((1, 1), (0, 0), (2, 1), (1, 2)):
                try:
                    names = generate_llm_fqn_per_model_part(num_stages, n_layers, first_less, last_less)
                except ValueError:
                    continue
                made += 1
                assert module_split_problem(names, n_layers) is None, (n_layers, names)
    assert made > 50
    split = generate_llm_fqn_per_model_part(2, N_LAYERS, 1, 1)
    assert "leaves out layers.3" in module_split_problem([split[0][:-1], split[1]], N_LAYERS)
    assert "names layers.3 in more than one stage" in module_split_problem(
        [split[0], ["layers.3", *split[1]]], 8
    )
    assert "'layers.8', which the model does not have" in module_split_problem(
        [split[0], [*split[1], "layers.8"]], 8
    )


@pytest.mark.parametrize("cp", [1, 2])
def test_a_stage_s_shapes_are_a_micro_batch_of_a_cp_rank_s_share_in_training_and_validation(cp):
    # 8 windows a step in micro-batches of 2: 4 micro-batches; validation's 12 windows split into the same 4
    # (3 each); a CP rank holds 1/cp of each sequence, validation's (seq 96) as training's (seq 64)
    job = SimpleNamespace(
        training=SimpleNamespace(local_batch_size=8, seq_len=64),
        validation=SimpleNamespace(enable=True, local_batch_size=12, seq_len=96),
        parallelism=SimpleNamespace(pipeline_parallel_microbatch_size=2, context_parallel_degree=cp),
    )
    assert _microbatch_shapes(job) == ((2, 64 // cp), (3, 96 // cp))
    job.validation.enable = False
    assert _microbatch_shapes(job) == ((2, 64 // cp), (2, 64 // cp))

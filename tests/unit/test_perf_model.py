"""The analytic performance model against the reference paper, and the layout planner.

No timing here: calibration (``calibrate_cpu``, ``fit_a100``) is run by hand, the tests use the
stored constants.
"""

from __future__ import annotations

import dataclasses
import itertools
import runpy
from pathlib import Path

import pytest

from boost.planning.comm_volume import context_parallel_layer, per_layer
from boost.planning.layout_planner import enumerate_layouts
from boost.planning.layout_planner import main as plan_main
from boost.planning.perf_model import (
    A100,
    H100,
    TrainingLayout,
    advise_micro_batch,
    args_params,
    block_gemms,
    collective_time,
    gemm_time,
    layer_times,
    memory_per_gpu,
    model_args,
    paper_table,
    predict_step_time,
    usable_bytes,
)
from boost.planning.perf_model.peak_memory import ACTIVATION_CALIBRATION
from boost.planning.perf_model.step_time import LOWRANK_RECOMPUTED
from boost.training import rules
from boost.training.model import flops_per_token

# Cells the model cannot bring within 15% with one shared set of physical constants (the minimax
# fit's optimum is ≈17.7%): the vanilla column at 1B/TP1, 3B/TP2 and 13B/TP4xPP2. No single wrong
# term explains them: the paper's vanilla-minus-BOOST time per layer grows 7B→13B by 0.97× where
# every term of vanilla's excess (replicated attention and elementwise, d-wide all-reduces) grows
# with d by ≈1.25×, whatever the constants; see docs/perf_model.md, "Against the paper".
KNOWN_MISSES = {("1B", "vanilla"), ("3B", "vanilla"), ("13B", "vanilla")}
PAPER_RUN = dict(hardware="a100", micro_batch=4, seq_len=4096)  # the reference paper's machine and batch


def test_paper_table_within_15_percent():
    rows = [r for r in paper_table() if "comm" not in r["scheme"]]
    assert len(rows) == 15
    misses = {(r["flavor"], r["scheme"]) for r in rows if abs(r["rel_error"]) > 0.15}
    assert misses <= KNOWN_MISSES, f"new misses: {misses - KNOWN_MISSES}"
    assert len(misses) <= 3
    # the misses are near misses, not a different regime
    assert all(abs(r["rel_error"]) < 0.20 for r in rows)


def test_module_entry_point_prints_the_table(capsys):
    # `python -m boost.planning.perf_model` (README, docs/perf_model.md): header, 15 step-time rows, 3 comm rows
    runpy.run_module("boost.planning.perf_model", run_name="__main__")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["layout", "scheme", "predicted", "paper", "error"]
    assert len(lines) == 1 + 15 + 3
    assert lines[1].split()[:3] == ["1B", "TP1", "megatron"]
    # the table docs/perf_model.md quotes is this output (a change of the model regenerates it there)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "perf_model.md").read_text()
    assert f"$ python -m boost.planning.perf_model\n{out}```" in doc


def test_paper_comm_row_within_15_percent():
    rows = [r for r in paper_table() if "comm" in r["scheme"]]
    assert len(rows) == 3
    for r in rows:
        assert abs(r["rel_error"]) < 0.15, r
        assert r["gib"] == pytest.approx(r["reported_gib"], rel=0.06), r


@pytest.mark.parametrize("flavor,tp", [("3B", 2), ("7B", 4), ("13B", 4), ("30B", 8)])
def test_btp_fastest_with_tensor_parallelism(flavor, tp):
    times = {s: predict_step_time(flavor, s, tp, 1, **PAPER_RUN) for s in ("btp", "vanilla", "megatron")}
    assert times["btp"] < times["vanilla"] and times["btp"] < times["megatron"], times


def test_collective_time_scales_with_bytes():
    small = {"all_reduce": (4, 10_000_000)}
    large = {"all_reduce": (4, 20_000_000)}
    t_small, t_large = collective_time(small, 4, A100), collective_time(large, 4, A100)
    # latency is the same, the bandwidth term doubles exactly
    assert t_large - t_small == pytest.approx(1.5 * 10_000_000 * 2 / A100.bus_bw)
    assert collective_time(small, 1, A100) == 0.0
    # ring factors: all-reduce 2(t-1)/t, all-gather (t-1)/t
    no_latency = dataclasses.replace(A100, latency=0.0)
    ar = collective_time({"all_reduce": (1, 1 << 20)}, 8, no_latency)
    ag = collective_time({"all_gather": (1, 1 << 20)}, 8, no_latency)
    assert ar == pytest.approx(2 * ag)


def test_comm_grows_step_time_in_vanilla_more_than_btp():
    args = model_args("7B", "vanilla")
    vanilla_fwd = per_layer(args, "vanilla", 4 * 4096)["forward"]
    btp_fwd = per_layer(model_args("7B", "btp"), "btp", 4 * 4096)["forward"]
    assert collective_time(vanilla_fwd, 4, A100) > 4 * collective_time(btp_fwd, 4, A100)


def test_pipeline_bubble_and_checkpointing_cost():
    one = predict_step_time("13B", "btp", 4, 2, **PAPER_RUN, num_microbatches=1)
    many = predict_step_time("13B", "btp", 4, 2, **PAPER_RUN, num_microbatches=16)
    # per micro-batch: (m + p - 1)/m falls from 2 towards 1
    assert many / 16 < one
    none = predict_step_time("7B", "btp", 4, 1, **PAPER_RUN, activation_checkpoint="none")
    lowrank = predict_step_time("7B", "btp", 4, 1, **PAPER_RUN, activation_checkpoint="lowrank")
    full = predict_step_time("7B", "btp", 4, 1, **PAPER_RUN, activation_checkpoint="full")
    assert none < lowrank < full  # full AC also repeats the forward collectives


@pytest.mark.parametrize(
    "scheme,sequence_parallel,width",
    [
        ("btp", False, 5120 // 4),
        ("vanilla", False, 5120),
        ("megatron", False, 5120),
        ("megatron", True, 5120 // 4),
    ],
)
def test_pipeline_transfer_is_the_residual_a_rank_holds(scheme, sequence_parallel, width):
    # 13B (d = 5120) at TP4 × PP2, one micro-batch: the boundary carries the residual as a rank holds it,
    # d/t under btp, d under vanilla and megatron, and s/t × d under megatron's sequence parallel; 2 bytes
    # each, forward and its gradient back, over the m + p - 1 = 2 pipeline ticks
    parts = predict_step_time(
        "13B",
        scheme,
        4,
        2,
        **PAPER_RUN,
        num_microbatches=1,
        sequence_parallel=sequence_parallel,
        breakdown=True,
    )
    assert parts["p2p"] == pytest.approx(2 * 2 * (4 * 4096 * width) * 2 / A100.bus_bw)


def test_pipeline_transfer_leaves_the_node_where_the_stages_are_a_node_apart():
    """A stage's neighbour is tp·dp·cp ranks away in torchtitan's mesh (pp outermost): tp 4 × pp 2 fills one
    node of 8 at dp 1, where the boundary runs on NVLink; at dp 2 the neighbours are 8 ranks apart, on another
    node, and the transfer runs at the inter-node bandwidth (``Hardware.group_bw``, FSDP's and CP's rule)."""
    run = dict(**PAPER_RUN, num_microbatches=1, breakdown=True)
    boundary = 2 * 2 * (4 * 4096 * 5120 // 4) * 2  # btp's d/t residual, there and back, 2 ticks, 2 bytes
    inside = predict_step_time("13B", "btp", 4, 2, dp=1, **run)
    across = predict_step_time("13B", "btp", 4, 2, dp=2, **run)
    cp_across = predict_step_time("13B", "btp", 4, 2, dp=1, cp=2, **run)
    assert inside["p2p"] == pytest.approx(boundary / A100.bus_bw)
    assert across["p2p"] == pytest.approx(boundary / A100.inter_bw)
    assert cp_across["p2p"] == pytest.approx(boundary / 2 / A100.inter_bw)  # each rank holds s/cp tokens


def test_unknown_inputs_raise():
    with pytest.raises(ValueError, match="unknown hardware"):
        predict_step_time("7B", "btp", 4, 1, hardware="tpu", micro_batch=4, seq_len=4096)
    with pytest.raises(ValueError, match="unknown tp scheme"):
        predict_step_time("7B", "zigzag", 4, 1, **PAPER_RUN)
    with pytest.raises(ValueError, match="unknown flavor"):
        predict_step_time("9B", "btp", 4, 1, **PAPER_RUN)


def test_planner_7b_on_16_a100():
    layouts = enumerate_layouts("7B", 16, "a100")
    best = layouts[0]
    assert best.tp * best.pp * best.cp * best.dp == 16 and best.cp == 1  # 4k windows fit: no CP
    assert best.memory_bytes <= A100.memory_bytes
    assert best.tp <= 8 and 32 % best.tp == 0
    assert all(a.tokens_per_s >= b.tokens_per_s for a, b in zip(layouts, layouts[1:]))
    overrides = best.overrides("cola", 4, 4096)
    assert f"--parallelism.tensor_parallel_degree {best.tp}" in overrides
    assert f"--parallelism.data_parallel_shard_degree {best.dp}" in overrides
    assert f"--boost.tp_scheme {best.scheme}" in overrides
    assert f"--boost.activation_checkpoint {best.ac}" in overrides


def test_planner_cli_and_errors(capsys):
    assert plan_main(["--flavor", "7B", "--gpus", "16", "--hardware", "a100", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "best layout overrides" in out and "--boost.tp_scheme" in out
    with pytest.raises(ValueError, match="no layout"):
        enumerate_layouts("30B", 1, "a100")
    with pytest.raises(ValueError, match="unknown flavor"):
        enumerate_layouts("9B", 16, "a100")
    with pytest.raises(ValueError, match="unknown hardware"):
        enumerate_layouts("7B", 16, "tpu")
    assert plan_main(["--flavor", "30B", "--gpus", "1"]) == 2
    assert "no layout" in capsys.readouterr().err


def test_planner_refuses_non_positive_sizes_naming_the_argument(capsys):
    for flag in ("--micro-batch", "--seq-len", "--gpus"):
        with pytest.raises(SystemExit) as exit_info:
            plan_main(["--flavor", "7B", "--gpus", "16", flag, "0"])
        assert exit_info.value.code == 2
        assert f"argument {flag}: 0 is not a positive integer (1 or more)" in capsys.readouterr().err


# (flavor, gpus, linear): a shipped flavor TOML and the planner's layouts for it (their overrides set the kind)
PLANNED = [("1B", 8, "svd"), ("13B", 32, "lax"), ("30B", 32, "full")]


def _accepted(flavor: str, gpus: int, linear: str, overrides: str):
    from torchtitan_ext.preflight import check_job

    return check_job(
        ["--job.config_file", f"train_configs/{flavor}.toml", *overrides.split()], world_size=gpus
    )


def test_lax_costs_its_gates_norms_and_carry_beside_cola():
    """The gate GEMMs and the LayerNorm run on whole latents; under PP the carry crosses the stage boundary."""
    cola, lax = (model_args("7B", "btp", linear=kind) for kind in ("cola", "lax"))
    assert lax.lax_gate == "tensorized"
    for pp in (1, 2):
        run = dict(hardware="a100", micro_batch=4, seq_len=4096, dp=1, activation_checkpoint="lowrank")
        c = predict_step_time("7B", "btp", 4, pp, **run, linear="cola", breakdown=True)
        x = predict_step_time("7B", "btp", 4, pp, **run, linear="lax", breakdown=True)
        assert (
            x["gemm_fwd"] > c["gemm_fwd"] and x["elem_fwd"] > c["elem_fwd"] and x["comm_fwd"] == c["comm_fwd"]
        )
        assert (x["p2p"] > c["p2p"]) == (pp > 1)
        assert x["total"] > c["total"]
    assert flops_per_token(lax, 4096) > flops_per_token(cola, 4096)


def test_every_printed_layout_is_accepted_by_validation(capsys):
    # the printed best layout's overrides, exactly as printed
    for flavor, gpus, linear in PLANNED:
        assert plan_main(["--flavor", flavor, "--gpus", str(gpus), "--linear", linear]) == 0
        printed = capsys.readouterr().out.split("best layout overrides:\n")[1].strip()
        _accepted(flavor, gpus, linear, printed)
        if linear == "lax":  # LaX's carry crosses pipeline stages: the planner offers PP layouts for it
            assert any(l.pp > 1 for l in enumerate_layouts(flavor, gpus, "a100", linear=linear))
    # and every row of the 7B table (btp and vanilla, with and without PP, each AC mode)
    for layout in enumerate_layouts("7B", 16, "a100", linear="cola")[:10]:
        job = _accepted("7B", 16, "cola", layout.overrides("cola", 4, 4096))
        assert (
            job.parallelism.tensor_parallel_degree,
            job.parallelism.pipeline_parallel_degree,
            job.boost.tp_scheme,
            job.boost.activation_checkpoint,
            job.boost.sequence_parallel,
        ) == (layout.tp, layout.pp, layout.scheme, layout.ac, layout.sp)
        assert job.boost.group_linears == (layout.scheme != "vanilla")


# The reviewer's refused best layouts: --num-microbatches below pp (1F1B needs one a stage), and m = pp = 6 not
# dividing the TOMLs' validation.local_batch_size (8)
PP_REPROS = [
    (["--flavor", "1B", "--gpus", "32", "--num-microbatches", "1"], "1B", 32),
    (["--flavor", "30B", "--gpus", "6", "--hardware", "h200"], "30B", 6),
]
# flavors × GPU counts × options, pipeline rows among them (--num-microbatches 3 is below pp 4 and 6)
SWEEP_OPTIONS = [
    dict(seq_len=256, micro_batch=1, linear="full"),
    dict(seq_len=256, micro_batch=1, linear="full", num_microbatches=1),
    dict(seq_len=4096, micro_batch=4, linear="lax", num_microbatches=3),
    dict(seq_len=16384, micro_batch=1, linear="cola"),
]


def test_every_planned_layout_passes_the_preflight_pipelines_included(capsys):
    """Every layout the planner lists, PP rows included, is one the preflight takes on the shipped TOML: its
    pipeline rules (a micro-batch per 1F1B stage, validation splitting into the micro-batches) included."""
    from torchtitan_ext.preflight.check import check_values
    from torchtitan_ext.preflight.read import read_job

    for argv, flavor, gpus in PP_REPROS:
        argv = [*argv, "--seq-len", "256", "--micro-batch", "1", "--linear", "full"]
        assert plan_main(argv) == 0
        printed = capsys.readouterr().out.split("best layout overrides:\n")[1].strip()
        _accepted(flavor, gpus, "full", printed)
    checked = pipelined = 0
    for flavor, gpus, hardware in itertools.product(("1B", "13B", "30B"), (6, 8, 32), ("a100", "h200")):
        for options in SWEEP_OPTIONS:
            try:
                layouts = enumerate_layouts(flavor, gpus, hardware, **options)
            except ValueError:  # nothing fits
                continue
            for layout in layouts[::3]:
                overrides = layout.overrides(options["linear"], options["micro_batch"], options["seq_len"])
                job = read_job(["--job.config_file", f"train_configs/{flavor}.toml", *overrides.split()])
                check_values(job, gpus)  # raises ConfigError naming the refused field
                checked += 1
                pipelined += layout.pp > 1
                assert layout.pp == 1 or layout.num_microbatches >= layout.pp
    assert checked > 1000 and pipelined > 500


def test_the_printed_overrides_run_at_the_memory_planned(capsys):
    """The overrides set the FSDP reshard policy each layout was sized at: the 1B/3B/7B TOMLs' "never" holds
    every block's weights (3B@8, 40 GiB, micro-batch 8: the best layout's 35.3 GiB sized at "default" is
    37.7 GiB under "never", over the 36 usable). "never" is planned where its saved all-gathers show."""
    from torchtitan_ext.preflight.read import read_job

    assert plan_main(["--flavor", "3B", "--gpus", "8", "--memory-gib", "40", "--micro-batch", "8"]) == 0
    out = capsys.readouterr().out
    printed = out.split("best layout overrides:\n")[1].strip()
    cases = [("3B", 8, dict(memory_bytes=40 * 2**30, micro_batch=8), printed)]
    cases += [("1B", 32, dict(seq_len=256, micro_batch=1), None), ("7B", 16, {}, None)]
    policies = set()
    for flavor, gpus, options, overrides in cases:
        layouts = enumerate_layouts(flavor, gpus, "a100", **options)
        micro_batch, seq_len = options.get("micro_batch", 4), options.get("seq_len", 4096)
        for layout in layouts if overrides is None else layouts[:1]:
            argv = overrides or layout.overrides("cola", micro_batch, seq_len)
            job = read_job(["--job.config_file", f"train_configs/{flavor}.toml", *argv.split()]).values
            policy = job.parallelism.fsdp_reshard_after_forward
            policies.add(policy)
            run = dict(micro_batch=micro_batch, seq_len=seq_len, num_microbatches=layout.num_microbatches)
            assert memory_per_gpu(
                flavor,
                job.boost.tp_scheme,
                job.parallelism.tensor_parallel_degree,
                job.parallelism.pipeline_parallel_degree,
                job.parallelism.data_parallel_shard_degree,
                job.boost.activation_checkpoint,
                compiled=True,
                cp=job.parallelism.context_parallel_degree,
                sequence_parallel=job.boost.sequence_parallel,
                reshard_after_forward=rules.reshards_after_forward(policy, layout.pp > 1),
                **run,
            ) == pytest.approx(layout.memory_bytes)
    assert policies == {"default", "never"}


def test_context_parallelism_in_the_step_time_memory_and_planner():
    kw = dict(hardware="h100", micro_batch=1, seq_len=32768, activation_checkpoint="lowrank")
    one = predict_step_time("7B", "btp", 4, 1, breakdown=True, **kw)
    four = predict_step_time("7B", "btp", 4, 1, cp=4, breakdown=True, **kw)
    # a rank's queries are a quarter of each window, over all of its keys: a quarter of the attention, with
    # the ring's 4 kernels and their merges on top
    assert (
        one["attn_fwd"] / 4 < four["attn_fwd"] < one["attn_fwd"] / 2
        and four["gemm_fwd"] < one["gemm_fwd"] / 2
    )
    assert one["cp_fwd"] == one["cp_bwd"] == 0 < four["cp_fwd"] < four["cp_bwd"]
    ring = predict_step_time("7B", "btp", 4, 1, cp=4, **kw)
    gathered = predict_step_time("7B", "btp", 4, 1, cp=4, attn_mask_type="block_causal", **kw)
    assert gathered > ring  # SDPA's boolean mask: every score, no causal half skipped
    mem = dict(micro_batch=1, seq_len=32768, num_microbatches=1, compiled=True, breakdown=True)
    m1 = memory_per_gpu("7B", "btp", 4, 1, 4, "lowrank", **mem)
    m4 = memory_per_gpu("7B", "btp", 4, 1, 1, "lowrank", cp=4, **mem)
    assert m4["states"] == m1["states"]  # FSDP over dp × cp: 4 × 1 = 1 × 4 ranks
    assert m4["logits"] == m1["logits"] / 4 and m4["activations"] < m1["activations"] / 2
    masked = memory_per_gpu("7B", "btp", 4, 1, 1, "lowrank", cp=4, attn_mask_type="block_causal", **mem)
    assert (
        masked["activations"] > m4["activations"] + 32768 * 8192
    )  # the mask rows, b·(s/cp)·s bytes at least
    # the planner keeps whole windows where they fit, and shards them where nothing else fits
    assert enumerate_layouts("7B", 16, "h100")[0].cp == 1
    long = enumerate_layouts("7B", 16, "h100", seq_len=131072, micro_batch=4)
    assert all(l.cp > 1 for l in long) and "--parallelism.context_parallel_degree" in long[0].overrides(
        "cola", 4, 131072
    )
    assert all(l.memory_bytes <= usable_bytes(H100.memory_bytes) for l in long)


@pytest.mark.parametrize("linear", ["cola", "lax"])
def test_btp_sequence_parallelism_moves_the_same_bytes_and_splits_the_latent_work(linear):
    """Each all-reduce becomes a reduce-scatter and an all-gather, the same bytes on a ring (LaX adds its
    norm's and gate's gradient sums); σ and the crossing then run on a rank's share of the tokens."""
    args = model_args("7B", "btp", linear=linear)
    whole, rows = (per_layer(args, "btp", 16384, sequence_parallel=sp) for sp in (False, True))
    # the reduce-scatters carry what the all-reduces of their direction did; the all-gathers what those of
    # the other direction did (the online norm's statistic column: scattered going forward, gathered back)
    for direction, other in (("forward", "backward"), ("backward", "forward")):
        assert rows[direction]["reduce_scatter"] == whole[direction]["all_reduce"]
        assert rows[direction]["all_gather"][1] == whole[other]["all_reduce"][1]
    summed = rows["backward"].get("all_reduce", (0, 0))
    # one sum a bottleneck (q/k/v, o, gate/up, down) of 7 members' norm (2r) and tensorized gate (32² + 32²)
    assert summed == ((4, 7 * (2 * 1024 + 2 * 32**2)) if linear == "lax" else (0, 0))
    run = dict(
        hardware="h100", micro_batch=4, seq_len=4096, dp=4, activation_checkpoint="lowrank", linear=linear
    )
    split = predict_step_time("7B", "btp", 4, 1, sequence_parallel=True, breakdown=True, **run)
    kept = predict_step_time("7B", "btp", 4, 1, sequence_parallel=False, breakdown=True, **run)
    assert split["total"] < kept["total"]
    # at TP 1 there is nothing to split
    assert predict_step_time("7B", "btp", 1, 1, sequence_parallel=True, **run) == predict_step_time(
        "7B", "btp", 1, 1, **run
    )


def test_the_planner_weighs_sequence_parallelism_where_a_scheme_has_a_plan():
    """Each layout of a scheme with a plan (btp, megatron) at TP > 1 comes with and without
    ``boost.sequence_parallel``; vanilla and TP 1 never; and a layout that fits only with it is proposed with it."""
    for linear in ("cola", "full"):
        layouts = enumerate_layouts("7B", 16, "h100", linear=linear)
        split = {(l.scheme, l.tp, l.pp, l.cp, l.ac) for l in layouts if l.sp}
        assert split and all(scheme != "vanilla" and tp > 1 for scheme, tp, *_ in split)
        assert ("vanilla" in {l.scheme for l in layouts}) == (linear == "cola")  # planned, without it
    # megatron at TP 4 without AC: the residual stream on a rank's tokens is what lets it fit in 64 GiB
    tight = enumerate_layouts("7B", 16, "h100", linear="full", memory_bytes=64 * 2**30)
    kept = [(l.tp, l.pp, l.cp, l.ac, l.sp) for l in tight if l.scheme == "megatron"]
    assert (4, 1, 1, "none", True) in kept and (4, 1, 1, "none", False) not in kept
    # a sequence the TP ranks cannot split is planned without it (the preflight's rule)
    assert not any(l.sp for l in enumerate_layouts("1B", 3, "h100", seq_len=2051, micro_batch=1))


def test_sequence_parallelism_in_the_memory_model(tmp_path):
    """btp: LaX's carry lives on a rank's rows (a tp-th of it), and low-rank AC keeps each bottleneck's
    reduce-scattered rows beside its gathered latent; megatron: full AC's block input is a rank's tokens.
    The micro-batch advice reads ``boost.sequence_parallel`` from the TOML."""
    tp, T, layers = 4, 4 * 4096, 32
    args = model_args("7B", "btp", linear="lax")
    run = dict(micro_batch=4, seq_len=4096, num_microbatches=1, compiled=True, breakdown=True)

    def activations(scheme: str, linear: str, ac: str, sp: bool) -> float:
        peak = memory_per_gpu("7B", scheme, tp, 1, 4, ac, linear=linear, sequence_parallel=sp, **run)
        return peak["activations"] / ACTIVATION_CALIBRATION

    latent = 2 * T * 7 * args.rank  # bf16, 7 projections a block
    # LaX under full AC: each block's carry shrinks to its rows
    saved = activations("btp", "lax", "full", False) - activations("btp", "lax", "full", True)
    assert saved == pytest.approx(layers * latent * (1 - 1 / tp), rel=1e-12)
    # CoLA under low-rank AC: each block keeps its latents' rows as well
    added = activations("btp", "cola", "lowrank", True) - activations("btp", "cola", "lowrank", False)
    assert added == pytest.approx(layers * latent / tp, rel=1e-12)
    # megatron under full AC: the block inputs and the live layer's norm and residual inputs, a tp-th
    dense = model_args("7B", "megatron", linear="full")
    saved = activations("megatron", "full", "full", False) - activations("megatron", "full", "full", True)
    assert saved == pytest.approx((layers + 4) * 2 * T * dense.dim * (1 - 1 / tp), rel=1e-12)
    # vanilla has no plan, and one rank has nothing to split
    assert activations("vanilla", "lax", "full", True) == activations("vanilla", "lax", "full", False)
    one = dict(run, micro_batch=1)
    assert memory_per_gpu("1B", "btp", 1, 1, 1, "lowrank", linear="lax", sequence_parallel=True, **one) == (
        memory_per_gpu("1B", "btp", 1, 1, 1, "lowrank", linear="lax", **one)
    )
    # the advice's layout reads the switch
    toml = (Path(__file__).resolve().parents[2] / "train_configs" / "7B.toml").read_text()
    assert "\nsequence_parallel" not in toml and 'linear = "cola"' in toml
    kept = tmp_path / "7B_lax.toml"
    kept.write_text(toml.replace('linear = "cola"', 'linear = "lax"', 1))
    split = tmp_path / "7B_lax_sp.toml"
    split.write_text(toml.replace('linear = "cola"', 'linear = "lax"\nsequence_parallel = true', 1))
    split_layout, kept_layout = TrainingLayout.from_toml(split), TrainingLayout.from_toml(kept)
    assert split_layout.sequence_parallel and not kept_layout.sequence_parallel
    assert split_layout.peak(16, 4) < kept_layout.peak(16, 4)
    assert "sequence parallel" in advise_micro_batch(split, 16, 80 * 2**30).report()


# The trainer's 1B on one H200 (bench/results/gpu.md, 2026-11-28: tokens/s, median of steps 6–12, AC none,
# micro-batch 4, compiled as shipped), beside what the model predicts with the A100 fit carried to the H200.
H200_1B_TOKENS_PER_S = {("cola", "btp"): 69_326, ("full", "megatron"): 48_326, ("lax", "btp"): 50_340}
# LaX's bound is wider: the roofline runs the tensorized gate's small GEMMs at the memory's speed, and on the
# GPU they ran far below it (bench/results/gpu.md's kernel split)
H200_1B_TOLERANCE = {"cola": 0.10, "full": 0.10, "lax": 0.15}


@pytest.mark.parametrize("linear, scheme", sorted(H200_1B_TOKENS_PER_S), ids=lambda v: str(v))
def test_the_h200_model_is_near_the_measured_1b_steps(linear, scheme):
    layouts = enumerate_layouts("1B", 1, "h200", linear=linear, micro_batch=4)
    shipped = next(l for l in layouts if (l.scheme, l.ac) == (scheme, "none"))
    measured, tolerance = H200_1B_TOKENS_PER_S[(linear, scheme)], H200_1B_TOLERANCE[linear]
    # CoLA 0.5% under, dense 4.0% over, LaX 12.4% over: the model's ratios (1.37× dense, LaX 1.22× a CoLA
    # step) short of the measured (1.43×, 1.38×)
    assert (1 - tolerance) * measured <= shipped.tokens_per_s <= (1 + tolerance) * measured


@pytest.mark.parametrize("linear", ["cola", "lax"])
@pytest.mark.parametrize("compiled", [False, True])
def test_recompute_charges_what_each_checkpoint_runs_again(linear, compiled):
    """Low-rank AC keeps each down-projection's all-reduced output: it recomputes the up-projections a
    backward reads (not the block's last, whose output only the residual add reads), LaX's gates and the
    elementwise work, and no collective. Full AC reruns the whole forward with its collectives. Compiled,
    both keep attention's output (``activation_checkpoint.KEPT_ATTENTION``); eager recomputes it."""
    args = model_args("7B", "btp", linear=linear)
    T = 4 * 4096
    gemms = block_gemms(args, "btp", 4, T)
    if linear == "cola":  # tests/multiprocess/test_optimizations.py: recomputed = forward matmuls - 5 a block
        assert sum(g.role in LOWRANK_RECOMPUTED for g in gemms) == len(gemms) - 5
    run = dict(micro_batch=4, seq_len=4096, hw=A100, compiled=compiled)
    lowrank = layer_times(args, "btp", 4, activation_checkpoint="lowrank", **run)
    full = layer_times(args, "btp", 4, activation_checkpoint="full", **run)
    attention = 0.0 if compiled else lowrank["attn_fwd"]
    up = sum(gemm_time(g.M, g.K, g.N, A100, 2, g.batch) for g in gemms if g.role in ("up", "gate"))
    assert lowrank["recompute"] == pytest.approx(up + lowrank["elem_fwd"] + attention, rel=1e-12)
    assert full["recompute"] == pytest.approx(
        full["gemm_fwd"] + full["elem_fwd"] + attention + full["comm_fwd"], rel=1e-12
    )
    # the planner times the layouts it sizes as compiled
    step = dict(PAPER_RUN, activation_checkpoint="lowrank", breakdown=True)
    eager, ran = (predict_step_time("7B", "btp", 4, 1, compiled=c, **step) for c in (False, True))
    assert eager["recompute"] - ran["recompute"] == pytest.approx(eager["attn_fwd"], rel=1e-12)
    layouts = enumerate_layouts("7B", 16, "a100")
    for ac in ("full", "lowrank"):
        layout = next(l for l in layouts if (l.tp, l.pp, l.cp, l.ac) == (4, 1, 1, ac))
        assert layout.step_time == predict_step_time(
            "7B",
            layout.scheme,
            4,
            1,
            **PAPER_RUN,
            dp=layout.dp,
            num_microbatches=1,
            activation_checkpoint=ac,
            sequence_parallel=layout.sp,
            compiled=True,
        )


def test_one_rank_runs_plain_rmsnorm():
    """The custom norm Function of btp's sharded residual comes with the TP plan, which torchtitan applies
    only at TP > 1 (torchtitan_ext.infra.parallelize): at TP 1 the online norm costs what the plain one
    does."""
    for norm in ("online", "sync"):
        assert predict_step_time("1B", "btp", 1, 1, **PAPER_RUN, norm=norm) == predict_step_time(
            "1B", "btp", 1, 1, **PAPER_RUN, norm="local"
        )
    assert (
        predict_step_time("1B", "btp", 2, 1, **PAPER_RUN, norm="online", breakdown=True)["elem_fwd"]
        > predict_step_time("1B", "btp", 2, 1, **PAPER_RUN, norm="local", breakdown=True)["elem_fwd"]
    )


def test_the_ring_rotates_dk_dv_in_float32():
    """torch's ring attention accumulates dK|dV in float32 (``_cp_options.convert_to_f32``) and rotates those
    accumulators, whatever the compute dtype; the keys and values it gathers travel in the compute dtype."""
    args = model_args("7B", "btp")
    counted = context_parallel_layer(args, "btp", 2, 1, 32768, 4)
    in_bytes = context_parallel_layer(args, "btp", 2, 1, 32768, 4, dtype_bytes=2)
    assert in_bytes["forward"]["all_gather"] == (1, 2 * counted["forward"]["all_gather"][1])
    assert in_bytes["backward"]["all_to_all"] == (4, 4 * counted["backward"]["all_to_all"][1])
    rotated = context_parallel_layer(args, "btp", 2, 1, 32768, 4, rotate="alltoall", dtype_bytes=2)
    shard = counted["forward"]["all_gather"][1] // 4  # a rank's K|V
    assert rotated["backward"]["all_to_all"] == (7, 3 * shard * 2 + 4 * shard * 4)
    # the step time charges those bytes (tp 2 × cp 4: one node's NVLink): one all-gather of K|V, and 4
    # rotations of the float32 dK|dV
    no_latency = dataclasses.replace(H100, latency=0.0)
    lt = layer_times(args, "btp", 2, micro_batch=1, seq_len=32768, hw=no_latency, cp=4)
    gathered, rotations = counted["backward"]["all_gather"][1], counted["backward"]["all_to_all"][1]
    assert lt["cp_bwd"] == pytest.approx(
        (3 / 4 * gathered * 2 + rotations * 4) / no_latency.bus_bw, rel=1e-12
    )


def test_megatron_sequence_parallelism_runs_the_norms_and_adds_on_a_ranks_tokens():
    """Under megatron's sequence parallelism the residual stream is a rank's T/t tokens
    (``TPScheme.residual_shape``): its two RMSNorms (2 passes forward, 3 back) and two residual adds (3, 1)
    run on them, a t-th of the bytes; RoPE, the product and attention still see every token."""
    args = model_args("7B", "megatron")
    T, t = 4 * 4096, 4
    run = dict(micro_batch=4, seq_len=4096, hw=A100)
    whole, split = (layer_times(args, "megatron", t, sequence_parallel=sp, **run) for sp in (False, True))
    rate = A100.mem_bw * A100.eta_mem
    saved = (1 - 1 / t) * T * args.dim * 2 / rate  # a pass over the residual in bf16, on 1 - 1/t fewer tokens
    assert whole["elem_fwd"] - split["elem_fwd"] == pytest.approx((2 * 2 + 2 * 3) * saved, rel=1e-9)
    assert whole["elem_bwd"] - split["elem_bwd"] == pytest.approx((2 * 3 + 2 * 1) * saved, rel=1e-9)


def test_fsdp_gathers_as_the_reshard_policy_says_within_its_node():
    """FSDP all-gathers the parameters for the forward, and again for the backward only where the forward
    resharded them (``rules.reshards_after_forward``: torchtitan's "default" does, except under PP), and
    reduce-scatters the float32 gradients once. The FSDP group is tp·dp·cp consecutive ranks of torchtitan's
    mesh (pp, dp_replicate, dp_shard, cp, tp): a node's NVLink while those fit one, whatever pp."""
    # a network so slow across nodes that any FSDP traffic over it shows; a step so short that it all shows
    slow = dataclasses.replace(A100, inter_bw=1e9)
    run = dict(hardware=slow, micro_batch=1, seq_len=128, breakdown=True)

    def exposed(tp, pp, dp, policy):
        parts = predict_step_time(
            "7B", "btp", tp, pp, dp=dp, num_microbatches=pp, fsdp_reshard_after_forward=policy, **run
        )
        return parts["fsdp_exposed"]

    # 16 FSDP ranks span two nodes: a second all-gather costs (n-1)/n·P·2 B over the slow network
    gather = 15 / 16 * args_params(model_args("7B", "btp")) * 2 / slow.inter_bw
    assert exposed(1, 1, 16, "default") - exposed(1, 1, 16, "never") == pytest.approx(gather, rel=1e-9)
    assert exposed(1, 1, 16, "always") == exposed(1, 1, 16, "default") > exposed(1, 1, 16, "never") > 0
    # under PP "default" keeps the stage's weights gathered across micro-batches: one all-gather a step
    assert exposed(2, 2, 8, "default") == exposed(2, 2, 8, "never") < exposed(2, 2, 8, "always")
    # tp 2 × FSDP 4 is 8 consecutive ranks, one node at any pp: NVLink, hidden behind the pipeline
    assert exposed(2, 4, 4, "always") == 0.0
    with pytest.raises(ValueError, match="fsdp_reshard_after_forward"):
        predict_step_time("7B", "btp", 4, 1, **PAPER_RUN, fsdp_reshard_after_forward="sometimes")


def test_dense_projections_are_seven_kernels():
    """The dense model never groups its projections (``ModelArgs.grouped``): wq, wk, wv, wo, w1, w3, w2 are
    each one GEMM, with what column- and row-parallel leave on a rank."""
    args = model_args("7B", "megatron")
    d, f, kv = args.dim, args.ffn_dim, args.kv_heads * args.head_dim
    gemms = block_gemms(args, "megatron", 4, 4096)
    assert [(g.K, g.N, g.batch) for g in gemms] == [
        (d, d // 4, 1),
        (d, kv // 4, 1),
        (d, kv // 4, 1),
        (d // 4, d, 1),
        (d, f // 4, 1),
        (d, f // 4, 1),
        (f // 4, d, 1),
    ]


def test_the_planner_times_what_it_prints_without_pp(capsys):
    """``--num-microbatches`` is the pipeline's: a layout without PP runs one micro-batch a step, and is timed
    at one, so its tokens/s are those of the overrides printed for it."""
    default = {
        (l.scheme, l.tp, l.pp, l.cp, l.ac, l.sp, l.reshard): l for l in enumerate_layouts("7B", 16, "a100")
    }
    for l in enumerate_layouts("7B", 16, "a100", num_microbatches=4):
        m = l.num_microbatches
        assert m == (4 if l.pp > 1 else 1)
        if l.pp == 1:
            assert l.step_time == default[(l.scheme, l.tp, l.pp, l.cp, l.ac, l.sp, l.reshard)].step_time
        assert f"--training.local_batch_size {4 * m}" in l.overrides("cola", 4, 4096)
        assert l.tokens_per_s * l.step_time == pytest.approx(4 * m * l.dp * 4096)
    assert plan_main(["--flavor", "7B", "--gpus", "16", "--hardware", "a100", "--num-microbatches", "4"]) == 0
    printed = capsys.readouterr().out.split("best layout overrides:\n")[1]
    assert "--parallelism.pipeline_parallel_degree 1" in printed
    assert "--training.local_batch_size 4 " in printed

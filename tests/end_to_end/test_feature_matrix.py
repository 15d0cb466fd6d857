"""The feature matrix (tests/feature_matrix.py) through the real trainer: every supported row trains
and matches its reference run step for step; every refused row is refused by the preflight.

The ranks run without the launcher (``tests/trainer.py``'s ``train``): what a row checks is the
trainer's; ``run_train.sh`` itself is tested in test_train.py, test_lifecycle.py and the preflight's tests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from boost.training.rules import splits_backward
from tests.end_to_end import compiled_graphs_probe
from tests.feature_matrix import (
    LAYOUTS,
    MODELS,
    REFERENCES,
    REFUSED,
    SUPPORTED,
    Row,
    mask_overrides,
    model,
    packed_documents,
)
from tests.suite_once import once_per_suite
from tests.trainer import PROBE_ENV, ROOT, losses, train

# 4 steps, 3 updates: step 1 checks the forward at the common initial model, step 2 the first
# gradient and AdamW update (a wrong gradient shows there), steps 3-4 the optimizer state carried on.
STEPS = 4
COMMON = [
    "--checkpoint.no-enable",
    "--validation.no-enable",
    "--lr_scheduler.warmup_steps",
    "2",
    "--debug.seed",
    "0",
]
# fp32 on CPU: the layouts reorder sums (all-reduces, sharded GEMMs), so runs agree to rounding,
# compounded over a few AdamW steps; a wrong gradient moves the loss by far more (≥1e-2).
RTOL = 2e-5
# bf16 parameters and activations against the fp32 reference: bf16 keeps 8 significant bits (2^-9
# relative rounding per value); the mean loss averages those errors away to well below that, and a
# wrong gradient still moves it by far more (≥1e-2).
BF16_RTOL = 2e-3
# The README's workflow 3 (compile and profile, BTP at TP=2) rides on this row: the profiler and the
# memory snapshot watch the run and change none of its numbers.
PROFILED_ROW = "btp-compiled-ac_lowrank-tp"
PROFILING = [
    "--profiling.enable_profiling",
    "--profiling.profile_freq",
    "4",
    "--profiling.profiler_warmup",
    "1",
    "--profiling.profiler_active",
    "1",
    "--profiling.enable_memory_snapshot",
]


def assert_same_curve(got: dict[int, float], want: dict[int, float], rtol: float) -> None:
    """Every step of the run logged, each value (a loss, a gradient norm) within ``rtol`` of the reference's."""
    assert got.keys() == want.keys() == set(range(1, STEPS + 1)), (got, want)
    for step in want:
        assert abs(got[step] - want[step]) <= rtol * abs(want[step]), (
            f"step {step}: {got[step]} vs {want[step]}"
        )


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    """The packed short documents of the block-causal rows, written once a suite."""
    folder, _ = once_per_suite(tmp_path_factory, "packed-documents", lambda f: str(packed_documents(f)))
    return folder / "documents.jsonl"


def grad_norms(log: str) -> dict[int, float]:
    """The gradient norm by training step, as the step lines log it."""
    return {
        int(s): float(v) for s, v in re.findall(r"(?<!validate )step:\s+(\d+)\s.*?grad_norm:\s+([\d.]+)", log)
    }


@pytest.fixture(scope="module")
def reference_logs(tmp_path_factory, documents):
    """Reference runs' logs, one per (scheme's model, data-parallel degree, mask), computed once a suite when
    first asked (``tests/suite_once.py``: the rows run on every xdist worker)."""
    cache: dict[tuple[str, str, str, bool], str] = {}

    def get(scheme: str, reference: str, mask: str = "causal", lax: bool = False) -> str:
        if (scheme, reference, mask, lax) not in cache:
            ngpu, layout = REFERENCES[reference]
            masked = mask_overrides(mask, documents)
            _, log = once_per_suite(
                tmp_path_factory,
                f"ref-{scheme}-{reference}"
                + ("" if mask == "causal" else f"-{mask}")
                + ("-lax" if lax else ""),
                lambda folder: train(
                    folder, *COMMON, *model(scheme, lax), *layout, *masked, ngpu=ngpu, steps=STEPS
                ),
            )
            cache[scheme, reference, mask, lax] = log
        return cache[scheme, reference, mask, lax]

    return get


@pytest.fixture(scope="module")
def reference_losses(reference_logs):
    """The reference runs' curves (``reference_logs``)."""
    return lambda *key, **kw: losses(reference_logs(*key, **kw))


def test_the_profiled_row_is_supported():
    assert PROFILED_ROW in {row.name for row in SUPPORTED}


# the compatibility tier's pipeline run (.ci/compat): 1F1B over pp 2 × tp 2, on every end of the torch range
COMPAT_ROW = "btp-eager-ac_lowrank-pp×tp"


@pytest.mark.slow
@pytest.mark.parametrize(
    "row",
    [pytest.param(r, marks=[pytest.mark.compat] if r.name == COMPAT_ROW else []) for r in SUPPORTED],
    ids=lambda r: r.name,
)
def test_supported_row_matches_its_reference(
    row: Row, reference_logs, reference_losses, documents, tmp_path: Path
):
    from torchtitan_ext.torch_private import EXACT_SPLIT_BACKWARD

    if splits_backward(row.schedule) and not EXACT_SPLIT_BACKWARD:
        # torch 2.11: refused before any process starts (test_preflight.py's
        # test_a_split_backward_schedule_is_refused_where_torch_computes_it_wrong)
        pytest.skip(f"{row.schedule} splits the backward, which this torch computes wrong: refused here")
    ngpu = LAYOUTS[row.layout][0]
    # the loss lives on the last pipeline stage: ranks 2 and 3 of pp=2 × tp=2 (and of pp=2 × cp=2), 0 and 1
    # under a V-shaped schedule
    log = train(
        tmp_path,
        *COMMON,
        *row.overrides(),
        *mask_overrides(row.mask, documents),
        *(PROFILING if row.name == PROFILED_ROW else []),
        ngpu=ngpu,
        steps=STEPS,
        log_rank=row.loss_rank,
    )
    assert "Pipeline Parallel loss is not visible" not in log  # the rank shown is the loss's
    assert "returned a view tensor" not in log  # FSDP2's, quiet for BOOST's modules (start_warnings.py)
    if "tp" in row.layout:
        assert f"Applied {row.scheme} tensor parallelism (degree 2" in log
    assert f"Attention: sdpa, {row.mask} mask" in log
    if row.compiled:
        assert "Compiling each TransformerBlock with torch.compile" in log
        # the first step compiles (before torchtitan lowers the timeouts); the counter watches the second
        if "comm/step" in log:
            assert log.index("comm/step") > re.search(r"step:\s+2\s", log).start(), log[-3000:]
            assert "the second, run eagerly" in log
            assert ("merged into one of each a block" in log) == (row.fsdp == "simple_fsdp"), log[-3000:]
    if row.ac == "lowrank":
        assert "Applied low-rank activation checkpointing" in log
    if row.layout.startswith("fsdp×"):
        assert ("Applied FSDP to the model" if row.fsdp == "fully_shard" else "Applied SimpleFSDP") in log
    if "cp" in row.layout:
        how = "ring attention" if row.mask == "causal" else "keys and values all-gathered"
        applied = rf"Applied context parallelism \(degree \d\) to sdpa attention: {how}"
        assert re.search(applied, log), log[-3000:]
    if row.layout.startswith("pp×"):
        # the per-token loss scaling under PP (torchtitan #2972; under CP, of the whole windows' count): the
        # unpipelined run's gradient norms, which the curve alone would not show (clipping at max_norm 1
        # rescales a norm too large by any factor to the same update)
        want_norms = grad_norms(reference_logs(row.scheme, row.reference, row.mask, row.lax))
        assert_same_curve(grad_norms(log), want_norms, 1e-3 if row.precision == "float32" else 5e-2)
    else:
        collective = "all_gather" if "cp" in row.layout else "all_reduce"  # the attention's keys and values
        assert re.search(rf"comm/step: .*{collective} \d+× [\d.]+ [KM]iB", log), log[-3000:]
    got, want = losses(log), reference_losses(row.scheme, row.reference, row.mask, row.lax)
    _assert_tensorboard_has_the_loss_and_comm_metrics(
        tmp_path / "out" / "tb", got, comm=not row.layout.startswith("pp×")
    )
    assert_same_curve(got, want, RTOL if row.precision == "float32" else BF16_RTOL)
    if row.name == PROFILED_ROW:
        traces = list((tmp_path / "out" / "profile_traces" / "iteration_4").glob("rank*_trace.json"))
        assert {t.name for t in traces} == {"rank0_trace.json", "rank1_trace.json"}
        assert (
            tmp_path / "out" / "memory_snapshot" / "iteration_4" / "rank0_memory_snapshot.pickle"
        ).is_file()
    if row.precision != "float32":
        # it really computed in bf16: farther from the fp32 curve than fp32 layouts ever are
        assert any(abs(got[s] - want[s]) > RTOL * abs(want[s]) for s in want), (got, want)
        assert f"BOOST computes in bfloat16 ({'FSDP2' if row.fsdp == 'fully_shard' else 'SimpleFSDP'}" in log


@pytest.mark.slow
def test_block_causal_reference_is_not_the_causal_run(reference_losses, documents, tmp_path: Path):
    # The block-causal references hold the rows; this holds the references to the mask: on the same packed
    # documents the causal run's curve is another one, at every step 5x farther than the rows' tolerance
    # (windows hold several documents).
    corpus = ("--training.dataset", "local", "--training.dataset_path", str(documents))
    log = train(tmp_path, *COMMON, *MODELS["megatron"], *corpus, ngpu=1, steps=STEPS)
    causal, block_causal = losses(log), reference_losses("megatron", "1", "block_causal")
    assert all(abs(causal[s] - block_causal[s]) > 5 * RTOL * abs(causal[s]) for s in causal), (
        causal,
        block_causal,
    )


@pytest.mark.parametrize(
    "ngpu,overrides,field", REFUSED, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None
)
def test_refused_row_is_refused_before_any_process(ngpu, overrides, field):
    from torchtitan_ext.preflight import ConfigError, check_job

    argv = ["--job.config_file", str(ROOT / "train_configs" / "debug.toml"), *overrides]
    with pytest.raises(ConfigError, match=re.escape(field)):
        check_job(argv, ngpu)


def _assert_tensorboard_has_the_loss_and_comm_metrics(
    tb: Path, console: dict[int, float], comm: bool
) -> None:
    """One rank wrote TensorBoard, the one whose loss the console shows (under PP the last stage's: any
    other logs -1), and, with ``comm``, BOOST's communication metrics."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = {p.parent for p in tb.rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(events))
    acc.Reload()
    logged = {e.step: e.value for e in acc.Scalars("loss_metrics/global_avg_loss")}
    assert logged.keys() == console.keys() and all(
        abs(logged[s] - console[s]) <= 1e-5 * abs(console[s]) + 1e-5 for s in console
    ), (logged, console)
    if comm:
        assert {"throughput(tps)", "mfu(%)", "boost/comm_bytes/all_reduce"} <= set(acc.Tags()["scalars"])
        comm_bytes = acc.Scalars("boost/comm_bytes_per_step")
        assert comm_bytes and comm_bytes[-1].value > 0


@pytest.mark.slow
@pytest.mark.long
def test_gpu_rows_layout_matches_fsdp2_replays_and_starts_again_on_its_cache(
    reference_losses, tmp_path: Path
):
    # The GPU report's cudagraphs rows at the debug size. SimpleFSDP under inductor (the rows compile with
    # aot_eager, which runs a graph as traced; inductor also merges each graph's gathers and reduce-scatters
    # into one of each: torchtitan_ext/infra/simple_fsdp.py), with boost.cudagraphs, which a CPU runs as
    # without it (inductor records CUDA graphs for GPU graphs only): FSDP2's losses.
    # Its rank 0 records the graphs inductor compiled: each block's could be replayed as a CUDA graph
    # (tests/end_to_end/compiled_graphs_probe.py).
    # Started again on the same inductor cache, its ranks find the graphs the first start compiled.
    # AOTAutograd's cache keyed them on the device mesh, the same on every rank, so a rank loaded another's
    # graph, whose collectives name that rank's process groups, and stopped ("Could not resolve the process
    # group registered under the name 11"; torch_private.keep_ranks_compiled_graphs_apart; FSDP2 alike).
    # Inductor's CPU kernels scalar: what this test holds (the layout, its graphs, their cache) is not
    # theirs, and a GPU never runs them; vectorised, g++ compiling them made the test 88 s alone against
    # 62 s. Inductor's vectorised CPU kernels are held to eager in tests/multiprocess/test_compile.py.
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"), "TORCHINDUCTOR_VEC_ISA_OK": "0"}
    record = tmp_path / "compiled-graphs.json"
    probed = {PROBE_ENV: compiled_graphs_probe.PROBE, compiled_graphs_probe.RECORD_ENV: str(record)}
    args = (
        *COMMON,
        *MODELS["btp"],
        *LAYOUTS["fsdp×tp"][1],
        *("--boost.activation_checkpoint", "lowrank", "--compile.enable"),
        *("--boost.fsdp", "simple_fsdp", "--boost.cudagraphs"),
    )
    for start in ("first", "again"):
        env = {**cache, **probed} if start == "first" else cache
        log = train(tmp_path, *args, ngpu=4, steps=STEPS, folder=start, env=env)
        assert "Applied SimpleFSDP" in log, log[-3000:]
        assert "Compiling each TransformerBlock with torch.compile and inductor's CUDA graphs" in log
        skipped = re.search(
            r"boost.cudagraphs: the blocks' compiled graphs run without CUDA graphs here \((\d+) skipped", log
        )
        assert skipped and int(skipped.group(1)) >= 1, log[-3000:]
        assert_same_curve(losses(log), reference_losses("btp", "fsdp2"), RTOL)
        if start == "first":
            compiled_graphs_probe.assert_replayable(json.loads(record.read_text()))

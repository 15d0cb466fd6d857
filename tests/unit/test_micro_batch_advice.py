"""The planner's micro-batch advice for a training TOML: the memory model against measured GPU peaks, the
advice against the model, its refusals, and the TOML headers that quote it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.gpu_rows import ROWS
from boost.planning.layout_planner import main as plan_main
from boost.planning.perf_model import (
    HEADROOM,
    TrainingLayout,
    advise_long_sequence,
    advise_micro_batch,
    memory_per_gpu,
    usable_bytes,
)
from boost.training.rules import reshards_after_forward

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30
SHIPPED = ("1B", "3B", "7B", "13B", "30B")

# Peaks measured on one H100 80GB (torch 2.11, bf16 via FSDP2, compiled as shipped, 2026-11-26): torchtitan's
# "memory:" line, the caching allocator's reserved peak, of a rank dry run (no NCCL) or a one-GPU run.
# The model's three fitted constants each came from rows below, which therefore hold those constants in
# place rather than test the model: ACTIVATION_CALIBRATION from the 7B btp b 4 / b 8 rows (and the slope
# test), LAX_CROSSING_KEPT_BYTES from the H200 1B LaX row, the CUDA graphs' pool from its three rows. Every
# other row (other schemes, flavors, AC modes, reshard policies, SP, PP) was measured after or apart from
# the fit: those are the model's test.
# (flavor, scheme, linear, tp, FSDP degree, AC, micro-batch, GiB)
H100_PEAKS = [
    ("7B", "btp", "cola", 4, 4, "lowrank", 4, 16.11),
    ("7B", "btp", "cola", 4, 4, "lowrank", 8, 29.33),
    ("7B", "vanilla", "cola", 4, 4, "full", 4, 17.23),
    ("7B", "megatron", "full", 4, 4, "full", 4, 15.00),
    ("3B", "btp", "cola", 2, 4, "lowrank", 4, 16.38),
    ("3B", "vanilla", "cola", 2, 4, "full", 4, 14.29),
    ("3B", "megatron", "full", 2, 4, "full", 4, 16.40),
    ("1B", "btp", "cola", 1, 1, "full", 4, 19.32),
    ("1B", "megatron", "full", 1, 1, "full", 4, 29.30),
]


def _toml(flavor: str) -> Path:
    return ROOT / "train_configs" / f"{flavor}.toml"


def _header_ngpu(flavor: str) -> int:
    return int(re.search(r"NGPU=(\d+) CONFIG_FILE", _toml(flavor).read_text()).group(1))


def _model_peak(row: tuple, reshard_after_forward: bool = True, sequence_parallel: bool = False) -> float:
    """The memory model's bytes for a measured H100 row (its layout at sequence 4096, compiled)."""
    flavor, scheme, linear, tp, dp, ac, micro_batch, _ = row
    return memory_per_gpu(
        flavor,
        scheme,
        tp,
        1,
        dp,
        ac,
        micro_batch=micro_batch,
        seq_len=4096,
        num_microbatches=1,
        linear=linear,
        compiled=True,
        workspace_bytes=0,  # the measured peak is the allocator's: no CUDA context, no NCCL in a dry run
        reshard_after_forward=reshard_after_forward,
        sequence_parallel=sequence_parallel,
    )


@pytest.mark.parametrize("row", H100_PEAKS, ids=lambda r: f"{r[0]}-{r[1]}-b{r[6]}")
def test_memory_model_is_at_or_just_over_the_measured_h100_peaks(row):
    measured = row[-1]
    # within 1% under (3B btp: -0.4%) and 10% over (the dense 1B: +9.3%): the headroom covers both
    assert 0.99 * measured <= _model_peak(row) / GIB <= 1.10 * measured


def test_memory_model_under_pipeline_parallelism_is_near_the_measured_h100_peak():
    # 13B@8, tp 4 × pp 2, FSDP degree 1 (FSDP2 wraps for bf16), the 13B TOML's 4 micro-batches of 1: its
    # first stage's rank 0 on one H100 (git show 97d6bc1:bench/results/gpu.md, 2026-11-26). Not a row the
    # model was fitted on. Under PP the schedule keeps the stage's weights gathered and its gradients
    # unsharded through the step, at a degree of 1 too: without that term the model said 15.3 GiB (-21%).
    measured = 19.36
    modeled = memory_per_gpu(
        "13B", "btp", 4, 2, 1, "lowrank", micro_batch=1, seq_len=4096, num_microbatches=4, compiled=True,
        workspace_bytes=0,
    ) / GIB  # fmt: skip
    # 3.5% under: within the headroom the advice keeps (HEADROOM), unlike the 21% before
    assert 0.95 * measured <= modeled <= 1.10 * measured, modeled


def test_memory_model_counts_no_fsdp_buffers_where_fsdp_does_not_wrap():
    # TP × PP in float32 at a shard degree of 1: torchtitan trains it without FSDP (rules.fsdp_wraps), so
    # nothing is gathered and no reduce-scatter input exists; in bf16 FSDP2 wraps it for the precision
    layout = dict(micro_batch=1, seq_len=4096, num_microbatches=8, workspace_bytes=0, breakdown=True)
    fp32 = memory_per_gpu("13B", "btp", 4, 2, 1, "lowrank", dtype_bytes=4, **layout)
    bf16 = memory_per_gpu("13B", "btp", 4, 2, 1, "lowrank", dtype_bytes=2, **layout)
    assert fp32["unsharded"] == 0 and bf16["unsharded"] > 0
    # sharded over data-parallel ranks, FSDP2 wraps in float32 too
    assert memory_per_gpu("13B", "btp", 4, 2, 2, "lowrank", dtype_bytes=4, **layout)["unsharded"] > 0


def test_memory_model_counts_hsdps_buffers(tmp_path):
    """Replicas are FSDP2's HSDP at every shard degree (``rules.fsdp_wraps``): one GPU per replica still
    gathers its weights and reduce-scatters its gradients; the advice reads the TOML's replicate degree."""
    layout = dict(micro_batch=4, seq_len=4096, num_microbatches=1, workspace_bytes=0, breakdown=True)
    alone = memory_per_gpu("1B", "btp", 1, 1, 1, "none", **layout)
    replicated = memory_per_gpu("1B", "btp", 1, 1, 1, "none", dp_replicate=2, **layout)
    assert alone["unsharded"] == 0 < replicated["unsharded"]
    assert replicated["states"] == alone["states"]  # each replica holds every shard
    toml = tmp_path / "1B_hsdp.toml"
    toml.write_text(
        _toml("1B")
        .read_text()
        .replace(
            "data_parallel_shard_degree = -1",
            "data_parallel_shard_degree = 1\ndata_parallel_replicate_degree = 2",
        )
    )
    hsdp = TrainingLayout.from_toml(toml)
    assert hsdp.dp_replicate == 2 and hsdp.fsdp_degree(2) == 1
    assert TrainingLayout.from_toml(_toml("1B")).peak(1, 4, breakdown=True)["unsharded"] == 0
    assert hsdp.peak(2, 4, breakdown=True)["unsharded"] > 0


# The trainer's 1B on one H200 (torch 2.11, compiled, autocast, AC none: the 1B TOML's since 2026-11-28;
# bench/results/gpu.md, 2026-11-28): without AC, LaX keeps its crossings' tensors in every layer
# (peak_memory.LAX_CROSSING_KEPT_BYTES, fitted on the LaX row: without it the model was 11.7% under).
H200_PEAKS = [
    ("1B", "btp", "cola", 1, 1, "none", 4, 50.44),
    ("1B", "megatron", "full", 1, 1, "none", 4, 60.19),
    ("1B", "btp", "lax", 1, 1, "none", 4, 64.90),
]


@pytest.mark.parametrize("row", H200_PEAKS, ids=lambda r: f"{r[0]}-{r[2]}-ac_{r[5]}")
def test_memory_model_is_at_or_just_over_the_measured_h200_peaks_without_ac(row):
    measured = row[-1]
    # over by 7.0% (CoLA), 4.9% (LaX) and 11.5% (dense: as at full AC, a dense step holds less beyond the
    # named tensors); over is the safe side of advice
    assert 0.99 * measured <= _model_peak(row) / GIB <= 1.12 * measured


# The same with fsdp_reshard_after_forward = "never" (the 1B, 3B and 7B TOMLs'), one H100 report
# (bench/results/gpu.md, 2026-11-26 10:43): every layer's gathered weights held from forward to backward.
H100_PEAKS_NO_RESHARD = [
    ("7B", "btp", "cola", 4, 4, "lowrank", 4, 16.19),
    ("7B", "btp", "cola", 4, 4, "lowrank", 20, 66.72),
    ("7B", "vanilla", "cola", 4, 4, "full", 4, 17.27),
    ("3B", "btp", "cola", 2, 4, "lowrank", 4, 16.28),
    ("3B", "megatron", "full", 2, 4, "full", 4, 19.46),
    # LaX, its carried latents held from block to block (bench/results/gpu.md, 2026-11-27 12:44)
    ("7B", "btp", "lax", 4, 4, "lowrank", 4, 23.39),
]


@pytest.mark.parametrize("row", H100_PEAKS_NO_RESHARD, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}-b{r[6]}")
def test_memory_model_without_reshard_is_at_or_just_over_the_measured_h100_peaks(row):
    measured = row[-1]
    # over by up to 7.8% (7B vanilla): the model holds every layer's bf16 weights, which the caching
    # allocator's reserve absorbed in part (7B@16 btp b 4: 16.19 GiB never, 16.36 default, same report)
    assert 0.99 * measured <= _model_peak(row, reshard_after_forward=False) / GIB <= 1.10 * measured
    assert _model_peak(row, reshard_after_forward=False) > _model_peak(row)


# The H200's 7B@16 rank (bench/results/gpu.md, 2026-11-28; the 7B TOML's reshard "never"), with and without
# btp's sequence parallelism: each latent on a rank's rows between a reduce-scatter and an all-gather, LaX's
# carries a tp-th of themselves, low-rank AC keeping the rows beside the gathered latent
H200_PEAKS_NO_RESHARD = [  # (..., sequence_parallel, measured GiB)
    ("7B", "btp", "cola", 4, 4, "lowrank", 4, False, 16.21),
    ("7B", "btp", "cola", 4, 4, "lowrank", 4, True, 17.88),
    ("7B", "btp", "lax", 4, 4, "lowrank", 4, False, 23.61),
    ("7B", "btp", "lax", 4, 4, "lowrank", 4, True, 19.67),
]


@pytest.mark.parametrize("row", H200_PEAKS_NO_RESHARD, ids=lambda r: f"{r[2]}-{'sp' if r[-2] else 'no_sp'}")
def test_memory_model_with_and_without_sequence_parallelism_is_just_over_the_measured_h200_peaks(row):
    *layout, sp, measured = row
    modeled = _model_peak((*layout, measured), reshard_after_forward=False, sequence_parallel=sp) / GIB
    # over by 7.3% (CoLA) to 9.3% (LaX with SP); SP's change is the model's to within 2 points: CoLA +2.05
    # GiB modeled, +1.67 measured; LaX -4.10 modeled, -3.94 measured
    assert 0.99 * measured <= modeled <= 1.10 * measured


# Under boost.cudagraphs (the same reports, 2026-11-27): 7B@16 under SimpleFSDP (reshard "default"), and the
# 1B CoLA on one GPU with full AC (the 1B TOML's AC until 2026-11-28); without the graphs 16.22, 17.49, 19.32
H100_PEAKS_CUDAGRAPHS = [
    ("7B", "btp", "cola", 4, 4, "lowrank", 4, 26.91),
    ("7B", "megatron", "full", 4, 4, "full", 4, 21.72),
    ("1B", "btp", "cola", 1, 1, "full", 4, 24.99),
]


@pytest.mark.parametrize("row", H100_PEAKS_CUDAGRAPHS, ids=lambda r: f"{r[0]}-{r[1]}-b{r[6]}")
def test_memory_model_with_cuda_graphs_is_near_the_measured_h100_peaks(row):
    flavor, scheme, linear, tp, dp, ac, micro_batch, measured = row
    kwargs = dict(micro_batch=micro_batch, seq_len=4096, num_microbatches=1, linear=linear, compiled=True)
    graphs = memory_per_gpu(flavor, scheme, tp, 1, dp, ac, cudagraphs=True, workspace_bytes=0, **kwargs)
    # fitted on these three (docs/perf_model.md): -1.6% (the 1B) to +2.1% (megatron); the headroom covers it
    assert 0.98 * measured <= graphs / GIB <= 1.10 * measured
    # the graphs' term is the kept activations once more: nothing but the activations moves
    plain = memory_per_gpu(flavor, scheme, tp, 1, dp, ac, breakdown=True, **kwargs)
    with_graphs = memory_per_gpu(flavor, scheme, tp, 1, dp, ac, cudagraphs=True, breakdown=True, **kwargs)
    assert {k: v for k, v in with_graphs.items() if k not in ("activations", "total")} == {
        k: v for k, v in plain.items() if k not in ("activations", "total")
    }
    assert plain["activations"] < with_graphs["activations"] < 2 * plain["activations"]


def test_advice_reads_cuda_graphs_from_the_toml(tmp_path):
    shipped = _toml("7B").read_text()
    assert "cudagraphs" not in shipped
    graphs = tmp_path / "7B_graphs.toml"
    # the GPU rows' layout: SimpleFSDP (its reshard policy "default") replayed as CUDA graphs
    graphs.write_text(
        shipped.replace("[boost]\n", '[boost]\ncudagraphs = true\nfsdp = "simple_fsdp"\n', 1).replace(
            'fsdp_reshard_after_forward = "never"', 'fsdp_reshard_after_forward = "default"'
        )
    )
    plain_advice, graphs_advice = (advise_micro_batch(t, 16, 80 * GIB) for t in (_toml("7B"), graphs))
    assert graphs_advice.layout.cudagraphs and not plain_advice.layout.cudagraphs
    assert graphs_advice.micro_batch < plain_advice.micro_batch
    # the GPU report measures the advice (its row "7B@16 btp simple_fsdp cudagraphs b 11")
    row = next(r for r in ROWS if r.name == "7B@16 btp simple_fsdp cudagraphs b 11")
    assert row.args[-2:] == ("--training.local_batch_size", str(graphs_advice.micro_batch))
    assert "CUDA graphs" in graphs_advice.report() and "CUDA graphs" not in plain_advice.report()


def test_memory_model_grows_with_the_micro_batch_as_measured():
    def peak(micro_batch: int) -> float:
        return memory_per_gpu(
            "7B",
            "btp",
            4,
            1,
            4,
            "lowrank",
            micro_batch=micro_batch,
            seq_len=4096,
            num_microbatches=1,
            compiled=True,
        )

    # 7B@16 on the H100: 16.11 GiB at micro-batch 4, 29.33 at 8, i.e. 3.305 GiB per sequence: the slope
    # ACTIVATION_CALIBRATION was taken from (a pin of the fit, not a test of the model)
    assert (peak(8) - peak(4)) / 4 / GIB == pytest.approx(3.305, rel=0.01)


@pytest.mark.parametrize("flavor", SHIPPED)
def test_advice_is_the_largest_micro_batch_whose_model_peak_fits(flavor):
    gpus, memory = _header_ngpu(flavor), 80 * GIB
    advice = advise_micro_batch(_toml(flavor), gpus, memory)
    layout = TrainingLayout.from_toml(_toml(flavor))
    b = advice.micro_batch
    # the peak it reports is the memory model's own, called with the TOML's values
    direct = memory_per_gpu(
        layout.flavor,
        layout.scheme,
        layout.tp,
        layout.pp,
        gpus // (layout.tp * layout.pp),
        layout.ac,
        micro_batch=b,
        seq_len=layout.seq_len,
        num_microbatches=layout.num_microbatches,
        linear=layout.linear,
        vocab_size=layout.vocab_size,
        compiled=True,
        rank=layout.rank,
        reshard_after_forward=reshards_after_forward(layout.reshard_policy, layout.pp > 1),
    )
    assert advice.peak["total"] == pytest.approx(direct)
    assert advice.peak["total"] <= usable_bytes(memory) == (1 - HEADROOM) * memory < advice.next_peak
    assert advice.next_peak == pytest.approx(layout.peak(gpus, b + 1))
    assert b >= layout.micro_batch  # every shipped layout fits its own micro-batch on an 80 GB GPU


@pytest.mark.parametrize("flavor", SHIPPED)
def test_advice_is_monotone_in_memory(flavor):
    gpus = _header_ngpu(flavor)
    advised = [
        advise_micro_batch(_toml(flavor), gpus, gib * GIB).micro_batch for gib in (32, 40, 80, 141, 1000)
    ]
    assert advised == sorted(advised) and advised[0] < advised[-1]


def test_advice_refuses_no_memory_and_a_layout_that_does_not_fit_at_micro_batch_1(capsys):
    for gib in (0, -80):
        with pytest.raises(ValueError, match="memory must be positive"):
            advise_micro_batch(_toml("7B"), 16, gib * GIB)
    # 30B at its 16 GPUs holds ~14 GiB of states and buffers before any activation
    with pytest.raises(
        ValueError, match=r"does not fit at micro-batch 1: it peaks at \d+\.\d GiB, over the 14\.4"
    ):
        advise_micro_batch(_toml("30B"), 16, 16 * GIB)
    with pytest.raises(ValueError, match="needs a multiple of tp × pp × dp_replicate × cp = 16 GPUs, not 24"):
        advise_micro_batch(_toml("30B"), 24, 80 * GIB)
    # what the model does not count is refused, not guessed
    with pytest.raises(
        ValueError, match=r"\[optimizer\] name = 'LORO': the memory model counts Adam's states"
    ):
        advise_micro_batch(ROOT / "train_configs" / "loro" / "60M.toml", 1, 80 * GIB)
    # the CLI: argparse names the option; the planner's refusals are one line and exit status 2
    with pytest.raises(SystemExit) as exit_info:
        plan_main(["--config", str(_toml("7B")), "--gpus", "16", "--memory-gib", "0"])
    assert exit_info.value.code == 2
    assert "argument --memory-gib: must be positive, got 0" in capsys.readouterr().err
    assert plan_main(["--config", str(_toml("30B")), "--gpus", "16", "--memory-gib", "16"]) == 2
    assert "does not fit at micro-batch 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        plan_main(["--config", str(_toml("7B")), "--gpus", "16", "--micro-batch", "2"])
    assert "argument --micro-batch: not with --config (the TOML sets it)" in capsys.readouterr().err


def test_toml_headers_quote_the_advice_on_80_gib():
    for flavor in SHIPPED:
        header = _toml(flavor).read_text().split("\n[")[0]
        gpus = _header_ngpu(flavor)
        command = (
            f"python -m boost.planning.layout_planner --config train_configs/{flavor}.toml "
            f"--gpus {gpus} --memory-gib 80"
        )
        assert command in header, flavor
        advice = advise_micro_batch(_toml(flavor), gpus, 80 * GIB)
        assert f"-> {advice.overrides()}" in header, flavor
        assert "local_batch_size = 4" in _toml(flavor).read_text()  # the shipped value stays the paper's


def test_advised_overrides_pass_validation(capsys):
    from torchtitan_ext.preflight import check_job

    for flavor in ("7B", "13B"):  # without and with PP
        gpus = _header_ngpu(flavor)
        assert plan_main(["--config", str(_toml(flavor)), "--gpus", str(gpus), "--memory-gib", "80"]) == 0
        printed = capsys.readouterr().out.split("set it with: ")[1].strip()
        job = check_job(["--job.config_file", str(_toml(flavor)), *printed.split()], world_size=gpus)
        advice = advise_micro_batch(_toml(flavor), gpus, 80 * GIB)
        layout = TrainingLayout.from_toml(_toml(flavor))
        assert job.training.local_batch_size == layout.num_microbatches * advice.micro_batch
        if layout.pp > 1:
            assert job.parallelism.pipeline_parallel_microbatch_size == advice.micro_batch


def test_toml_headers_quote_the_long_window_advice_and_it_passes_validation():
    # the smallest context-parallel degree that fits each shipped TOML's micro-batch at 32k, at the dry runs'
    # GPU counts; what the planner prints is what the preflight accepts
    from torchtitan_ext.preflight import check_job

    for flavor, gpus in (("1B", 8), ("3B", 8), ("7B", 16), ("13B", 32), ("30B", 32)):
        header = _toml(flavor).read_text().split("\n[")[0]
        command = (
            f"python -m boost.planning.layout_planner --config train_configs/{flavor}.toml "
            f"--gpus {gpus} --memory-gib 80 --seq-len 32768"
        )
        assert command in header, flavor
        advice = advise_long_sequence(_toml(flavor), gpus, 80 * GIB, 32768)
        assert f"-> {advice.overrides()}   (peak {advice.peak / GIB:.1f} GiB" in header, flavor
        assert advice.peak <= usable_bytes(80 * GIB)
        smaller = [cp for cp in advice.peaks if cp < advice.layout.cp]
        assert all(advice.peaks[cp] > usable_bytes(80 * GIB) for cp in smaller), flavor  # the smallest
        job = check_job(
            ["--job.config_file", str(_toml(flavor)), *advice.overrides().split()], world_size=gpus
        )
        assert job.parallelism.context_parallel_degree == advice.layout.cp
        assert job.boost.activation_checkpoint == advice.layout.ac
    assert advise_long_sequence(_toml("7B"), 16, 80 * GIB, 32768).layout.cp == 4
    with pytest.raises(
        ValueError, match="does not fit 1 GPUs of 80.0 GiB at its micro-batch 4: at cp 1 under AC full"
    ):
        advise_long_sequence(_toml("1B"), 1, 80 * GIB, 32768)


def test_long_window_advice_recomputes_only_where_no_degree_fits_the_tomls_checkpointing():
    # the 1B keeps every activation (AC none) at its 4k window; at 32k on 8 GPUs no cp fits so, and the
    # advice is the smallest cp under the first mode that keeps less: full (lowrank has no latent at tp 1)
    advice = advise_long_sequence(_toml("1B"), 8, 80 * GIB, 32768)
    budget = usable_bytes(80 * GIB)
    assert (advice.toml_ac, advice.layout.ac, advice.layout.cp) == ("none", "full", 2)
    assert advice.toml_ac_peaks and all(peak > budget for peak in advice.toml_ac_peaks.values())
    assert advice.overrides().endswith("--boost.activation_checkpoint full")
    assert "AC none (the TOML's) fits at no cp: at cp 8 it peaks at" in advice.report()
    # the 7B's low-rank AC fits over cp 4 at 16 GPUs and is kept; at 4 GPUs only full AC fits (cp 4)
    kept = advise_long_sequence(_toml("7B"), 16, 80 * GIB, 32768)
    assert (kept.toml_ac, kept.layout.ac) == ("", "lowrank")
    assert "activation_checkpoint" not in kept.overrides()
    recomputed = advise_long_sequence(_toml("7B"), 4, 80 * GIB, 32768)
    assert (recomputed.toml_ac, recomputed.layout.ac) == ("lowrank", "full")
    assert max(recomputed.toml_ac_peaks.values()) > budget >= recomputed.peak


@pytest.mark.parametrize(
    ("scheme", "linear", "gate", "grouped", "tp"),
    [
        ("btp", "lax", "linear", True, 2),
        ("btp", "lax", "tensorized", False, 4),
        ("vanilla", "lax", "linear", False, 4),
        ("megatron", "full", "tensorized", False, 2),
    ],
)
def test_the_states_are_the_real_tp_ranks_parameters(tmp_path, scheme, linear, gate, grouped, tp):
    """A TP rank holds the sharded parameters' tp-th and the ones its plan replicates (LaX's gates and norms,
    the norms on a replicated residual) whole; FSDP shards what it holds. The TOML's boost.lax_gate and
    boost.group_linears choose the model. Counted on the real model, its TP plan applied on meta tensors over a
    fake process group of tp ranks (rank 0's local shards)."""
    import warnings

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from boost.training.model.args import ModelArgs
    from boost.training.model.model import Transformer
    from boost.training.parallel import apply_tp

    toml = tmp_path / "lax.toml"
    toml.write_text(
        f'[model]\nflavor = "debug"\n[training]\nseq_len = 64\nlocal_batch_size = 2\n'
        f"[parallelism]\ntensor_parallel_degree = {tp}\n"
        f'[boost]\nlinear = "{linear}"\ntp_scheme = "{scheme}"\nlax_gate = "{gate}"\n'
        f"group_linears = {str(grouped).lower()}\ntokenizer_vocab_size = 256\n"
    )
    layout = TrainingLayout.from_toml(toml)
    args = ModelArgs.from_flavor(
        "debug", linear=linear, vocab_size=256, rank=layout.rank, lax_gate=gate, group_linears=grouped
    )
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    try:
        with torch.device("meta"):
            model = Transformer(args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the ungrouped btp model's online norm runs "sync"
            apply_tp(model, init_device_mesh("cpu", (tp,)), scheme=scheme)
        held = sum((p._local_tensor if isinstance(p, DTensor) else p).numel() for p in model.parameters())
    finally:
        dist.destroy_process_group()
    dp = 2
    assert layout.peak(tp * dp, 1, breakdown=True)["states"] == pytest.approx(16 * held / dp, rel=1e-12)

"""The GPU report's pieces, on a machine with a GPU or without: log parsing and step-time arithmetic on real
trainer logs, kernel classification on real profiler names, the busy-fraction arithmetic, every row's
command through the preflight, the refusal where torch sees no GPU (a process of its own: the suite never
starts the report nor writes bench/results/gpu.md), and (slow) whole rows run through the report's
runner at CPU size, a refused and a timed-out one included.

The logs under tests/data/logs/ are real runs on this machine (2026-11-26): ``trainer_debug_ngpu1.log``
is ``NGPU=1 CONFIG_FILE=train_configs/debug.toml ./run_train.sh --training.steps 4 --metrics.log_freq 1
--checkpoint.no-enable --validation.no-enable``; ``dry_run_debug_tp2_pp2.log`` the same config with
``DRY_RUN=1 NGPU=8 --parallelism.tensor_parallel_degree 2 --parallelism.pipeline_parallel_degree 2
--training.local_batch_size 4 --training.seq_len 128 --compile.no-enable``; ``refused_7B_tp3.log`` a
preflight refusal; ``crash_no_module_ngpu1.log`` a rank that cannot start (``TRAIN_FILE`` naming no module).
``h100_7B_16_btp.log`` and ``h100_7B_16_megatron_nan_step8.log`` are two rows of the H100 report
(bench/results/gpu.md, ``--keep-logs``): the second stopped at step 8 of 10 on a NaN gradient.
``h200_7B_16_btp_simple_fsdp_cudagraphs.log`` is the H200 report's row (2026-11-28) that recorded its CUDA
graphs on step 3 (step 2 runs eagerly: the comm/step counter's).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bench import train_log
from bench.gpu_busy import BusySampler, busy_fraction, visible_gpu
from bench.gpu_report import LEAST_S, main, measure, run_rows, train_values
from bench.gpu_report_markdown import render
from bench.gpu_rows import ROWS, KernelRow, Result, TrainRow
from bench.kernel_split import KINDS, classify, split
from bench.rank_dry_run import summarize
from torchtitan_ext.infra.attention import kernel_problem
from torchtitan_ext.preflight import ConfigError, check_job, dry_run_rank
from torchtitan_ext.preflight.job_warnings import JobWarning

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TRAINER = (DATA / "logs" / "trainer_debug_ngpu1.log").read_text()
DRY_PP = (DATA / "logs" / "dry_run_debug_tp2_pp2.log").read_text()


def test_trainer_log_steps_layout_and_startup():
    steps = train_log.steps(TRAINER)
    assert [s.step for s in steps] == [1, 2, 3, 4]
    assert [s.tps for s in steps] == [223, 367, 560, 252]
    assert [s.memory_gib for s in steps] == [0.89, 0.94, 0.94, 0.94]
    assert all(s.mfu == 0.0 for s in steps)  # the debug model on a CPU: torchtitan prints 0.00%
    shape = train_log.layout(TRAINER)
    assert (shape.local_batch, shape.accumulation, shape.seq_len, shape.non_data_parallel) == (8, 1, 256, 1)
    assert train_log.startup_line(TRAINER).startswith("imports 6.9 s, config 0.2 s, tokenizer 1.3 s")
    assert train_log.startup_line(TRAINER).endswith("to step 1 18.2 s from process start")
    assert train_log.precision(TRAINER) == "float32"


def _logged_step_seconds(log: str) -> list[float]:
    """Each step's seconds between consecutive step lines (the log's own clock, ms resolution)."""
    steps = train_log.steps(log)
    return [b.time - a.time for a, b in zip(steps, steps[1:])]


@pytest.mark.parametrize("log", [TRAINER, DRY_PP], ids=["ngpu1", "tp2_pp2"])
def test_step_seconds_from_tps_are_the_steps_between_log_lines(log):
    """torchtitan's tps divides by tp·pp·cp: the step time undoes that division. Checked against the
    log's timestamps; tps is printed rounded to an integer (≤ 2% at these tps ≥ 40) and a step line is
    written a few ms after its step ends → within 3%."""
    shape = train_log.layout(log)
    from_tps = [train_log.step_seconds(s.tps, shape) for s in train_log.steps(log)[1:]]
    for computed, logged in zip(from_tps, _logged_step_seconds(log)):
        assert computed == pytest.approx(logged, rel=0.03)


def test_rank_dry_run_step_time_is_the_steps_not_tp_pp_times_it():
    shape = train_log.layout(DRY_PP)
    assert shape.degrees["tp"] == 2 and shape.degrees["pp"] == 2 and shape.non_data_parallel == 4
    row = summarize(DRY_PP)
    steady = train_log.steps(DRY_PP)[2:]
    assert row["tps"] == statistics.median(s.tps for s in steady) == 43.5  # steps 3, 4: 45 and 42
    logged = statistics.median(_logged_step_seconds(DRY_PP)[1:])  # steps 3 and 4
    assert row["step_s"] == pytest.approx(logged, rel=0.03)
    old = shape.local_batch * shape.seq_len / row["tps"]  # seq·batch / tps: the formula before
    assert old == pytest.approx(4 * row["step_s"])
    assert row["layout"] == "tp2 pp2 fsdp2 cp1"


def test_last_error_line_names_the_cause():
    refused = (DATA / "logs" / "refused_7B_tp3.log").read_text()
    assert train_log.last_error_line(refused).startswith(
        "BOOST config error: parallelism = 'tp×pp×dp_replicate×cp = 3'"
    )
    crash = (DATA / "logs" / "crash_no_module_ngpu1.log").read_text()
    # torchrun's ChildFailedError wraps the rank's failure: the rank's own line is the cause
    assert train_log.last_error_line(crash).endswith("No module named torchtitan_ext.no_such_module")
    assert train_log.last_error_line("") == "(no output)"


def test_kernel_kinds_of_a_real_cpu_profile():
    """Every op name of a real CPU profile of the debug CoLA step (bench.kernel_split --device cpu,
    inductor) gets a kind; the ones that carry the split are where they belong."""
    names = (DATA / "kernel_names_cpu_debug_cola.txt").read_text().split("\n")
    kinds = {name: classify(name) for name in names if name}
    assert set(kinds.values()) <= set(KINDS)
    assert kinds["aten::mm"] == kinds["aten::bmm"] == "GEMM"
    assert kinds["aten::_fused_adamw_"] == "optimizer"
    assert kinds["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] == "attention"
    fused = [n for n in kinds if "cpp_fused" in n]
    assert len(fused) > 10 and all(kinds[n] == "fused elementwise" for n in fused)
    assert kinds["aten::fill_"] == kinds["aten::copy_"] == "other"


@pytest.mark.parametrize(
    "name, kind",
    [  # kernel names as they appear in published H100/A100 profiles, and the 2026-11-26 measurement file
        ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "GEMM"),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_o",
            "GEMM",
        ),
        ("splitKreduce_kernel", "GEMM"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x", "attention"),
        ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 128, 4, ...>>", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention"),
        ("triton_poi_fused_add_mul_neg_select_select_backward_stack_transpose_view", "fused elementwise"),
        ("triton_poi_fused_mul_stack_view", "fused elementwise"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "fused elementwise"),
        ("triton_tem_fused_mm_0", "GEMM"),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>",
            "optimizer",
        ),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "other"),
        ("Memcpy HtoD (Pageable -> Device)", "other"),
    ],
)
def test_kernel_kinds_of_gpu_names(name, kind):
    assert classify(name) == kind


def test_split_sums_by_kind():
    times = [
        ("aten::mm", 3.0),
        ("graph_0_cpp_fused_mul_view_2", 2.0),
        ("aten::mm", 1.0),
        ("aten::fill_", 0.5),
    ]
    assert split(times) == {
        "GEMM": 4.0,
        "attention": 0.0,
        "fused elementwise": 2.0,
        "optimizer": 0.0,
        "other": 0.5,
    }


def test_busy_fraction_over_the_window():
    samples = [(10.0, 100.0), (10.1, 50.0), (10.2, 0.0), (10.3, 30.0), (10.4, 100.0)]
    assert busy_fraction(samples, 10.0, 10.3) == (pytest.approx(80 / 3 / 100), 3)  # (start, end]
    assert busy_fraction(samples, 9.0, 11.0) == (pytest.approx(0.56), 5)
    assert busy_fraction(samples, 10.31, 10.39) is None


def test_without_a_gpu_the_sampler_says_why():
    """The suite hides the GPU (``tests/conftest.py``): on a GPU machine too, the sampler reads none."""
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    with BusySampler() as sampler:
        pass
    assert sampler.samples == [] and sampler.error == "NVML: CUDA_VISIBLE_DEVICES='' hides every GPU"


def test_the_sampled_gpu_is_the_one_cuda_visible_devices_gives_device_0():
    assert visible_gpu({}) == 0
    assert visible_gpu({"CUDA_VISIBLE_DEVICES": "3,1"}) == 3
    assert visible_gpu({"CUDA_VISIBLE_DEVICES": "GPU-85066f12-9d7e"}) == "GPU-85066f12-9d7e"
    # hidden: sampling GPU 0 would measure a GPU the run does not use (the 2026-11-28 GPU suite did)
    assert visible_gpu({"CUDA_VISIBLE_DEVICES": ""}) is None
    assert visible_gpu({"CUDA_VISIBLE_DEVICES": "-1"}) is None


def test_a_rows_figures_and_busy_window_from_a_real_log():
    """The steady steps 3–4 of the tp2·pp2 dry run: tokens/s median 43.5, their step time, and the
    busy samples taken after step 2's line up to step 4's (a sample at each step line's time, one
    before the window and one after it that must not count)."""
    row = TrainRow("rank dry run", "debug@8", "debug", 8, (), 4, 3, 100, True)
    t = [s.time for s in train_log.steps(DRY_PP)]
    samples = [(t[1], 0.0), (t[1] + 0.1, 40.0), (t[2], 60.0), (t[3], 80.0), (t[3] + 0.1, 0.0)]
    v = train_values(row, DRY_PP, samples, None)
    assert v["tps"] == 43.5 and v["tps_range"] == (42, 45) and v["steps"] == "4 (steady 3–4)"
    assert v["busy"] == (pytest.approx(0.6), 3) and v["memory_gib"] == 0.63
    assert v["step_s"] == pytest.approx(4 * 128 / (43.5 * 4))
    failed = Result(ROWS[1], "failed", 1.0, "exit 1: torch.OutOfMemoryError: CUDA out of memory | x")
    text = render([Result(row, "ok", 30.0, values=v), failed], "CPU", "x", "today", "cmd", 1, "cache")
    assert (
        "| debug@8 | tp2 pp2 fsdp2 cp1 | 4 (steady 3–4) | 44 (42–45) | 2.943 | 0.0–0.0 | 0.63 | 60% (3) |"
        in text
    )
    assert "| 7B@16 megatron | **failed**: exit 1: torch.OutOfMemoryError: CUDA out of memory \\| x |" in text


def test_a_failed_row_keeps_the_steady_steps_it_logged_marked_as_failed():
    """The H100's 7B@16 megatron row stopped at step 8 of 10 (non-finite guard): its steps 3–8 still give
    its figures, the table marks the row failed, and the goal ratio says it came from a failed row."""
    rows = {r.name: r for r in ROWS}
    btp_log = (DATA / "logs" / "h100_7B_16_btp.log").read_text()
    megatron_log = (DATA / "logs" / "h100_7B_16_megatron_nan_step8.log").read_text()
    btp = Result(rows["7B@16 btp"], "ok", 39.0, values=train_values(rows["7B@16 btp"], btp_log, [], None))
    megatron = Result(rows["7B@16 megatron"], "failed", 28.0, train_log.last_error_line(megatron_log))
    megatron.values = train_values(rows["7B@16 megatron"], megatron_log, [], None)
    assert megatron.values["steps"] == "8 of 10 (steady 3–8)"
    assert megatron.values["tps"] == statistics.median([9040, 9173, 8782, 9268, 8935, 9095])
    text = render([btp, megatron], "H100", "x", "today", "cmd", 1, "cache")
    assert (
        "| 7B@16 megatron (**failed**: [rank0]: torchtitan_ext.guards.nonfinite_guard.NonFiniteLossError"
        in text
    )
    assert "| 8 of 10 (steady 3–8) | 9,068 (8,782–9,268) |" in text
    ratio = btp.values["tps"] / megatron.values["tps"]
    assert f"| ≥ 1.6× | {ratio:.2f}× (a row failed: from the steps it logged) |" in text


def test_a_cuda_graph_rows_steady_steps_are_its_replays():
    """The H200's SimpleFSDP + CUDA graphs row ran step 2 eagerly and recorded its graphs on step 3
    (1,601 and 1,621 tokens/s): its figure is the median of steps 4–10 (16,273), not of 3–10 (15,514,
    the report's)."""
    row = {r.name: r for r in ROWS}["7B@16 btp simple_fsdp cudagraphs"]
    log = (DATA / "logs" / "h200_7B_16_btp_simple_fsdp_cudagraphs.log").read_text()
    assert [s.tps for s in train_log.steps(log)][1:4] == [1601, 1621, 16298]
    v = train_values(row, log, [], None)
    assert v["steps"] == "10 (steady 4–10)"
    assert v["tps"] == 16273 and v["tps_range"] == (14167, 16317)


@pytest.mark.slow
def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    """On any machine: the report runs in a process where torch sees no GPU (on a GPU machine too, where
    calling ``main`` here would start the 8-minute report and write bench/results/gpu.md), told to
    write elsewhere and given no time for a row."""
    report = ROOT / "bench" / "results" / "gpu.md"
    before = report.read_bytes()
    out = tmp_path / "gpu.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gpu_report", "--out", str(out), "--budget-s", "0"],
        cwd=ROOT,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-3000:]
    assert "needs a CUDA GPU" in proc.stderr
    assert not out.exists() and report.read_bytes() == before


def _run_train_argv(row: TrainRow, dump_folder: Path, tmp_path: Path) -> list[str]:
    """The arguments run_train.sh hands the trainer's launcher for ``row``: the script itself run with
    the row's environment and, in place of Python, a program that prints its arguments."""
    show = tmp_path / "show_argv"
    show.write_text('#!/bin/sh\nprintf "%s\\0" "$@"\n')
    show.chmod(0o755)
    argv, env = row.command(str(dump_folder))
    # VIRTUAL_ENV set: run_train.sh runs $PYTHON rather than the checkout's .venv
    env = dict(os.environ, **env, PYTHON=str(show), VIRTUAL_ENV=str(tmp_path))
    shown = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=True, timeout=60).stdout
    args = shown.decode().split("\0")[:-1]
    assert args[:2] == ["-m", "torchtitan_ext.start"], args
    return args[2:]


def test_every_report_row_passes_the_preflight_at_its_process_count(tmp_path):
    """A row the preflight refuses would fail on the GPU, in the report's minutes: each run_train.sh row's
    command, as run_train.sh hands it on (a DRY_RUN row: rank 0 of a fake process group of NGPU
    ranks, or its DRY_RUN_RANK), passes the preflight at its NGPU."""
    rows = [r for r in ROWS if isinstance(r, TrainRow)]
    kernel_rows = sum(isinstance(r, KernelRow) for r in ROWS)
    assert len(rows) == len(ROWS) - kernel_rows  # the kernel-split rows run no trainer
    for row in rows:
        args = _run_train_argv(row, tmp_path / "run", tmp_path)
        assert args[:2] == ["--job.config_file", f"train_configs/{row.config}.toml"]
        assert ("--comm.mode" in args) == row.dry_run
        assert dry_run_rank(row.command("x")[1].get("DRY_RUN_RANK"), row.ngpu, row.dry_run) == row.rank
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JobWarning)  # bf16 on a CPU, and what else a job may hear
            try:
                check_job(args, row.ngpu)
            except ConfigError as e:
                # a kernel this machine's torch does not train (FlexAttention on a CPU) is refused here by the
                # probe the preflight runs on the machine's own device: the GPU's preflight asks its own
                attn_type = args[args.index("--boost.attn_type") + 1] if "--boost.attn_type" in args else None
                problem = kernel_problem(attn_type) if attn_type else None
                if problem is None or problem not in str(e):
                    pytest.fail(f"{row.section}: {row.name}: {e}")


def test_dry_check_lists_every_row_and_its_command(capsys):
    assert main(["--dry-check"]) == 0
    out = capsys.readouterr().out
    names = [r.name for r in ROWS]
    # "1B CoLA", "1B LaX", "1B LaX kron" and "1B dense" each name a trainer row and a kernel row
    assert len(set(names)) == len(names) - 4
    for config, ngpu in (("3B", 8), ("7B", 16)):
        for scheme in ("btp", "vanilla", "megatron"):
            assert f"rank dry run: {config}@{ngpu} {scheme}" in out
    assert "NGPU=16 CONFIG_FILE=train_configs/30B.toml DRY_RUN=1 ./run_train.sh --training.steps 10 " in out
    # the last stage of 30B's pp 4 at 16: tp 4 ranks a stage, the fourth stage's first rank
    assert (
        "30B@16 btp last stage" in out
        and "NGPU=16 CONFIG_FILE=train_configs/30B.toml DRY_RUN=1 DRY_RUN_RANK=12 " in out
    )
    assert "NGPU=1 CONFIG_FILE=train_configs/1B.toml ./run_train.sh --training.steps 12" in out
    assert "--boost.linear full --boost.tp_scheme megatron" in out
    assert "python -m bench.kernel_split --linear cola --warmup 3 --timed 5 --profiled 2" in out


def test_rows_past_the_budget_are_not_run():
    results = run_rows(list(ROWS), LEAST_S - 1, {})
    assert [r.status for r in results] == ["not run"] * len(ROWS)
    assert results[0].error == f"the {LEAST_S - 1} s budget was spent"


@pytest.mark.slow
def test_rows_run_fail_and_time_out_into_the_report(tmp_path):
    """The report's runner on real rows at CPU size: one that runs (its figures parsed, no busy figure
    since the suite hides the GPU, its log and its sampler's record kept), one refused, one past its
    timeout, one kernel split (its log kept, and beside it the JSON of every kernel's time); none
    raises, and the markdown shows each."""
    tiny = ("--training.seq_len", "64", "--training.local_batch_size", "2", "--compile.no-enable")
    kept_log = tmp_path / "trainer_debug.log"
    ran = measure(TrainRow("trainer", "debug", "debug", 1, tiny, 3, 2, 300), 300, keep_log=kept_log)
    assert ran.status == "ok", ran.error
    assert ran.values["layout"] == "tp1 pp1 fsdp1 cp1" and ran.values["steps"] == "3 (steady 2–3)"
    assert ran.values["step_s"] > 0 and ran.values["startup"].startswith("imports")
    assert ran.values["busy"] is None and ran.values["busy_note"].startswith("NVML: ")
    assert train_log.steps(kept_log.read_text())[-1].step == 3
    busy = json.loads((tmp_path / "trainer_debug.busy.json").read_text())
    assert busy == {"samples": [], "error": ran.values["busy_note"]}
    refused = measure(
        TrainRow(
            "rank dry run",
            "7B@16 tp3",
            "7B",
            16,
            ("--parallelism.tensor_parallel_degree", "3"),
            2,
            2,
            300,
            True,
        ),
        300,
    )
    assert refused.status == "failed" and "BOOST config error: parallelism" in refused.error
    late = measure(TrainRow("rank dry run", "7B@16 late", "7B", 16, (), 2, 2, 300, True), 3)
    assert late.status == "timed out" and late.error.startswith("after 3 s")
    cpu_step = ("--device", "cpu", "--flavor", "debug", "--seq", "32", "--batch", "1", "--no-autocast")
    kernels = measure(
        KernelRow(
            "debug",
            (*cpu_step, "--compile-backend", "aot_eager"),
            300,
            steps={"warmup": 1, "timed": 1, "profiled": 1},
        ),
        300,
        keep_log=tmp_path / "kernel_split_debug.log",
    )
    assert kernels.status == "ok", kernels.error
    kept = json.loads((tmp_path / "kernel_split_debug.json").read_text())
    assert kept["by_name"] == kernels.values["by_name"] and (tmp_path / "kernel_split_debug.log").exists()
    # each kernel's launches a step beside its time (one profiled step: whole counts)
    assert kept["calls_by_name"].keys() == kept["by_name"].keys()
    assert all(n >= 1 and n == int(n) for n in kept["calls_by_name"].values())
    assert (
        kernels.values["kernel_us_per_step"]["GEMM"] > 0
        and kernels.values["kernel_us_per_step"]["optimizer"] > 0
    )
    text = render(
        [ran, refused, late, kernels, Result(ROWS[-1], "not run", error="budget")],
        "CPU",
        "x",
        "today",
        "cmd",
        1,
        "cache",
    )
    assert "| debug | 3 (steady 2–3) |" in text
    assert "| 7B@16 tp3 | **failed**: exit 2: BOOST config error" in text
    assert "| 7B@16 late | **timed out**: after 3 s" in text
    assert "| 30B@16 btp last stage | **not run**: budget |" in text
    assert "| 7B@16 btp: tokens/s per device | ≥ 15,800 | row not measured |" in text

"""``bench.trace_gaps`` reads a torch.profiler trace: where the GPU waits, and where the host's time goes.

A CPU trace is a real profile of a training step taken here; the GPU trace is written out event by event
(no GPU on this machine), the shape kineto gives a CUDA step: host ops, the launches inside them, and the
kernels the launches correlate with.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from bench import trace_gaps


def _shares(report: str) -> dict[str, float]:
    """The host table's rows: phase → ms."""
    table = report[report.index("## Host time by phase") :]
    return {m[1]: float(m[2]) for m in re.finditer(r"^\| (.+?) \| ([\d.]+) \| [\d.]+% \|$", table, re.M)}


def test_a_cpu_step_is_the_hosts_time_split_by_phase(tmp_path: Path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.SiLU(), torch.nn.Linear(256, 64))
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(32, 64)
    trace = tmp_path / "trace.json"
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),  # as torchtitan's profiler writes it
    ) as prof:
        for _ in range(2):
            model(x).square().mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            prof.step()

    report = trace_gaps.analyse(trace_gaps.load(trace), min_gap_us=10, top=50)
    step_ms = float(re.search(r"^# ProfilerStep#\d+: ([\d.]+) ms; no GPU activity", report, re.M).group(1))
    shares = _shares(report)
    assert {"optimizer", "grad norm", "autograd backward (eager op)", trace_gaps.BETWEEN_OPS} <= shares.keys()
    # one thread: each op's own time, nested ops taken out once, adds up to the step, to the table's rounding
    # (each row to 0.01 ms: a step of 0.9 ms on a fast machine, 15 rows, summed to 0.83)
    assert "(each op's own time; 1 thread)" in report
    assert abs(sum(shares.values()) - step_ms) <= 0.01 * step_ms + 0.005 * (len(shares) + 1), (
        shares,
        step_ms,
    )


def _x(name: str, cat: str, ts: float, dur: float, tid: int = 1, corr: int | None = None) -> dict:
    event = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid}
    if corr is not None:
        event["args"] = {"correlation": corr}
    return event


def test_a_gpu_gap_is_charged_to_the_phase_that_launched_the_work_ending_it(tmp_path: Path):
    events = [
        _x("ProfilerStep#3", "user_annotation", 0, 1000),
        # forward: a compiled region launches kernel 1 at once
        _x("CompiledFunction", "cpu_op", 10, 90),
        _x("cudaLaunchKernel", "cuda_runtime", 20, 5, corr=1),
        _x("triton_fwd", "kernel", 30, 100, tid=7, corr=1),
        # then the optimizer's host work: its launch comes late, the GPU idles from 130 to 700
        _x("Optimizer.step#AdamW.step", "cpu_op", 200, 600),
        _x("aten::_foreach_add_", "cpu_op", 650, 100),
        _x("cudaLaunchKernel", "cuda_runtime", 690, 5, corr=2),
        _x("multi_tensor_apply_kernel", "kernel", 700, 200, tid=7, corr=2),
        # the gradient norm's foreach norm, outside the optimizer: not the optimizer's
        _x("aten::_foreach_norm", "cpu_op", 900, 50),
    ]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))

    report = trace_gaps.analyse(trace_gaps.load(trace), min_gap_us=10, top=15)
    assert "# ProfilerStep#3: 1.0 ms; GPU busy 0.3 ms (30.0%), idle 0.7 ms" in report
    idle = report[report.index("## Idle time by the phase") : report.index("## Idle time by the innermost")]
    assert "| optimizer | 1 | 0.57 |" in idle  # 130 → 700 µs, ended by the optimizer's launch
    host = _shares(report)
    # the optimizer's own time less its foreach op's, the foreach op under the optimizer's phase too
    assert host["optimizer"] == 0.6 and host["compiled forward"] == 0.09
    assert host["grad norm"] == 0.05
    assert host[trace_gaps.BETWEEN_OPS] == 0.26  # 1 ms less the three ops

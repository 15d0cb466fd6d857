"""Where the GPU waits and where the host's time goes, read off one torch.profiler trace of a training step.

    python -m bench.trace_gaps TRACE.json[.gz] [--min-gap-us 10] [--top 15]

The step is the trace's ``ProfilerStep#N`` span (the whole trace where there is none). On the device:
the union of kernels, copies and sets over that span (busy), and each idle stretch between them (a gap).
A gap ends when the next GPU activity starts; the host event that launched it (``cudaLaunchKernel``,
``cuLaunchKernel``…, matched by correlation id) sits inside a stack of host ops on its thread, and the gap
is charged to that stack: its outermost op that names a phase (a compiled region, FSDP's hooks, the
optimizer, autograd's backward of an op) and its innermost op. A gap with a synchronising call on the
host inside it (``cudaStreamSynchronize``, ``cudaMemcpy`` to the host, ``cudaMalloc``/``cudaFree``) is
also counted under that call: the host was waiting or the allocator was, not launching.

On the host, every thread's ops over the span: each op's own time (its duration less its nested ops'),
by the phase its stack names, the step's own annotation's time being the Python between ops. A CPU-only
trace (a CPU run, no device activity) gets this table alone: there the step is the host's.

Printed: the step's busy fraction, the gaps by size, the idle time by phase and by innermost op, the
synchronising calls, the kernels that took the most device time, and the host's time by phase. Only the
standard library: it runs wherever the trace is (``python -m bench.trace_gaps`` on the GPU machine, or here on a copy).
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}
HOST_CATEGORIES = {"cpu_op", "user_annotation", "python_function"}
# calls during which the host waits on the device, or the caching allocator on the driver
SYNCING = re.compile(
    r"Synchronize|cudaMemcpy(?!Async)|cudaMalloc|cudaFree|cudaHostAlloc|cudaEventSynchronize"
)
# host ops that name a phase of the step, outermost first wins (a gap is charged to the first found)
PHASES = (
    # the gradient norm's one foreach norm (boost.training.parallel.grad_norm) before the optimizer's foreach ops
    (re.compile(r"clip_grad|grad_norm|linalg_vector_norm|_foreach_norm"), "grad norm"),
    (re.compile(r"Optimizer\.|optimizer|_foreach_|fused_adam"), "optimizer"),
    (re.compile(r"FSDP::|fsdp"), "FSDP2 hooks"),
    (
        re.compile(r"CompiledFunctionBackward|## Call CompiledFxGraph.*backward|CompiledFxGraph.*bw"),
        "compiled backward",
    ),
    (re.compile(r"Torch-Compiled Region|CompiledFunction|CompiledFxGraph"), "compiled forward"),
    (re.compile(r"autograd::engine::evaluate_function"), "autograd backward (eager op)"),
    (re.compile(r"nll_loss|cross_entropy|log_softmax"), "loss"),
)


@dataclass(frozen=True)
class Span:
    name: str
    start: float  # µs
    end: float

    @property
    def dur(self) -> float:
        return self.end - self.start


def load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def step_window(events: list[dict]) -> Span:
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    if steps:
        last = max(steps, key=lambda e: e["ts"])
        return Span(last["name"], float(last["ts"]), float(last["ts"]) + float(last["dur"]))
    timed = [e for e in events if e.get("ph") == "X" and "dur" in e]
    return Span(
        "whole trace",
        min(float(e["ts"]) for e in timed),
        max(float(e["ts"]) + float(e["dur"]) for e in timed),
    )


def union(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for s in sorted(spans, key=lambda s: s.start):
        if merged and s.start <= merged[-1].end:
            if s.end > merged[-1].end:
                merged[-1] = Span(merged[-1].name, merged[-1].start, s.end)
        else:
            merged.append(s)
    return merged


def host_stacks(events: list[dict], launches: list[dict]) -> dict[int, list[str]]:
    """Each launch event's enclosing host ops (outermost first), by correlation id: one sweep a thread."""
    by_thread: dict[object, list[tuple[float, int, float, str, int | None]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in HOST_CATEGORIES:
            by_thread[e.get("tid")].append(
                (float(e["ts"]), 0, float(e["ts"]) + float(e["dur"]), e["name"], None)
            )
    for e in launches:
        corr = e.get("args", {}).get("correlation")
        by_thread[e.get("tid")].append((float(e["ts"]), 1, float(e["ts"]), e["name"], corr))
    stacks: dict[int, list[str]] = {}
    for items in by_thread.values():
        # at one time, the longer op encloses the shorter; launches after the ops that start with them
        items.sort(key=lambda it: (it[0], it[1], -it[2]))
        stack: list[tuple[float, str]] = []
        for start, is_launch, end, name, corr in items:
            while stack and stack[-1][0] <= start:
                stack.pop()
            if is_launch:
                if corr is not None:
                    stacks[corr] = [n for _, n in stack]
            else:
                stack.append((end, name))
    return stacks


BETWEEN_OPS = "(the step's Python, between ops)"


def phase_of(stack: list[str]) -> str:
    for name in stack:
        for pattern, phase in PHASES:
            if pattern.search(name):
                return phase
    return stack[0] if stack else "(no host op)"


def host_time_by_phase(events: list[dict], window: Span) -> tuple[Counter, int]:
    """The host ops' own time inside ``window`` (each op's duration less its nested ops', clipped to the
    window), by the phase its stack names (``phase_of``; the step's own annotation names none, so its own
    time is the Python between ops); and how many threads ran host ops there. Threads add up: on a GPU
    the backward runs on autograd's thread while the main thread waits, outside any op."""
    by_thread: dict[object, list[tuple[float, float, str]]] = defaultdict(list)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in HOST_CATEGORIES:
            continue
        start, end = max(float(e["ts"]), window.start), min(float(e["ts"]) + float(e["dur"]), window.end)
        if end > start:
            by_thread[e.get("tid")].append((start, end, str(e["name"])))
    own = Counter()

    def close(stack: list[list], until: float) -> None:
        while stack and stack[-1][0] <= until:
            names = [n for _, n, _ in stack if not n.startswith("ProfilerStep#")]
            own[phase_of(names) if names else BETWEEN_OPS] += stack.pop()[2]

    for items in by_thread.values():
        items.sort(key=lambda it: (it[0], -it[1]))
        stack: list[list] = []  # [end, name, own time] of the ops open at this time, outermost first
        for start, end, name in items:
            close(stack, start)
            if stack:  # the time from here to its end is its child's, not the parent's own
                stack[-1][2] -= min(end, stack[-1][0]) - start
            stack.append([end, name, end - start])
        close(stack, float("inf"))
    return own, len(by_thread)


def host_table(own: Counter, threads: int, top: int) -> list[str]:
    total = sum(own.values())
    lines = [
        "",
        f"## Host time by phase (each op's own time; {threads} thread{'s' if threads != 1 else ''})",
        "",
        "| phase | ms | share |",
        "|---|---|---|",
    ]
    for phase, us in own.most_common(top):
        lines.append(f"| {phase[:110]} | {us / 1e3:.2f} | {100 * us / max(total, 1e-9):.1f}% |")
    return lines


def analyse(events: list[dict], min_gap_us: float, top: int) -> str:
    window = step_window(events)
    device = [
        e for e in events
        if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES
        and float(e["ts"]) < window.end and float(e["ts"]) + float(e["dur"]) > window.start
    ]  # fmt: skip
    own, threads = host_time_by_phase(events, window)
    if not device:
        lines = [
            f"# {window.name}: {window.dur / 1e3:.1f} ms; no GPU activity in the trace (a CPU-only profile): "
            "the step is the host's",
            *host_table(own, threads, top),
        ]
        return "\n".join(lines) + "\n"
    spans = [
        Span(e["name"], max(float(e["ts"]), window.start), min(float(e["ts"]) + float(e["dur"]), window.end))
        for e in device
    ]
    busy = union(spans)
    busy_us = sum(s.dur for s in busy)
    starts = {}
    for e in device:  # the GPU activity that starts at each busy stretch's start, by correlation
        starts.setdefault(round(max(float(e["ts"]), window.start), 3), e)
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") in LAUNCH_CATEGORIES]
    stacks = host_stacks(events, launches)
    syncs = sorted(
        (
            Span(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            for e in launches
            if SYNCING.search(e["name"])
        ),
        key=lambda s: s.start,
    )
    sync_starts = [s.start for s in syncs]

    gaps: list[tuple[Span, list[str], str]] = []
    edges = [Span("step start", window.start, window.start), *busy, Span("step end", window.end, window.end)]
    for before, after in zip(edges, edges[1:]):
        gap = Span("", before.end, after.start)
        if gap.dur < min_gap_us:
            continue
        nxt = starts.get(round(after.start, 3))
        corr = nxt.get("args", {}).get("correlation") if nxt else None
        stack = stacks.get(corr, []) if corr is not None else []
        if nxt is None and after.name == "step end":
            stack = ["(the step's end: no GPU work after it)"]
        i = bisect.bisect_left(sync_starts, gap.start - 1e6)
        waiting = ""
        for s in syncs[i:]:
            if s.start > gap.end:
                break
            if s.end > gap.start and s.start < gap.end:
                waiting = s.name
                break
        gaps.append((gap, stack, waiting))

    idle_us = window.dur - busy_us
    lines = [
        f"# {window.name}: {window.dur / 1e3:.1f} ms; "
        f"GPU busy {busy_us / 1e3:.1f} ms ({100 * busy_us / window.dur:.1f}%), "
        f"idle {idle_us / 1e3:.1f} ms; {len(device)} GPU activities, {len(launches)} launch/runtime calls",
        "",
        f"Gaps ≥ {min_gap_us:g} µs: {len(gaps)}, {sum(g.dur for g, _, _ in gaps) / 1e3:.1f} ms "
        f"({100 * sum(g.dur for g, _, _ in gaps) / max(idle_us, 1e-9):.0f}% of the idle time)",
        "",
        "| gap size | gaps | ms |",
        "|---|---|---|",
    ]
    for lo, hi in ((min_gap_us, 50), (50, 200), (200, 1000), (1000, 1e12)):
        sel = [g.dur for g, _, _ in gaps if lo <= g.dur < hi]
        if sel:
            label = f"{lo:g}–{hi:g} µs" if hi < 1e12 else f"≥ {lo:g} µs"
            lines.append(f"| {label} | {len(sel)} | {sum(sel) / 1e3:.2f} |")

    def table(title: str, counter: Counter, counts: Counter) -> None:
        lines.extend(
            ["", f"## {title}", "", "| where | gaps | idle ms | share of idle |", "|---|---|---|---|"]
        )
        for key, us in counter.most_common(top):
            lines.append(
                f"| {key[:110]} | {counts[key]} | {us / 1e3:.2f} | {100 * us / max(idle_us, 1e-9):.1f}% |"
            )

    by_phase, n_phase = Counter(), Counter()
    by_inner, n_inner = Counter(), Counter()
    by_sync, n_sync = Counter(), Counter()
    for gap, stack, waiting in gaps:
        phase = phase_of(stack)
        by_phase[phase] += gap.dur
        n_phase[phase] += 1
        inner = stack[-1] if stack else "(no host op)"
        by_inner[inner] += gap.dur
        n_inner[inner] += 1
        if waiting:
            by_sync[waiting] += gap.dur
            n_sync[waiting] += 1
    table("Idle time by the phase that launched the work ending the gap", by_phase, n_phase)
    table("Idle time by the innermost host op of that launch", by_inner, n_inner)
    if by_sync:
        table("Gaps with a synchronising call on the host inside them", by_sync, n_sync)
    biggest = sorted(gaps, key=lambda g: -g[0].dur)[:top]
    lines.extend(
        [
            "",
            "## The largest gaps",
            "",
            "| µs | at ms | launched under (outermost … innermost) | host call inside |",
            "|---|---|---|---|",
        ]
    )
    for gap, stack, waiting in biggest:
        shown = stack if len(stack) <= 3 else [*stack[:2], "…", stack[-1]]
        where = " › ".join(shown) if stack else "(no host op)"
        lines.append(
            f"| {gap.dur:.0f} | {(gap.start - window.start) / 1e3:.2f} | {where[:160]} | {waiting} |"
        )
    kernels = Counter()
    for s in spans:
        kernels[s.name] += s.dur
    lines.extend(["", "## Device time by kernel", "", "| kernel | ms | share of busy |", "|---|---|---|"])
    for name, us in kernels.most_common(top):
        lines.append(f"| {name[:110]} | {us / 1e3:.2f} | {100 * us / busy_us:.1f}% |")
    host = Counter()
    for e in launches:
        if window.start <= float(e["ts"]) <= window.end:
            host[e["name"]] += float(e["dur"])
    lines.extend(["", "## Host time in CUDA runtime/driver calls", "", "| call | ms |", "|---|---|"])
    for name, us in host.most_common(8):
        lines.append(f"| {name} | {us / 1e3:.2f} |")
    lines.extend(host_table(own, threads, top))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", type=Path)
    p.add_argument("--min-gap-us", type=float, default=10.0)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args(argv)
    if not a.trace.is_file():
        print(f"bench.trace_gaps: no trace at {a.trace}", file=sys.stderr)
        return 2
    print(analyse(load(a.trace), a.min_gap_us, a.top), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The host work of one training step of the 7B's rank, at negligible compute: time and what it issues.

    python -m bench.host_step                          # this checkout -> bench/results/host_step.md
    python -m bench.host_step --baseline /work/main    # another checkout beside it, interleaved
    python -m bench.host_step --fsdp fully_shard simple_fsdp   # this checkout under both boost.fsdp

The rank is the 7B TOML's as shipped (CoLA, compiled model and loss, bf16 via FSDP2, its AC, fused
AdamW, grad-norm clipping, metrics) as rank 0 of 16 (``DRY_RUN=1``: torchtitan's fake process group,
tp 4 × FSDP 4, every collective a no-op), with the widths cut to the debug flavor's (dim 256, ffn
704, r 64, 8 heads, MHA as the 7B) at the 7B's 32 layers, sequence 16, micro-batch 1, a 2048-token
vocabulary. A step's arithmetic is then small, so its wall time on a CPU is mostly the host's time to
issue it — what a GPU step of the same rank waits for when the host is the bottleneck — plus the
compiled graphs' own kernels, which a CPU runs itself (at these widths mostly per-kernel fixed costs:
the ``graph bodies`` column). Per scheme (the
TOML's btp; vanilla and megatron with ``bench.rank_dry_run``'s overrides), one fresh process runs the
real trainer (``torchtitan_ext.train.BoostTrainer``) and reports:

- ``step``: the median time between the starts of consecutive steps over the steady steps (after the
  first, which compiles, and the second, which the communication counter runs eagerly), i.e. the whole
  loop iteration: ``train_step`` and what torchtitan's loop runs between steps (the stop check, the
  checkpointer, the GC handler);
- ``ops``: the median over the same steps of each step's time in units of one eager dispatch of a
  tiny op (``torch.add`` of two 4-element tensors, the mean of 1000) timed just before that step: a
  machine twice as loaded doubles both, not their ratio;
- over one ordinary step (neither a log nor a stop-check step), under ``torch.profiler`` (CPU
  activity only; a separate step, not one of the timed ones):
  ``dispatches``: every operator the dispatcher records (a profiler event ``ns::op`` naming a
  ``torch.ops`` operator: aten, c10d, functional collectives, FSDP's ops) that is not inside a
  compiled graph (no ancestor event is a compiled region). Nested dispatches count too (a DTensor op
  and the local op it runs, ``aten::linear`` and its ``aten::mm``): each costs the host a trip through
  the dispatcher. Inductor's own kernels record no event; the ATen kernels a compiled graph calls
  (``extern_kernels.mm``) are inside its region and do not count. This is the count the goal is about:
  the work that is paid for per op, in Python and the dispatcher, on every step;
  ``graphs``: compiled-graph calls (forward: ``CompiledFunction`` regions, backward:
  ``CompiledFunctionBackward``; inference-only graphs such as a compiled loss without grad are
  ``Torch-Compiled Region`` events with no ``CompiledFunction`` inside, counted too);
  ``syncs``: host syncs the step's code asks for: ``aten::_local_scalar_dense`` (the op
  ``boost.runtime.comm_counter.CommCounter`` counts: ``.item()``, ``bool(t)``) outside any other operator
  but ``aten::item``/``aten::is_nonzero`` (CPU's fused AdamW reads each parameter's step count inside
  its kernel, which CUDA's does on the device: not a sync on a GPU, not counted), and device-to-host
  copies (none on a CPU; ``Memcpy DtoH`` where a GPU runs it).

``graph bodies``: the profiled step's time inside the inductor graphs' own runs (``## Call CompiledFxGraph``
events): on a CPU the graphs' kernels run there, at these widths mostly fixed costs per kernel;
``step − bodies``: the step's median less that, the time outside the graphs (Python, the dispatcher,
FSDP's hooks, the optimizer): the host's share that no GPU takes over.

``--fsdp fully_shard simple_fsdp`` runs this checkout's schemes under each ``boost.fsdp`` (a row
each; SimpleFSDP with the reshard policy "default" it needs); a baseline runs its own default.
``--baseline DIR`` runs each scheme in DIR too (``PYTHONPATH=DIR``, DIR's ``train_configs``), alternating
with this checkout, so both sit in one run of the machine; the table gives the ratios. ``--reps N``
runs each N times, interleaved: the times are the medians over the runs (the counts repeat; ``step − bodies``
is each run's own difference, then the median).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "host_step.md"
SCHEMES = ("btp", "vanilla", "megatron")
FLAVOR = "host_bench"  # debug widths at the 7B's depth, registered in the child only
# bench.rank_dry_run's overrides (restated: this file runs in a baseline checkout too)
SCHEME_OVERRIDES = {
    "btp": [],
    "vanilla": [
        "--boost.tp_scheme", "vanilla", "--boost.no-group-linears", "--boost.norm", "sync",
        "--boost.activation_checkpoint", "full",
    ],
    "megatron": [
        "--boost.linear", "full", "--boost.tp_scheme", "megatron", "--boost.activation_checkpoint", "full",
    ],
}  # fmt: skip
# boost.fsdp of this checkout's runs (a baseline runs its own default): torch's FSDP2, or torchtitan's
# SimpleFSDP traced into the compiled blocks (which keeps no reshard policy: "default"). Restated from
# bench.gpu_rows.SIMPLE_FSDP, as SCHEME_OVERRIDES are: this file runs in a baseline checkout too.
FSDP_OVERRIDES = {
    "fully_shard": [],
    "simple_fsdp": ["--boost.fsdp", "simple_fsdp", "--parallelism.fsdp_reshard_after_forward", "default"],
}
COMPILED_FORWARD = "CompiledFunction"
COMPILED_BACKWARD = "CompiledFunctionBackward"
COMPILED_REGION = "Torch-Compiled Region"
GRAPH_BODY = "## Call CompiledFxGraph"  # an inductor graph's own run, inside its compiled region


def child_argv(scheme: str, steps: int, dump: str, log_freq: int, extra: list[str]) -> list[str]:
    return [
        "--job.config_file", "train_configs/7B.toml",
        "--comm.mode", "fake_backend",
        "--model.flavor", FLAVOR,
        "--boost.tokenizer_vocab_size", "2048",
        "--training.seq_len", "16",
        "--training.local_batch_size", "1",
        "--training.steps", str(steps),
        "--metrics.log_freq", str(log_freq),
        "--checkpoint.no-enable",
        "--validation.no-enable",
        "--job.dump_folder", dump,
        *SCHEME_OVERRIDES[scheme],
        *extra,
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------- the child


def _tiny_op_s(reps: int = 1000) -> float:
    """Seconds of one eager ``torch.add`` of two 4-element tensors, the mean over ``reps``."""
    import torch

    a, b = torch.ones(4), torch.ones(4)
    start = time.perf_counter()
    for _ in range(reps):
        torch.add(a, b)
    return (time.perf_counter() - start) / reps


def _is_operator(name: str, known: dict[str, bool]) -> bool:
    """Whether a profiler event's name is a dispatched operator (``ns::op`` or ``ns::op.overload``)."""
    if name not in known:
        import torch

        parts = name.split("::")
        ok = False
        if len(parts) == 2 and parts[0] and parts[1]:
            try:
                ok = hasattr(getattr(torch.ops, parts[0]), parts[1].split(".")[0])
            except (AttributeError, RuntimeError):
                ok = False
        known[name] = ok
    return known[name]


def _in_compiled(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith((COMPILED_REGION, COMPILED_FORWARD)):
            return True
        parent = parent.cpu_parent
    return False


def _nested(event, known: dict[str, bool]) -> bool:
    """Whether an operator event runs inside another operator (a composite's parts, a CPU foreach
    op's per-tensor loop, a DTensor op's local op): not a dispatch the step's Python code issued."""
    parent = event.cpu_parent
    while parent is not None:
        if _is_operator(parent.name, known):
            return True
        parent = parent.cpu_parent
    return False


def count_events(events) -> dict:
    """Dispatches outside compiled graphs, compiled-graph calls and host syncs among profiler events."""
    known: dict[str, bool] = {}
    dispatches = top_level = syncs = forward = backward = regions_without_forward = 0
    graph_us = 0.0
    by_op: dict[str, int] = {}
    for e in events:
        name = e.name
        if name.startswith(GRAPH_BODY):
            graph_us += e.time_range.elapsed_us()
        if name.startswith(COMPILED_BACKWARD):
            backward += 1
        elif name.startswith(COMPILED_FORWARD):
            forward += 1
        elif name.startswith(COMPILED_REGION):
            if not any(c.name.startswith(COMPILED_FORWARD) for c in _descendants(e)):
                regions_without_forward += 1
        if not _is_operator(name, known) or _in_compiled(e):
            continue
        dispatches += 1
        top_level += not _nested(e, known)
        by_op[name] = by_op.get(name, 0) + 1
        if name == "aten::_local_scalar_dense" and _asked_by_python(e, known):
            syncs += 1
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:25]
    return dict(
        dispatches=dispatches,
        top_level=top_level,
        graphs=forward + backward + regions_without_forward,
        graphs_fwd=forward,
        graphs_bwd=backward,
        graphs_other=regions_without_forward,
        syncs=syncs,
        graph_ms=graph_us / 1e3,
        top_ops=top,
    )


def _asked_by_python(event, known: dict[str, bool]) -> bool:
    """A host read that the step's code asked for (``.item()``, ``bool(t)``: its only operator
    ancestors are ``aten::item``/``aten::is_nonzero``), counted once however many tensor subclasses
    pass it on; not one a kernel makes inside itself (CPU's fused AdamW reads each step count so;
    CUDA's takes it on the device)."""
    parent = event.cpu_parent
    while parent is not None:
        if _is_operator(parent.name, known) and parent.name not in ("aten::item", "aten::is_nonzero"):
            return False
        parent = parent.cpu_parent
    return True


def _descendants(event):
    stack = list(event.cpu_children)
    while stack:
        e = stack.pop()
        yield e
        stack.extend(e.cpu_children)


def _d2h_copies(events) -> int:
    """Device-to-host copies: ``aten::copy_`` events whose source is not on the CPU (shapes not needed:
    on a CPU there are none; on a GPU torch.profiler's CUDA activity names them ``Memcpy DtoH``)."""
    return sum(1 for e in events if "Memcpy DtoH" in e.name)


def run_child(scheme: str, steps: int, profile_step: int, log_freq: int, extra: list[str]) -> dict:
    os.environ.update(DRY_RUN="1", NGPU="16", RANK="0", LOCAL_RANK="0", WORLD_SIZE="16")
    try:  # a --baseline checkout from before boost/ was grouped (9967d6a) has the flavors here
        from boost.model.args import FLAVORS, Flavor
    except ModuleNotFoundError:
        from boost.training.model.args import FLAVORS, Flavor

    FLAVORS[FLAVOR] = Flavor(256, FLAVORS["7B"].n_layers, 8, 8, 704, "debug widths at the 7B's depth")
    import torch
    from torchtitan.config import ConfigManager

    from torchtitan_ext.train import BoostTrainer
    from torchtitan_ext.train_spec import register_boost_train_spec

    register_boost_train_spec()
    starts: list[tuple[int, float]] = []
    ends: list[float] = []  # ends[i + 1]: the end of step starts[i]
    tiny: list[float] = []  # a tiny op's time, measured just before each step
    profiled: dict = {}
    with tempfile.TemporaryDirectory(prefix="host_step_") as dump:
        config = ConfigManager().parse_args(child_argv(scheme, steps, dump, log_freq, extra))
        trainer = BoostTrainer(config)
        inner = trainer.train_step
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])

        def train_step(data_iterator):
            step = trainer.step
            if step == profile_step + 1:
                prof.__exit__(None, None, None)
                profiled["events"] = prof.events()
            if step != profile_step + 1:  # the step after the profiled one starts late: not timed
                ends.append(time.perf_counter())  # the previous step ends where this one's yardstick starts
                tiny.append(_tiny_op_s())
                starts.append((step, time.perf_counter()))
            if step == profile_step:
                prof.__enter__()
            inner(data_iterator)

        trainer.train_step = train_step
        trainer.train()
        trainer.close()
    steady = [
        (ends[i + 1] - a, tiny[i])
        for i, ((sa, a), (sb, _)) in enumerate(zip(starts, starts[1:]))
        if sb == sa + 1 and sa > 2 and sa != profile_step
    ]
    events = profiled["events"]
    counts = count_events(events)
    counts["syncs"] += _d2h_copies(events)
    return dict(
        scheme=scheme,
        step_ms=statistics.median(s for s, _ in steady) * 1e3,
        tiny_us=statistics.median(t for _, t in steady) * 1e6,
        ops=statistics.median(s / t for s, t in steady),  # each step in its own yardstick
        steady_ms=[round(s * 1e3, 1) for s, _ in steady],
        **counts,
    )


# --------------------------------------------------------------------------------------- the parent


def _label(path: Path) -> str:
    head = subprocess.run(
        ["git", "-C", str(path), "log", "-1", "--format=%h"], capture_output=True, text=True
    )
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain"], capture_output=True, text=True)
    return f"{path.name} @ {head.stdout.strip()}" + (" (+ uncommitted)" if dirty.stdout.strip() else "")


def measure(tree: Path, scheme: str, steps: int, profile_step: int, log_freq: int, extra: list[str]) -> dict:
    """One scheme in a fresh process, ``tree``'s code and configs (this script runs there by its path)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p),
        OMP_NUM_THREADS="1",
        TORCHINDUCTOR_CACHE_DIR=os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp/inductor-host-step"),
    )
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--child", scheme,
        "--steps", str(steps), "--profile-step", str(profile_step), "--log-freq", str(log_freq), "--", *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("HOST_STEP ")]
    if proc.returncode or not lines:
        raise SystemExit(f"{tree} {scheme}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-4000:]}")
    return json.loads(lines[-1].removeprefix("HOST_STEP "))


def aggregate(runs: list[dict]) -> dict:
    """One row from a checkout's runs of a scheme: the counts of the last (they repeat run to run), each time
    the median over the runs; ``outside_ms`` (the step less its graph bodies) is taken per run first, then its
    median, so it never sets one run's step against another's bodies."""
    row = dict(runs[-1])
    for key in ("step_ms", "ops", "graph_ms"):
        row[key] = statistics.median(r[key] for r in runs)
    row["outside_ms"] = statistics.median(r["step_ms"] - r["graph_ms"] for r in runs)
    return row


def _cell(r: dict, base: dict | None, key: str, fmt: str) -> str:
    text = format(r[key], fmt)
    return f"{text} (÷{base[key] / r[key]:.2f})" if base is not None else text


def table(rows: list[tuple[str, dict]], ratios_to: dict[str, dict] | None) -> list[str]:
    """Rows of the markdown table (``aggregate``'s rows); beside a checkout's row, each figure as before/after
    (``ratios_to``)."""
    head = (
        "| checkout | scheme | step ms | step in tiny ops | graph bodies ms | step − bodies ms | dispatches"
        " | top-level dispatches | graph calls (fwd/bwd/other) | host syncs |"
    )
    out = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in rows:
        base = (ratios_to or {}).get(r["scheme"])
        base = base if base is not r else None
        out.append(
            f"| {label} | {r['scheme']} | {_cell(r, base, 'step_ms', '.0f')} | {_cell(r, base, 'ops', ',.0f')} | "
            f"{r['graph_ms']:.0f} | {_cell(r, base, 'outside_ms', '.0f')} | "
            f"{_cell(r, base, 'dispatches', ',')} | {_cell(r, base, 'top_level', ',')} | "
            f"{r['graphs']} ({r['graphs_fwd']}/{r['graphs_bwd']}/{r['graphs_other']}) | {r['syncs']} |"
        )
    return out


def child_parser() -> argparse.ArgumentParser:
    """The child's command line (``measure``'s): plain types, nothing imported from ``bench`` — the child runs
    this file under a baseline checkout's ``PYTHONPATH``, whose ``bench`` may predate what this one imports."""
    p = argparse.ArgumentParser(prog="bench/host_step.py --child")
    p.add_argument("--child", choices=list(SCHEMES), required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--profile-step", type=int, required=True)
    p.add_argument("--log-freq", type=int, required=True)
    p.add_argument("overrides", nargs="*")
    return p


def parser() -> argparse.ArgumentParser:
    # this checkout's bench: the parent runs here (child_parser says why the child imports none)
    from boost.runtime.cli_types import positive_int

    p = argparse.ArgumentParser(
        prog="python -m bench.host_step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES))
    p.add_argument(
        "--baseline", type=Path, help="another checkout measured beside this one (e.g. /work/main)"
    )
    p.add_argument(
        "--reps", type=positive_int, default=1, help="fresh processes per checkout and scheme, interleaved"
    )
    p.add_argument(
        "--fsdp",
        nargs="+",
        default=["fully_shard"],
        choices=list(FSDP_OVERRIDES),
        help="boost.fsdp of this checkout's runs, a row each (a baseline runs its own default)",
    )
    p.add_argument(
        "--steps", type=positive_int, default=11, help="steps per run (1: compile, 2: counted eagerly)"
    )
    p.add_argument("--profile-step", type=int, default=7, help="the ordinary step profiled (not timed)")
    p.add_argument("--log-freq", type=int, default=10, help="metrics.log_freq (the 7B TOML's 10)")
    p.add_argument("--out", type=Path, default=None, help=f"append the table here (e.g. {RESULTS})")
    p.add_argument("--top", action="store_true", help="print each run's most frequent dispatches")
    p.add_argument("overrides", nargs="*", help="after --: more trainer overrides, for every run")
    return p


def profile_step_problem(steps: int, profile_step: int) -> str | None:
    """Why ``--profile-step`` cannot be profiled in a run of ``steps`` steps, or ``None``: ``run_child`` profiles
    an ordinary step (after the first, which compiles, and the second, counted eagerly), closes the profiler
    at the next step's start, and times each pair of consecutive steps from the third on that neither is the
    profiled one nor starts late after it: at least one must be left."""
    if not 3 <= profile_step < steps:
        return f"{profile_step} must be a step from 3 (1 compiles, 2 is counted eagerly) to --steps - 1 = {steps - 1}"
    if not set(range(3, steps)) - {profile_step, profile_step + 1}:
        return f"{profile_step} leaves no two consecutive steps timed in --steps {steps}: raise --steps"
    return None


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        c = child_parser().parse_args(argv)
        result = run_child(c.child, c.steps, c.profile_step, c.log_freq, c.overrides)
        print("HOST_STEP " + json.dumps(result), flush=True)
        return
    from bench.run_command import command_as_run  # this checkout's (child_parser: why)

    p = parser()
    a = p.parse_args(argv)
    if (problem := profile_step_problem(a.steps, a.profile_step)) is not None:
        p.error(f"argument --profile-step: {problem}")
    # the runs of one scheme: (label, tree, overrides); a baseline first, in its own default
    runners = [(_label(a.baseline.resolve()), a.baseline.resolve(), [])] if a.baseline else []
    runners += [
        (_label(ROOT) + ("" if fsdp == "fully_shard" else f" {fsdp}"), ROOT, FSDP_OVERRIDES[fsdp])
        for fsdp in a.fsdp
    ]
    rows: list[tuple[str, dict]] = []
    first: dict[str, dict] = {}  # per scheme, the first runner's row: the ratios' base
    for scheme in a.schemes:
        runs: dict[str, list[dict]] = {label: [] for label, _, _ in runners}
        for _ in range(a.reps):
            for label, tree, fsdp_overrides in runners:
                r = measure(
                    tree, scheme, a.steps, a.profile_step, a.log_freq, [*fsdp_overrides, *a.overrides]
                )
                runs[label].append(r)
                print(
                    f"{label} {scheme}: {r['step_ms']:.0f} ms, {r['ops']:,.0f} tiny ops, {r['dispatches']:,} "
                    f"dispatches ({r['top_level']:,} top-level), {r['graphs']} graphs, {r['syncs']} syncs "
                    f"(tiny op {r['tiny_us']:.2f} µs; steady {r['steady_ms']})",
                    flush=True,
                )
                if a.top:
                    print("   ", r["top_ops"], flush=True)
        for label, _, _ in runners:
            r = aggregate(runs[label])
            first.setdefault(scheme, r)
            rows.append((label, r))
    lines = [
        f"## {datetime.date.today()}: {', '.join(label for label, _, _ in runners)}",
        "",
        f"`{command_as_run('bench.host_step', p, a)}`",
        "",
        *table(rows, first if len(runners) > 1 else None),
        "",
    ]
    print("\n".join(lines))
    if a.out:
        with a.out.open("a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

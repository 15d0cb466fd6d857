"""Dry-run the shipped 1B–30B flavors, every linear kind, at their real world size on this machine, and tabulate.

Each row runs as rank 0 of ``NGPU`` on torchtitan's fake process group (``DRY_RUN=1 ./run_train.sh``:
one process, no communication): the real layout, pipeline stages included, the real model shard, real
training steps. A row is a flavor's TOML (``train_configs/{flavor}.toml``: CoLA, BTP) with its kind's
overrides (``torchtitan_ext.config.linear_kind_overrides``: svd; lax; full with its TP scheme, Megatron,
and full AC where the TOML's lowrank AC does not apply to it), as shipped except a short sequence,
micro-batch 1 (``pp`` micro-batches under PP, so 1F1B fills), fp32 instead of bf16 (bf16 GEMMs are slow
on CPU), ``--compile.backend aot_eager`` where compile is on, and no checkpoint or validation (a 7B
checkpoint shard would be gigabytes of disk; validation is 20 × 4096-token batches).

    python -m bench.dry_run -- --compile.no-enable       # every row, eager -> bench/results/dry_run.md
    python -m bench.dry_run --rows 7B_cola 30B_cola --steps 1 --seq-len 64 --out /tmp/dr.md -- --compile.no-enable
    # a long window over context parallelism (each rank s/cp of it) at a world size of your own
    python -m bench.dry_run --rows 7B_cola 7B_lax --steps 1 --seq-len 32768 --cp 16 --world-size 64 \
        --out bench/results/dry_run_32k.md -- --compile.no-enable

A run keeps the rows ``--out`` already holds that it does not rerun, provided they were made at the same
settings (``--steps``, ``--seq-len``, ``--cp``, ``--world-size`` and the overrides after ``--``, read from
the command the file's header names); a file made at other settings is refused, not mixed under one header.

Columns: peak RSS of the process; the per-rank memory ``boost.planning.layout_planner.memory_per_gpu``
predicts for the layout (fp32, no GPU workspace); wall seconds to the first step's log line, and CPU
seconds of the whole process, user + system, to its exit (the machine is shared: CPU seconds are the
steadier number). A dry-run rank should stay within ``1.5 × predicted + PROCESS_OVERHEAD`` (Python, torch,
torchtitan and the tokenizer in memory). Under PP rank 0 holds the first stage: the loss is the last
stage's, and the gradients arriving from stage 1 are zeros (nothing arrives on a fake process group), so
the table shows no loss there.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from bench.child_process import Lines, kill_group
from bench.run_command import command_as_run
from boost.planning.layout_planner import memory_per_gpu
from boost.runtime.cli_types import positive_int
from boost.training.data.run_tokenizer import with_overrides
from boost.training.rules import data_parallel_degree, reshards_after_forward
from torchtitan_ext.config import linear_kind_overrides

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "dry_run.md"
# The world size each flavor is dry-run at: TP × PP as its TOML says, FSDP filling the rest
# (the paper's GPU counts and beyond: 7B at 16, 30B at 32).
WORLD_SIZES = {"1B": 8, "3B": 8, "7B": 16, "13B": 32, "30B": 32}
KINDS = ("full", "svd", "cola", "lax")
# Resident memory of a trainer process besides the model: Python, torch, torchtitan, triton, the
# tokenizer and the data loader (peak RSS of the whole debug-model dry run, NGPU=2: 0.61 GiB).
PROCESS_OVERHEAD = 1.0 * 2**30
MEMORY_SLACK = 1.5


@dataclass
class DryRun:
    flavor: str
    kind: str
    world_size: int
    tp: int
    pp: int
    dp: int
    fsdp: int
    layout: str
    peak_rss: float
    predicted: float
    cpu_s: float
    first_step_s: float
    build_init_s: float
    losses: list[float]
    grad_norms: list[float]
    global_batch: int
    note: str = ""

    @property
    def within_prediction(self) -> bool:
        return self.peak_rss <= MEMORY_SLACK * self.predicted + PROCESS_OVERHEAD

    def row(self) -> str:
        gib = 2**30
        ratio = f"{self.peak_rss / (self.predicted + PROCESS_OVERHEAD):.2f}"
        # torchtitan logs -1 where the rank holds no last stage
        losses = " ".join(f"{l:.3f}" for l in self.losses) if self.pp == 1 else "— (stage 0)"
        return (
            f"| {self.flavor} | {self.kind} | {self.world_size} | {self.layout} | {self.peak_rss / gib:.2f} | "
            f"{self.predicted / gib:.2f} | {ratio} | {self.build_init_s:.0f} | {self.first_step_s:.0f} | "
            f"{self.cpu_s:.0f} | {losses} | {self.note} |"
        )


def shipped_rows() -> list[tuple[str, str]]:
    return [(f, k) for f in WORLD_SIZES for k in KINDS]


def row_name(flavor: str, kind: str) -> str:
    return f"{flavor}_{kind}"


def flavor_toml(flavor: str) -> dict:
    return tomllib.loads((ROOT / "train_configs" / f"{flavor}.toml").read_text())


def _layout(config: dict, world_size: int) -> tuple[int, int, int, int]:
    """``(tp, pp, dp, fsdp)`` of the config at ``world_size``: ``dp`` batches per step
    (``boost.training.rules.data_parallel_degree``, torchtitan's defaults for the fields the TOML leaves out),
    ``fsdp`` the data-parallel ranks each replica shards the weights and optimizer states over (FSDP's mesh
    is ``fsdp × cp`` under context parallelism: ``memory_per_gpu`` takes ``cp`` beside it)."""
    par = config["parallelism"]
    tp, pp = par.get("tensor_parallel_degree", 1), par.get("pipeline_parallel_degree", 1)
    replicate = par.get("data_parallel_replicate_degree", 1)
    dp = data_parallel_degree(
        world_size,
        tp=tp,
        pp=pp,
        cp=par.get("context_parallel_degree", 1),
        dp_replicate=replicate,
        dp_shard=par.get("data_parallel_shard_degree", -1),
    )
    return tp, pp, dp, dp // replicate


def predicted_bytes(config: dict, world_size: int, seq_len: int) -> float:
    """``boost.planning.layout_planner``'s per-rank memory for the config's layout, fp32, no GPU workspace."""
    tp, pp, _, fsdp = _layout(config, world_size)
    boost, compiled = config["boost"], config.get("compile", {}).get("enable", False)
    par = config["parallelism"]
    return memory_per_gpu(
        config["model"]["flavor"],
        boost["tp_scheme"],
        tp,
        pp,
        fsdp,
        boost["activation_checkpoint"],
        micro_batch=1,
        seq_len=seq_len,
        num_microbatches=max(pp, 1),
        linear=boost["linear"],
        dtype_bytes=4,
        workspace_bytes=0,
        compiled=compiled,
        reshard_after_forward=reshards_after_forward(
            par.get("fsdp_reshard_after_forward", "default"), pp > 1
        ),
        cp=par.get("context_parallel_degree", 1),
        attn_type=boost.get("attn_type", "sdpa"),
        attn_mask_type=boost.get("attn_mask_type", "causal"),
        sequence_parallel=boost.get("sequence_parallel", False),
    )


def row_arguments(flavor: str, kind: str, steps: int, seq_len: int, extra: list[str], dump: str) -> list[str]:
    """The trainer's arguments for one row (after ``CONFIG_FILE=train_configs/<flavor>.toml``)."""
    toml = flavor_toml(flavor)
    overrides = [*linear_kind_overrides(kind, toml), *extra]
    config = with_overrides(toml, overrides)
    pp = config["parallelism"].get("pipeline_parallel_degree", 1)
    compile_args = ["--compile.backend", "aot_eager"] if config.get("compile", {}).get("enable") else []
    return [
        "--training.steps", str(steps),
        "--training.seq_len", str(seq_len),
        "--training.local_batch_size", str(max(pp, 1)),  # one micro-batch per pipeline stage in flight
        "--parallelism.pipeline_parallel_microbatch_size", "1",
        "--training.mixed_precision_param", "float32",
        *compile_args,
        "--checkpoint.no-enable",
        "--validation.no-enable",
        "--metrics.log_freq", "1",
        "--job.dump_folder", dump,
        *overrides,
    ]  # fmt: skip


def row_problem(
    flavor: str, kind: str, world_size: int, steps: int, seq_len: int, extra: list[str]
) -> str | None:
    """What the trainer's preflight rules refuse in a row's job at ``world_size`` (``None``: nothing): the
    run_train.sh preflight's rule table on the same arguments, before any row starts."""
    from boost.training.config_error import ConfigError
    from torchtitan_ext.config import DRY_RUN_COMM_MODE
    from torchtitan_ext.preflight.check import check_values
    from torchtitan_ext.preflight.read import read_job

    argv = [
        "--job.config_file", str(ROOT / "train_configs" / f"{flavor}.toml"), "--comm.mode", DRY_RUN_COMM_MODE,
        *row_arguments(flavor, kind, steps, seq_len, extra, "outputs/dry_run_check"),
    ]  # fmt: skip
    try:
        check_values(read_job(argv), world_size)
    except ConfigError as e:
        return str(e)
    return None


def dry_run(
    flavor: str, kind: str, world_size: int, steps: int, seq_len: int, extra: list[str], timeout: float
) -> DryRun:
    """One (flavor, kind) as rank 0 of ``world_size``; raises ``RuntimeError`` with the log's tail if it fails."""
    toml = flavor_toml(flavor)
    overrides = [*linear_kind_overrides(kind, toml), *extra]
    config = with_overrides(toml, overrides)
    tp, pp, dp, fsdp = _layout(config, world_size)
    with tempfile.TemporaryDirectory(prefix="dry_run_") as dump:
        cmd = ["./run_train.sh", *row_arguments(flavor, kind, steps, seq_len, extra, dump)]
        env = dict(
            os.environ,
            DRY_RUN="1",
            DRY_RUN_RANK="0",  # the rows are rank 0's (stage 0 under PP), whatever the caller's environment
            NGPU=str(world_size),
            CONFIG_FILE=f"train_configs/{flavor}.toml",
            PYTHON=sys.executable,
        )
        returncode, log, first_step, usage = run_logged(cmd, env, timeout)
    if returncode != 0 or first_step is None:
        raise RuntimeError(f"{flavor} {kind} at {world_size}: exit {returncode}\n" + log[-4000:])
    stamps = {
        key: _stamp(log, pattern)
        for key, pattern in (("built", r"total parameters"), ("ready", r"Trainer is initialized"))
    }
    scheme = config["boost"]["tp_scheme"] if tp > 1 else ""
    ac = config["boost"]["activation_checkpoint"]
    return DryRun(
        flavor=flavor,
        kind=kind,
        world_size=world_size,
        tp=tp,
        pp=pp,
        dp=dp,
        fsdp=fsdp,
        layout=f"tp{tp} pp{pp}{cp_layout(config)} fsdp{fsdp} {scheme} ac={ac}".replace("  ", " "),
        peak_rss=usage.ru_maxrss * 1024,
        predicted=predicted_bytes(config, world_size, seq_len),
        cpu_s=usage.ru_utime + usage.ru_stime,
        first_step_s=first_step,
        build_init_s=stamps["ready"] - stamps["built"],
        losses=[float(v) for v in re.findall(r"step:\s+\d+\s+\S*loss:\s+(-?[\d.]+)", log)],
        grad_norms=[float(v) for v in re.findall(r"grad_norm:\s+(\S+?)\s", _plain(log))],
        global_batch=int(re.search(r"global batch size (\d+)", log).group(1)),
        note=" ".join(_without_linear(overrides)),
    )


def run_logged(cmd: list[str], env: dict, timeout: float) -> tuple[int, str, float | None, os.struct_rusage]:
    """Run ``cmd`` (in the checkout, its own process group) to its exit or ``timeout`` seconds, whichever
    comes first; its exit code, its output (a last line saying so where it was stopped), the wall seconds
    to its first step's log line (``None``: none logged), and its resource usage. Lines are read on a
    thread: a child that hangs without printing is stopped at the deadline all the same."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # the launcher, torchrun and the rank are killed together
    )  # fmt: skip
    reader, lines, first_step = Lines(proc), [], None
    try:
        while (line := reader.next(start + timeout)) is not None:
            lines.append(line)
            if first_step is None and re.search(r"step:\s+1\s", line):
                first_step = time.perf_counter() - start
    except TimeoutError:
        lines.append(f"bench.dry_run: stopped after --timeout {timeout:g} s\n")
    finally:
        kill_group(proc)
        _, status, usage = os.wait4(proc.pid, 0)  # not proc.wait(): the usage is the exit's
    return os.waitstatus_to_exitcode(status), "".join(lines), first_step, usage


def cp_layout(config: dict) -> str:
    """`` cpN`` where the config shards its windows over ``N`` context-parallel ranks, else nothing."""
    cp = config["parallelism"].get("context_parallel_degree", 1)
    return f" cp{cp}" if cp > 1 else ""


def _without_linear(overrides: list[str]) -> list[str]:
    """The overrides less ``--boost.linear <kind>`` (the table's kind column says it)."""
    at = overrides.index("--boost.linear")
    return overrides[:at] + overrides[at + 2 :]


def _plain(log: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", log)  # torchtitan colours its metrics line


def _stamp(log: str, pattern: str) -> float:
    match = re.search(r"(\d\d):(\d\d):(\d\d),(\d\d\d) - root - INFO - .*" + pattern, log)
    if match is None:
        raise RuntimeError(f"no log line matching {pattern!r}")
    h, m, s, ms = (int(g) for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


HEADER = """# Dry runs of the shipped flavors at their real world size (rank 0, fake process group)

`{command}` on this machine (2 CPU cores, shared), {date}. fp32, seq {seq_len}, micro-batch 1,
{steps} step(s); {compile_note}.{kept}
A row is `train_configs/{{flavor}}.toml` (CoLA, BTP) with its kind's overrides
(`torchtitan_ext.config.linear_kind_overrides`, listed under "overrides"): lax runs the TOML's layout, PP
included (its carry crosses the stages); full is the dense model under Megatron TP, with full AC where
the TOML's lowrank AC does not apply to it (the TOML's own AC otherwise: the 1B's none).
`predicted` is `boost.planning.layout_planner.memory_per_gpu` for the layout (fp32, without the GPU workspace);
`ratio` is peak RSS / (predicted + {overhead:.1f} GiB process overhead). build+init: from the model's size
line to "Trainer is initialized" (model on meta, parallelise, materialise, seeded init of this rank's
shard). Wall-clock columns depend on the shared machine's load; CPU s (the whole process) is the
steadier number. Losses are rank 0's view on a process group that delivers nothing (FSDP's all-gathers
hold rank 0's shard alone): a sign that the step ran and stayed finite, not the model's loss.
PP runs for real: rank 0 holds pipeline stage 0 (its layers, the embedding, `pp` micro-batches in
flight), so there is no loss to show (it is the last stage's), and the gradients it receives from
stage 1 are zeros (nothing arrives on the fake process group). FSDP rank 0 holds its share of every
parameter (the batched `[G, d_out, r]` up-projections are sharded on `r`).

{columns}
"""
COLUMNS = (
    "flavor",
    "kind",
    "world",
    "layout",
    "peak RSS GiB",
    "predicted GiB",
    "ratio",
    "build+init s",
    "first step s (wall)",
    "CPU s",
    "losses",
    "overrides",
)


def write_table(rows: dict[tuple[str, str], str], path: Path, **header) -> None:
    order = {r: i for i, r in enumerate(shipped_rows())}
    body = "".join(rows[r] + "\n" for r in sorted(rows, key=lambda r: order.get(r, len(order))))
    columns = "| " + " | ".join(COLUMNS) + " |\n" + "|---" * len(COLUMNS) + "|"
    path.write_text(HEADER.format(columns=columns, **header) + body)


def _existing_rows(path: Path) -> dict[tuple[str, str], str]:
    if not path.is_file():
        return {}
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and (cells[1], cells[2]) in shipped_rows():
            rows[cells[1], cells[2]] = line
    return rows


# what a row's numbers depend on besides its flavor and kind: rows kept in one file agree on these
SETTINGS = ("steps", "seq_len", "cp", "world_size", "extra")


def settings(opts: argparse.Namespace) -> dict:
    return {name: getattr(opts, name) for name in SETTINGS}


def file_settings(path: Path, parser: argparse.ArgumentParser) -> dict | None:
    """The settings of the command ``path``'s header names (``None``: it names none this parser reads)."""
    match = re.search(r"^`(python -m bench\.dry_run(?: [^`]*)?)`", path.read_text(), re.M)
    if match is None:
        return None
    try:
        return settings(parser.parse_args(shlex.split(match.group(1))[3:]))
    except SystemExit:  # argparse's exit on a command it cannot read
        return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.dry_run", description=__doc__.split("\n\n")[0])
    names = [row_name(*r) for r in shipped_rows()]
    p.add_argument("--rows", nargs="*", default=names, help="flavor_kind, e.g. 7B_cola 30B_full")
    p.add_argument("--steps", type=positive_int, default=2)
    p.add_argument("--seq-len", type=positive_int, default=256)
    p.add_argument(
        "--max-predicted-gib",
        type=float,
        default=14.0,
        help="skip (and say so) rows predicted above this: the machine is shared",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per row")
    p.add_argument(
        "--cp", type=positive_int, default=1, help="context-parallel degree (each rank s/cp of a window)"
    )
    p.add_argument(
        "--world-size", type=positive_int, default=None, help="NGPU for every row (default: WORLD_SIZES)"
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "extra", nargs="*", help="after --: more overrides for every run, e.g. -- --compile.no-enable"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser_ = parser()
    opts = parser_.parse_args(argv)
    names = [row_name(*r) for r in shipped_rows()]
    unknown = [r for r in opts.rows if r not in names]
    if unknown:
        parser_.error(f"--rows: {unknown} are not shipped 1B..30B rows; choose from {names}")
    if opts.timeout <= 0:
        parser_.error(f"--timeout {opts.timeout:g}: seconds per row, more than 0")
    extra = (
        ["--parallelism.context_parallel_degree", str(opts.cp), *opts.extra] if opts.cp > 1 else opts.extra
    )
    configs = {}
    for name in opts.rows:
        flavor, kind = name.split("_")
        toml = flavor_toml(flavor)
        configs[name] = with_overrides(toml, [*linear_kind_overrides(kind, toml), *extra])
        world = opts.world_size or WORLD_SIZES[flavor]
        problem = row_problem(flavor, kind, world, opts.steps, opts.seq_len, extra)
        if problem is not None:  # the trainer's preflight would refuse the row: say so before any row runs
            parser_.error(f"row {name} at {world} ranks: {problem}")
    rows = _existing_rows(opts.out)
    if rows:
        theirs = file_settings(opts.out, parser_)
        if theirs != settings(opts):
            parser_.error(
                f"--out {opts.out} holds rows made at {theirs or 'settings its header does not name'}, this run's "
                f"are {settings(opts)}: pass another --out (or remove the file) rather than mix them under one header"
            )
    kept = sorted({row_name(*r) for r in rows} - set(opts.rows))
    failed = 0
    compiled = "--compile.no-enable" not in opts.extra

    def save() -> None:
        compile_note = (
            "compiled as shipped (`--compile.backend aot_eager`)"
            if compiled
            else "eager: `--compile.no-enable` for every row (compiled rows: `dry_run_compiled.md`)"
        )
        write_table(
            rows,
            opts.out,
            command=command_as_run("bench.dry_run", parser_, opts),
            date=time.strftime("%Y-%m-%d"),
            seq_len=opts.seq_len,
            steps=opts.steps,
            overhead=PROCESS_OVERHEAD / 2**30,
            compile_note=compile_note,
            kept=(
                f"\nRows {', '.join(kept)}: kept from earlier runs of this command's settings (steps, seq, cp, "
                "world size, overrides)."
                if kept
                else ""
            ),
        )

    for name in opts.rows:
        flavor, kind = name.split("_")
        world = opts.world_size or WORLD_SIZES[flavor]
        predicted = predicted_bytes(configs[name], world, opts.seq_len)
        if predicted > opts.max_predicted_gib * 2**30:
            print(
                f"{name}: skipped, predicted {predicted / 2**30:.1f} GiB > --max-predicted-gib "
                f"{opts.max_predicted_gib}",
                flush=True,
            )
            rows[flavor, kind] = (
                f"| {flavor} | {kind} | {world} | | | {predicted / 2**30:.2f} | | | | | | skipped: "
                f"predicted above --max-predicted-gib {opts.max_predicted_gib} |"
            )
            save()
            continue
        try:
            result = dry_run(flavor, kind, world, opts.steps, opts.seq_len, list(extra), opts.timeout)
        except RuntimeError as err:
            failed += 1
            print(f"{name}: FAILED\n{err}", flush=True)
            rows[flavor, kind] = (
                f"| {flavor} | {kind} | {world} | | | {predicted / 2**30:.2f} | | | | | | "
                "FAILED: see console |"
            )
            save()
            continue
        print(result.row(), flush=True)
        rows[flavor, kind] = result.row()
        save()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Dry-run the shipped 1B–30B configs at their real world size on this machine, and tabulate.

Each config runs as rank 0 of ``NGPU`` on torchtitan's fake process group (``DRY_RUN=1 ./run_train.sh``:
one process, no communication): the real layout, the real model shard, real training steps. As shipped
except a short sequence, micro-batch 1 (``pp`` micro-batches under PP, so 1F1B fills), fp32 instead of
bf16 (bf16 GEMMs are slow on CPU), ``--compile.backend aot_eager`` where compile is on, and no
checkpoint or validation (a 7B checkpoint shard would be gigabytes of disk; validation is 20 × 4096-token
batches). Configs with PP run with it folded into FSDP: torch 2.13's pipeline stages exchange shape
metadata (``recv_object_list``) that a fake process group never delivers.

    python -m bench.dry_run                              # every shipped 1B..30B config -> bench/results/dry_run.md
    python -m bench.dry_run --configs 7B_cola 30B_cola --steps 1 --seq-len 64

Columns: peak RSS of the process; the per-rank memory ``boost.plan.memory_per_gpu`` predicts for the
layout (fp32, no GPU workspace); CPU seconds and wall seconds to the first step's log line (the
machine is shared: CPU seconds are the steadier number). A dry-run rank should stay within
``1.5 × predicted + PROCESS_OVERHEAD`` (Python, torch, torchtitan and the tokenizer in memory).
"""

from __future__ import annotations

import argparse
import os
import re
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

from boost.plan import memory_per_gpu

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "dry_run.md"
# The world size each flavour is dry-run at: TP × PP as its TOML says, FSDP filling the rest
# (the paper's GPU counts and beyond: 7B at 16, 30B at 32).
WORLD_SIZES = {"1B": 8, "3B": 8, "7B": 16, "13B": 32, "30B": 32}
KINDS = ("full", "svd", "cola", "lax")
# Resident memory of a trainer process besides the model: Python, torch, torchtitan, triton, the
# tokenizer and the data loader (peak RSS of the whole debug-model dry run, NGPU=2: 0.61 GiB).
PROCESS_OVERHEAD = 1.0 * 2**30
MEMORY_SLACK = 1.5


@dataclass
class DryRun:
    config: str
    world_size: int
    layout: str
    peak_rss: float
    predicted: float
    cpu_s: float
    first_step_s: float
    build_init_s: float
    losses: list[float]
    global_batch: int
    note: str = ""

    @property
    def within_prediction(self) -> bool:
        return self.peak_rss <= MEMORY_SLACK * self.predicted + PROCESS_OVERHEAD

    def row(self) -> str:
        gib = 2**30
        ratio = f"{self.peak_rss / (self.predicted + PROCESS_OVERHEAD):.2f}"
        return (f"| {self.config} | {self.world_size} | {self.layout} | {self.peak_rss / gib:.2f} | "
                f"{self.predicted / gib:.2f} | {ratio} | {self.build_init_s:.0f} | {self.first_step_s:.0f} | "
                f"{self.cpu_s:.0f} | {' '.join(f'{l:.3f}' for l in self.losses)} | {self.note} |")


def shipped_configs() -> list[str]:
    return [f"{f}_{k}" for f in WORLD_SIZES for k in KINDS]


def _layout(toml: dict, world_size: int, extra: list[str] = ()) -> tuple[int, int, int]:
    """(tp, pp, fsdp) of the TOML, or of ``--parallelism.*_degree`` overrides among ``extra``."""
    par = dict(toml["parallelism"])
    for flag, value in zip(extra, list(extra[1:]) + [""]):
        if flag.startswith("--parallelism.") and flag.endswith("_degree"):
            par[flag.removeprefix("--parallelism.")] = int(value)
    tp, pp = par.get("tensor_parallel_degree", 1), par.get("pipeline_parallel_degree", 1)
    return tp, pp, world_size // (tp * pp)


def predicted_bytes(config: str, world_size: int, seq_len: int, extra: list[str] = ()) -> float:
    """``boost.plan``'s per-rank memory for the config's layout, fp32, no GPU workspace."""
    toml = tomllib.loads((ROOT / "train_configs" / f"{config}.toml").read_text())
    tp, pp, dp = _layout(toml, world_size, extra)
    boost = toml["boost"]
    scheme = "megatron" if boost["linear"] == "full" else boost["tp_scheme"]
    return memory_per_gpu(toml["model"]["flavor"], scheme, tp, pp, dp, boost["activation_checkpoint"], 1, seq_len,
                          max(pp, 1), linear=boost["linear"], dtype_bytes=4, workspace_bytes=0)


def dry_run(config: str, world_size: int, steps: int, seq_len: int, extra: list[str], timeout: float) -> DryRun:
    """One config as rank 0 of ``world_size``; raises ``RuntimeError`` with the log's tail if it fails."""
    toml = tomllib.loads((ROOT / "train_configs" / f"{config}.toml").read_text())
    tp, pp, dp = _layout(toml, world_size, extra)
    batch = max(pp, 1)  # one micro-batch per pipeline stage in flight
    compile_args = ["--compile.backend", "aot_eager"] if toml.get("compile", {}).get("enable") else []
    with tempfile.TemporaryDirectory(prefix="dry_run_") as dump:
        cmd = ["./run_train.sh", "--training.steps", str(steps), "--training.seq_len", str(seq_len),
               "--training.local_batch_size", str(batch), "--parallelism.pipeline_parallel_microbatch_size", "1",
               "--training.mixed_precision_param", "float32", *compile_args, "--checkpoint.no-enable",
               "--validation.no-enable", "--metrics.log_freq", "1", "--job.dump_folder", dump, *extra]
        env = dict(os.environ, DRY_RUN="1", NGPU=str(world_size), CONFIG_FILE=f"train_configs/{config}.toml",
                   PYTHON=sys.executable)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines, first_step = [], None
        for line in proc.stdout:
            lines.append(line)
            if first_step is None and re.search(r"step:\s+1\s", line):
                first_step = time.perf_counter() - start
            if time.perf_counter() - start > timeout:
                proc.kill()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    log = "".join(lines)
    if proc.returncode != 0 or first_step is None:
        raise RuntimeError(f"{config} at {world_size}: exit {proc.returncode}\n" + log[-4000:])
    stamps = {key: _stamp(log, pattern) for key, pattern in
              (("built", r"total parameters"), ("ready", r"Trainer is initialized"))}
    return DryRun(
        config=config, world_size=world_size,
        layout=f"tp{tp} pp{pp} fsdp{dp} {toml['boost']['tp_scheme'] if tp > 1 else ''} "
               f"ac={toml['boost']['activation_checkpoint']}".replace("  ", " "),
        peak_rss=usage.ru_maxrss * 1024, predicted=predicted_bytes(config, world_size, seq_len, extra),
        cpu_s=usage.ru_utime + usage.ru_stime, first_step_s=first_step,
        build_init_s=stamps["ready"] - stamps["built"],
        losses=[float(v) for v in re.findall(r"step:\s+\d+\s+\S*loss:\s+([\d.]+)", log)],
        global_batch=int(re.search(r"global batch size (\d+)", log).group(1)),
        note=" ".join(extra),
    )


def _stamp(log: str, pattern: str) -> float:
    match = re.search(r"(\d\d):(\d\d):(\d\d),(\d\d\d) - root - INFO - .*" + pattern, log)
    if match is None:
        raise RuntimeError(f"no log line matching {pattern!r}")
    h, m, s, ms = (int(g) for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


HEADER = """# Dry runs of the shipped configs at their real world size (rank 0, fake process group)

`{command}` on this machine (2 CPU cores, shared), {date}. fp32, seq {seq_len}, micro-batch 1, {steps} step(s).
`predicted` is `boost.plan.memory_per_gpu` for the layout (fp32, without the GPU workspace); `ratio` is
peak RSS / (predicted + {overhead:.1f} GiB process overhead). build+init: from the model's size line to
"Trainer is initialized" (model on meta, parallelise, materialise, seeded init of this rank's shard).
Wall-clock columns depend on the shared machine's load; CPU s (the whole process) is the steadier number.
Configs with PP (13B, 30B) run with it folded into FSDP: torch 2.13's pipeline stages exchange shape
metadata (`recv_object_list`) that a fake process group never delivers. `predicted` includes what FSDP
rank 0 holds beyond its share of the batched `[G, d_out, r]` up-projections (`boost.plan.fsdp_rank0_excess`:
at 30B on 32, 775M parameters held vs a 376M share).

| config | world | layout | peak RSS GiB | predicted GiB | ratio | build+init s | first step s (wall) | CPU s | losses | extra args |
|---|---|---|---|---|---|---|---|---|---|---|
"""


def write_table(rows: dict[str, str], path: Path, **header) -> None:
    order = {c: i for i, c in enumerate(shipped_configs())}
    body = "".join(rows[c] + "\n" for c in sorted(rows, key=lambda c: order.get(c, len(order))))
    path.write_text(HEADER.format(**header) + body)


def _existing_rows(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    rows = {}
    for line in path.read_text().splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip() in shipped_configs():
            rows[cells[1].strip()] = line
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dry_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="*", default=shipped_configs(), help="e.g. 7B_cola 30B_cola")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--max-predicted-gib", type=float, default=14.0,
                        help="skip (and say so) configs predicted above this: the machine is shared")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per config")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("extra", nargs="*", help="after --: more overrides for every run, e.g. -- --compile.no-enable")
    opts = parser.parse_args(argv)
    unknown = [c for c in opts.configs if c not in shipped_configs()]
    if unknown:
        parser.error(f"--configs: {unknown} are not shipped 1B..30B configs; choose from {shipped_configs()}")
    rows = _existing_rows(opts.out)
    failed = 0

    def save() -> None:
        command = " ".join(["python -m bench.dry_run", f"--steps {opts.steps} --seq-len {opts.seq_len}", "--",
                            *opts.extra])
        write_table(rows, opts.out, command=command, date=time.strftime("%Y-%m-%d"), seq_len=opts.seq_len,
                    steps=opts.steps, overhead=PROCESS_OVERHEAD / 2**30)

    for config in opts.configs:
        world = WORLD_SIZES[config.split("_")[0]]
        extra = list(opts.extra)
        toml = tomllib.loads((ROOT / "train_configs" / f"{config}.toml").read_text())
        if toml["parallelism"].get("pipeline_parallel_degree", 1) > 1:
            # torch 2.13's pipeline stages exchange shape metadata (recv_object_list) that a fake
            # process group never delivers: run the config with its PP degree folded into FSDP
            extra += ["--parallelism.pipeline_parallel_degree", "1"]
        predicted = predicted_bytes(config, world, opts.seq_len, extra)
        if predicted > opts.max_predicted_gib * 2**30:
            print(f"{config}: skipped, predicted {predicted / 2**30:.1f} GiB > --max-predicted-gib "
                  f"{opts.max_predicted_gib}", flush=True)
            rows[config] = (f"| {config} | {world} | | | {predicted / 2**30:.2f} | | | | | | skipped: predicted above "
                            f"--max-predicted-gib {opts.max_predicted_gib} |")
            save()
            continue
        try:
            result = dry_run(config, world, opts.steps, opts.seq_len, extra, opts.timeout)
        except RuntimeError as err:
            failed += 1
            print(f"{config}: FAILED\n{err}", flush=True)
            rows[config] = f"| {config} | {world} | | | {predicted / 2**30:.2f} | | | | | | FAILED: see console |"
            save()
            continue
        print(result.row(), flush=True)
        rows[config] = result.row()
        save()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

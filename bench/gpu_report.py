"""One command measures a GPU: the trainer's 1B rows, rank dry runs 3B–30B, the 1B step's kernel split.

    python -m bench.gpu_report                 # on one GPU, ≤ 8 minutes -> bench/results/gpu.md
    python -m bench.gpu_report --dry-check     # anywhere: the rows and the exact commands, nothing run

Rows (``bench.gpu_rows.ROWS``, run in that order, each in its own process):
- trainer: ``NGPU=1 CONFIG_FILE=train_configs/1B.toml ./run_train.sh`` as shipped (CoLA) and dense
  (``--boost.linear full --boost.tp_scheme megatron``), each also with ``--boost.activation_checkpoint full``
  (the TOML's: none), 12 steps; tokens/s, MFU and memory as
  torchtitan logs them over steps 6–12, and BOOST's start-up line;
- rank dry run: ``DRY_RUN=1 NGPU=N`` (``bench.rank_dry_run``'s rows) of 3B@8 and 7B@16 for btp, vanilla
  and megatron, 7B@16 btp and megatron with ``boost.fsdp = "simple_fsdp"`` (the TOMLs': FSDP2), without
  and with ``boost.cudagraphs``, the trainer's 1B CoLA and dense with ``boost.cudagraphs``, 7B@16 btp
  and megatron with ``fsdp_reshard_after_forward`` "default" (the TOMLs': "never"),
  7B@16 btp at the planner's micro-batch 20, 13B@8 and 30B@16 (pipeline) for btp, each as rank 0 (the
  first stage) and as the last stage's rank (``DRY_RUN_RANK``: the head and the loss), 10 steps, steps 3–10
  steady (4–10 under ``boost.cudagraphs``, whose step 3 records the graphs; a row that fails after
  logging steady steps keeps their figures, marked failed);
- kernel split: ``bench.kernel_split`` for the 1B CoLA, LaX in both gate forms (beside CoLA, after the LaX
  rows) and dense step
  (3 warm-up, 5 timed, 2 profiled).

Time: the rows start in seconds of CPU work each (imports, the seeded init, compilation) before a
few seconds of steps. On the 2026-11-26 H100 (torch 2.11, 16 cores) the trainer's 1B rows reached
step 1 in 45 s (CoLA) and 57 s (dense), 36.5 s of it the dense model's seeded init on the CPU; the
dry runs' start-up there was not recorded. ``--budget-s`` (480 s) holds the command to 8 minutes:
a row gets at most what is left of it (a row past its time is ended and reported as timed out),
and a row is not started with less than 30 s left. The rows run in order of need, so a slow start
costs the pipeline rows (13B, 30B) first; their lines then say "not run".

Every run_train.sh row also gives the GPU's busy fraction over its steady steps (``bench.gpu_busy``:
NVML's utilization every 100 ms, the samples between the log lines of step ``steady_from - 1`` and the last
step). A row that fails or runs past its timeout is a table line with its last error line; the
rows not started when ``--budget-s`` is spent are listed as not run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import train_log
from bench.gpu_busy import BusySampler, busy_fraction
from bench.gpu_report_markdown import render
from bench.gpu_rows import ROWS, KernelRow, Result, TrainRow, display

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "gpu.md"
LEAST_S = 30  # a row's least time: imports and start-up alone take that


def train_values(row: TrainRow, log: str, samples: list[tuple[float, float]], busy_error: str | None) -> dict:
    """A finished run_train.sh row's figures from its log and the busy samples taken meanwhile."""
    done = train_log.steps(log)
    shape = train_log.layout(log)
    steady = [s for s in done if s.step >= row.steady_from]
    if not steady or shape is None:
        raise ValueError(f"the log has no step {row.steady_from}… or no layout line")
    tps = statistics.median(s.tps for s in steady)
    before = [s for s in done if s.step == row.steady_from - 1]
    busy = busy_fraction(samples, before[0].time, steady[-1].time) if before else None
    mfus = [s.mfu for s in steady if s.mfu is not None]
    return dict(
        layout=shape.short(),
        tps=tps,
        tps_range=(min(s.tps for s in steady), max(s.tps for s in steady)),
        step_s=train_log.step_seconds(tps, shape),
        mfu=(min(mfus), max(mfus)) if mfus else None,
        memory_gib=max(s.memory_gib for s in done),
        busy=busy,
        busy_note=busy_error or ("" if busy else "no sample in the window"),
        startup=train_log.startup_line(log) or "",
        steps=f"{row.steps} (steady {row.steady_from}–{row.steps})"
        if done[-1].step == row.steps
        else f"{done[-1].step} of {row.steps} (steady {row.steady_from}–{done[-1].step})",
    )


def _run(argv: list[str], env: dict[str, str], timeout_s: float, log_path: Path) -> tuple[int | None, str]:
    """Run ``argv`` in its own process group, output to ``log_path``; (exit code or None if it timed
    out and was ended, the output). A timed-out row's processes (torchrun's ranks too) are ended."""
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=dict(os.environ, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, None)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
    return code, log_path.read_text(errors="replace")


def measure(
    row: TrainRow | KernelRow,
    timeout_s: float,
    env: dict[str, str] | None = None,
    keep_log: Path | None = None,
) -> Result:
    """Run one row (``env`` added to its environment); a failure or a timeout is a Result with the log's
    last error line, never an exception. ``keep_log``: where the row's whole output is copied (a kernel
    row's result too, every kernel's time, beside it as ``.json``; a run_train.sh row's NVML samples,
    ``(time.time(), percent)``, as ``.busy.json``)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu_report_") as tmp:
        log_path, result_path = Path(tmp) / "log.txt", Path(tmp) / "result.json"
        sampler = BusySampler()
        if isinstance(row, TrainRow):
            argv, row_env = row.command(str(Path(tmp) / "run"))
            with sampler:
                code, log = _run(
                    argv, {**(env or {}), **row_env, "PYTHON": sys.executable}, timeout_s, log_path
                )
        else:
            argv, row_env = row.command(str(result_path))
            code, log = _run([sys.executable, *argv], {**(env or {}), **row_env}, timeout_s, log_path)
        seconds = time.monotonic() - start
        if keep_log is not None:
            keep_log.write_text(log)
            if result_path.exists():
                keep_log.with_suffix(".json").write_text(result_path.read_text())
            if isinstance(row, TrainRow):  # to read the busy fraction over other steps later (busy_fraction)
                busy = {"samples": sampler.samples, "error": sampler.error}
                keep_log.with_suffix(".busy.json").write_text(json.dumps(busy))
        if code is None:
            return Result(
                row, "timed out", seconds, f"after {timeout_s:.0f} s; {train_log.last_error_line(log)}"
            )
        if code != 0:
            failed = Result(row, "failed", seconds, f"exit {code}: {train_log.last_error_line(log)}")
            if isinstance(row, TrainRow):  # the steady steps it logged before it failed, marked as such
                try:
                    failed.values = train_values(row, log, sampler.samples, sampler.error)
                except ValueError:
                    pass
            return failed
        try:
            if isinstance(row, TrainRow):
                values = train_values(row, log, sampler.samples, sampler.error)
            else:
                values = json.loads(result_path.read_text())
        except (ValueError, OSError) as e:
            return Result(row, "failed", seconds, f"unreadable result: {e}")
    return Result(row, "ok", seconds, values=values)


def run_rows(rows: list, budget_s: float, env: dict[str, str], keep_logs: Path | None = None) -> list[Result]:
    """Each row in turn within ``budget_s``: a row gets at most what is left, and none starts with
    less than :data:`LEAST_S` left (it would only time out). ``keep_logs``: a folder that gets each
    row's output as ``<section>_<row name>.log`` (a trainer row and a kernel row may share a name)."""
    started = time.monotonic()
    results = []
    for row in rows:
        left = budget_s - (time.monotonic() - started)
        if left < LEAST_S:
            results.append(Result(row, "not run", error=f"the {budget_s:.0f} s budget was spent"))
            continue
        log = (
            keep_logs / (re.sub(r"[^A-Za-z0-9.]+", "_", f"{row.section} {row.name}") + ".log")
            if keep_logs
            else None
        )
        result = measure(row, min(row.timeout_s, left), env, log)
        print(
            f"{row.section}: {row.name}: {result.status} in {result.seconds:.0f} s {result.error}", flush=True
        )
        results.append(result)
    return results


def checkout() -> str:
    """The commit the rows ran (``+`` if the work tree differs from it), or ``?`` outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "?"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "") if head.returncode == 0 else "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--budget-s", type=float, default=480, help="rows not started by then are listed as not run"
    )
    p.add_argument(
        "--rows", nargs="+", metavar="NAME", help="only these rows (names as --dry-check lists them)"
    )
    p.add_argument("--keep-logs", type=Path, metavar="DIR", help="each row's whole output as DIR/<row>.log")
    p.add_argument(
        "--checkout",
        metavar="LABEL",
        help="the commit the rows ran, where git cannot tell (a copy of the tree whose .git is not its own)",
    )
    p.add_argument("--dry-check", action="store_true", help="list the rows and their commands; run nothing")
    a = p.parse_args(argv)
    names = {r.name for r in ROWS} | {f"{r.section}: {r.name}" for r in ROWS}
    if a.rows and set(a.rows) - names:
        p.error(f"--rows: no row {sorted(set(a.rows) - names)}; --dry-check lists them")
    rows = [r for r in ROWS if not a.rows or r.name in a.rows or f"{r.section}: {r.name}" in a.rows]
    if a.dry_check:
        for r in rows:
            print(f"{r.section}: {r.name} (timeout {r.timeout_s} s)\n    {display(r)}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print(
            f"bench.gpu_report needs a CUDA GPU, which torch {torch.__version__} does not see here "
            "(and NVML for the busy column); `python -m bench.gpu_report --dry-check` lists what it runs",
            file=sys.stderr,
        )
        return 2
    # Each report compiles cold (its start-up lines comparable between reports) unless the caller
    # names an inductor cache, which may then be warm: the header says which.
    named_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu_report_inductor_") as fresh_cache:
        if a.keep_logs:
            a.keep_logs.mkdir(parents=True, exist_ok=True)
        cache_env = {} if named_cache else {"TORCHINDUCTOR_CACHE_DIR": fresh_cache}
        results = run_rows(rows, a.budget_s, cache_env, a.keep_logs)
    given = sys.argv[1:] if argv is None else argv
    text = render(
        results,
        device=torch.cuda.get_device_name(),
        torch_version=f"{torch.__version__} (CUDA {torch.version.cuda})",
        checkout=a.checkout or checkout(),
        date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        command=" ".join(["python -m bench.gpu_report", *map(shlex.quote, given)]),
        wall_s=time.monotonic() - started,
        compile_cache=f"TORCHINDUCTOR_CACHE_DIR={named_cache} (as given; may be warm)"
        if named_cache
        else "a fresh inductor cache for this report (every row compiles cold)",
    )
    a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Seconds to the first step, as ratios to one ``import torch, torchtitan.train`` measured in the same run.

    python -m bench.startup --reps 3                                  # this checkout -> bench/results/startup.md
    python -m bench.startup --repo ../base . --reps 3 --out /tmp/x.md  # two checkouts, interleaved, side by side

For each checkout (``DIR``, run with ``DIR/.venv/bin/python``, its own ``run_train.sh``), each repetition
measures, from the moment the command starts:

- import: ``python -c "import torch, torchtitan.train"``, to its exit: the yardstick;
- default job: ``./run_train.sh`` (train_configs/debug.toml, a fresh run folder), to "Training starts";
- refusal: ``./run_train.sh --training.steps abc`` (a value that does not parse), to its exit (code 2);
- 7B dry run: ``DRY_RUN=1 NGPU=16 CONFIG_FILE=train_configs/7B.toml ./run_train.sh`` with the README's
  overrides, to the first step's line.

The table gives each median (and every repetition) with its ratio to the import median of the same
checkout. Checkouts are interleaved repetition by repetition, so a load that drifts over the run
falls on both alike; on a shared machine the seconds are still noisy, the ratios less so. The
``BOOST start-up:`` lines of the last default job and 7B dry run (where the checkout logs them) are
quoted under the table.
A run is stopped (its process group killed) once its line is seen. The offline tokenizers are
trained into a fresh cache before timing, so no row trains one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.child_process import Lines, kill_group
from bench.run_command import command_as_run
from boost.runtime.cli_types import positive_int

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "startup.md"
DRY_7B = [
    "--training.steps", "2", "--training.seq_len", "256", "--training.local_batch_size", "1",
    "--training.mixed_precision_param", "float32", "--compile.backend", "aot_eager",
    "--checkpoint.no-enable", "--validation.no-enable",
]  # fmt: skip
ROWS = ("import", "default job", "refusal", "7B dry run")
TITLES = {
    "import": '`python -c "import torch, torchtitan.train"` (the yardstick)',
    "default job": 'default job: launch → "Training starts"',
    "refusal": "`--training.steps abc` refused (exit 2)",
    "7B dry run": "7B dry run (`DRY_RUN=1 NGPU=16`, README's overrides): launch → step 1",
}
# bounds on one measurement, far above what each takes on a loaded 2-core machine
TIMEOUT_S = {"import": 300, "default job": 600, "refusal": 300, "7B dry run": 1200}


@dataclass
class Checkout:
    path: Path
    label: str
    times: dict[str, list[float]] = field(default_factory=lambda: {row: [] for row in ROWS})
    startup_lines: dict[str, str] = field(default_factory=dict)  # the last run's, by row

    @property
    def python(self) -> str:
        return str(self.path / ".venv" / "bin" / "python")


def _label(path: Path) -> str:
    head = subprocess.run(
        ["git", "-C", str(path), "log", "-1", "--format=%h"], capture_output=True, text=True
    )
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain"], capture_output=True, text=True)
    return f"{path.name} @ {head.stdout.strip()}" + (" (+ uncommitted)" if dirty.stdout.strip() else "")


def _run(checkout: Checkout, row: str, cmd: list[str], env: dict, until: str | None, timeout: float):
    """Seconds from start to the first line holding ``until`` (or to the exit), the exit code, the output."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=checkout.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group: the launcher, torchrun and the ranks end together
    )  # fmt: skip
    lines = Lines(proc)
    seen, output, after = None, [], None
    try:
        while True:
            try:
                line = lines.next(start + timeout if after is None else after)
            except TimeoutError:
                break
            if line is None:
                break
            output.append(line)
            if "BOOST start-up:" in line:
                checkout.startup_lines[row] = line.split("BOOST start-up:", 1)[1].strip()
            if until is not None and seen is None and until in line:
                seen = time.perf_counter() - start
                after = time.perf_counter() + 300  # on to the start-up line, logged after step 1
            if seen is not None and "step:  1" in line:
                after = min(after, time.perf_counter() + 3)  # a checkout that logs none: step 1 ends it
            if seen is not None and "BOOST start-up:" in line:
                break
    finally:
        kill_group(proc)
        proc.wait()
    elapsed = seen if until is not None else time.perf_counter() - start
    return elapsed, proc.returncode, "".join(output)


def measure(checkout: Checkout, row: str, cache: Path) -> float:
    # the checkout's own interpreter, whatever venv the benchmark itself runs in
    env = dict(os.environ, BOOST_CACHE=str(cache), PYTHON=checkout.python)
    for name in (
        "VIRTUAL_ENV",
        "CONFIG_FILE",
        "DRY_RUN",
        "NGPU",
        "LOG_DIR",
        "LOG_RANK",
        "TRAIN_FILE",
        "OMP_NUM_THREADS",
    ):
        env.pop(name, None)
    dump = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        if row == "import":
            cmd, until = [checkout.python, "-c", "import torch, torchtitan.train"], None
        elif row == "refusal":
            cmd, until = ["./run_train.sh", "--job.dump_folder", str(dump), "--training.steps", "abc"], None
        elif row == "default job":
            cmd, until = ["./run_train.sh", "--job.dump_folder", str(dump)], "Training starts"
        else:
            env.update(DRY_RUN="1", NGPU="16", CONFIG_FILE="train_configs/7B.toml")
            cmd, until = ["./run_train.sh", "--job.dump_folder", str(dump), *DRY_7B], "step:  1"
        seconds, code, output = _run(checkout, row, cmd, env, until, TIMEOUT_S[row])
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    expected = {"import": 0, "refusal": 2}.get(row)
    if seconds is None or (expected is not None and code != expected):
        raise RuntimeError(f"{checkout.label}: {row} failed (exit {code}):\n{output[-3000:]}")
    return seconds


def warm_up(checkout: Checkout, cache: Path) -> None:
    """Train the offline tokenizers the rows use into ``cache``, and load the imports once (disk cache)."""
    code = (
        "import tomllib; from boost.training.data.offline_tokenizer import ensure_stdlib_tokenizer\n"
        "for toml in ('train_configs/debug.toml', 'train_configs/7B.toml'):\n"
        "    size = tomllib.load(open(toml, 'rb'))['boost']['tokenizer_vocab_size']\n"
        f"    ensure_stdlib_tokenizer(size, {str(cache)!r})\n"
        "import torch, torchtitan.train\n"
    )
    subprocess.run([checkout.python, "-c", code], cwd=checkout.path, check=True, capture_output=True)


def table(checkouts: list[Checkout], reps: int, rows: list[str]) -> str:
    """The measured ``rows`` (with ``import``, their yardstick), and the start-up lines of those that log one:
    a row the run did not measure is left out, not shown as a blank that reads as a failure."""
    head = (
        "| measure | " + " | ".join(f"{c.label}: s (median of {reps}) | × import" for c in checkouts) + " |"
    )
    lines = [head, "|---|" + "---:|---:|" * len(checkouts)]
    for row in (r for r in ROWS if r in rows):
        cells = []
        for c in checkouts:
            times = c.times[row]
            if not times:
                cells += ["—", "—"]
                continue
            median, yardstick = statistics.median(times), statistics.median(c.times["import"])
            every = ", ".join(f"{t:.2f}" for t in times)
            cells += [f"{median:.2f} ({every})", f"{median / yardstick:.2f}"]
        lines.append(f"| {TITLES[row]} | " + " | ".join(cells) + " |")
    lines.append("")
    for c in checkouts:
        for row in (r for r in ("default job", "7B dry run") if r in rows):
            said = c.startup_lines.get(row)
            said = f"`BOOST start-up: {said}`" if said else "(no start-up line logged)"
            lines.append(f"- {c.label}, {row}: {said}")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", nargs="+", type=Path, default=[ROOT], help="checkouts, each with its .venv")
    parser.add_argument("--reps", type=positive_int, default=3)
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser


def main(argv: list[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(argv)
    checkouts = [Checkout(path.resolve(), _label(path.resolve())) for path in args.repo]
    rows = ["import", *(r for r in args.rows if r != "import")]
    with tempfile.TemporaryDirectory(prefix="bench-startup-cache-") as cache:
        for checkout in checkouts:
            warm_up(checkout, Path(cache))
        for rep in range(args.reps):
            for checkout in checkouts:
                for row in rows:
                    seconds = measure(checkout, row, Path(cache))
                    checkout.times[row].append(seconds)
                    print(
                        f"rep {rep + 1}/{args.reps} {checkout.path.name}: {row} {seconds:.2f} s", flush=True
                    )
    nproc = os.cpu_count()
    load = os.getloadavg()[0]
    text = (
        "## Start-up: seconds, and ratios to one torch+torchtitan import\n\n"
        f"`{command_as_run('bench.startup', p, args)}` on {nproc} cores "
        f"(1-minute load average {load:.1f} at the end).\n\n" + table(checkouts, args.reps, rows)
    )
    print("\n" + text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()

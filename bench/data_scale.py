"""A training rank's memory and start against the size of its corpus: ``tokens`` (prepared, memory-mapped)
against ``local`` (held in memory), at two corpus sizes.

    python -m bench.data_scale --mb 40 400 --work /tmp/data_scale     # -> bench/results/data_scale.md

For each size, one C4-shaped corpus (``bench.c4_like_corpus``, seeded: the same documents as
``.json.gz`` for prepare and as ``.jsonl`` for ``local``, which reads no gzip) is prepared once with
the debug TOML's tokenizer (``python -m boost.training.data.prepare --config train_configs/debug.toml``, its time
in the table), then the default job (``train_configs/debug.toml``, one process) trains 3 steps on it
through ``./run_train.sh``, each dataset in turn, fresh run folders, no validation or checkpoint:

- *rank peak RSS*: the rank's own peak resident memory, as its step log reports it (the CPU adapter's
  memory statistics are the process's ``ru_maxrss``), read at step 3;
- *largest process*: the peak RSS of the largest process of the whole launch (the launcher, which
  runs the preflight, or a rank: GNU time's ``%M`` of ``./run_train.sh``, the largest of its tree);
- *launch → step 1*: from starting ``./run_train.sh`` to the rank's first step line.

The corpora are written under ``--work`` (kept between runs: an existing corpus or prepared folder is
reused). Timings on a 2-core machine move with its load; the two datasets run one after the other at
each size, so compare within a size.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "data_scale.md"
CONFIG = "train_configs/debug.toml"
_STEP = re.compile(r"step:\s+(\d+)\s.*?memory:\s+([\d.]+)GiB")


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done


def corpus(work: Path, mb: int, fmt: str) -> Path:
    folder = work / f"c4like-{mb}mb-{fmt.replace('.', '')}"
    if not folder.is_dir():
        _run(
            [
                sys.executable,
                "-m",
                "bench.c4_like_corpus",
                "--mb",
                str(mb),
                "--out",
                str(folder),
                "--format",
                fmt,
            ]
        )
    return folder


def prepared(work: Path, mb: int) -> tuple[Path, float]:
    """The ``.json.gz`` corpus prepared with the run's tokenizer, and the seconds prepare took (0: reused)."""
    folder = work / f"tokens-{mb}mb"
    if (folder / "manifest.json").is_file():
        return folder, 0.0
    start = time.perf_counter()
    gz = corpus(work, mb, "json.gz")
    _run(
        [
            sys.executable,
            "-m",
            "boost.training.data.prepare",
            "--config",
            CONFIG,
            "--input",
            str(gz),
            "--output",
            str(folder),
        ]
    )
    return folder, time.perf_counter() - start


def train(dataset: str, path: Path) -> dict[str, float]:
    """One 3-step run of the default job on ``dataset``: its first-step time and peak memory."""
    with tempfile.TemporaryDirectory() as dump:
        cmd = [
            "/usr/bin/time", "-f", "largest process: %M KiB",
            "./run_train.sh", "--job.dump_folder", dump, "--training.steps", "3", "--metrics.log_freq", "1",
            "--training.dataset", dataset, "--training.dataset_path", str(path),
            "--validation.no-enable", "--checkpoint.no-enable",
        ]  # fmt: skip
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first_step, memory, largest, log = None, {}, None, []
        for line in proc.stdout:
            log.append(line)
            found = _STEP.search(line)
            if found:
                first_step = first_step or time.perf_counter() - start
                memory[int(found[1])] = float(found[2])
            if line.startswith("largest process:"):
                largest = int(line.split()[2])
        if proc.wait() != 0 or 3 not in memory or largest is None:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{''.join(log[-40:])}")
    return {"first_step_s": first_step, "rank_rss_gib": memory[3], "largest_gib": largest / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mb", nargs="+", type=int, default=[40, 400], help="corpus sizes (MB of JSON lines)"
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "boost-data-scale")
    parser.add_argument("--reps", type=int, default=3, help="runs of each row, interleaved (median time)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    cases = [(dataset, mb) for mb in sorted(args.mb) for dataset in ("tokens", "local")]
    paths, prepare_s, runs = {}, {}, {case: [] for case in cases}
    for dataset, mb in cases:
        if dataset == "tokens":
            paths[dataset, mb], prepare_s[dataset, mb] = prepared(args.work, mb)
        else:
            paths[dataset, mb], prepare_s[dataset, mb] = corpus(args.work, mb, "jsonl"), 0.0
    for _ in range(args.reps):  # interleaved, so the machine's load drifts over every row alike
        for case in cases:
            runs[case].append(train(case[0], paths[case]))
            print(*case, runs[case][-1], flush=True)
    rows = []
    for dataset, mb in cases:
        got = runs[dataset, mb]
        result = {
            "first_step_s": statistics.median(r["first_step_s"] for r in got),
            "rank_rss_gib": max(r["rank_rss_gib"] for r in got),
            "largest_gib": max(r["largest_gib"] for r in got),
        }
        rows.append((dataset, mb, prepare_s[dataset, mb], result))
    lines = [
        f"# Corpus size against a training rank's memory and start ({datetime.date.today()})",
        "",
        "Default job (debug flavor, one process), 3 steps, `./run_train.sh --training.dataset D "
        "--training.dataset_path P`; C4-shaped corpora from `bench.c4_like_corpus`. "
        f"Command: `python -m bench.data_scale --mb {' '.join(map(str, sorted(args.mb)))} --reps {args.reps}` "
        f"(launch → step 1: median of {args.reps} interleaved runs; RSS: their largest). "
        "2-core machine: compare within a size. *largest process*: the whole launch's largest peak RSS "
        "(the launcher or a rank).",
        "",
        "| dataset | corpus (MB of JSON lines) | prepare once (s, 0: reused) | rank peak RSS (GiB) "
        "| largest process (GiB) "
        "| launch → step 1 (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for dataset, mb, prepare_s, r in rows:
        prep = f"{prepare_s:.0f}" if dataset == "tokens" else "—"
        lines.append(
            f"| {dataset} | {mb} | {prep} | {r['rank_rss_gib']:.2f} | {r['largest_gib']:.2f} "
            f"| {r['first_step_s']:.1f} |"
        )
    by = {(d, mb): r for d, mb, _, r in rows}
    small, large = sorted(args.mb)[0], sorted(args.mb)[-1]
    if small != large:
        lines += ["", f"From {small} to {large} MB:"]
        for dataset in ("tokens", "local"):
            a, b = by[dataset, small], by[dataset, large]
            lines.append(
                f"- `{dataset}`: rank peak RSS {1024 * (b['rank_rss_gib'] - a['rank_rss_gib']):+.0f} MB, "
                f"launch → step 1 {b['first_step_s'] - a['first_step_s']:+.1f} s"
            )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

"""prepare's tokens/s against the tokenizer's own ``encode_batch`` on the same texts held in memory.

One run, side by side and interleaved, on a C4-shaped ``.json.gz`` corpus (``bench.c4_like_corpus``)
with a run's tokenizer. Each row gives wall time and CPU time (user + system of the process and all
its descendants): on a shared machine the wall-clock rates depend on the neighbours, the CPU seconds
a job needs much less; the rate a quiet machine would give is bounded by both.

- ``encode_batch`` over the texts already in memory, all cores, 1,024
  documents a call: no reading, no gunzip, no JSON, no writing — the bound prepare is measured by;
- ``python -m boost.training.data.prepare`` with ``--workers 1`` and with all cores, a fresh folder each time,
  start-up, reading, gunzip, JSON, framing and writing included;
- optionally datatrove's own pipeline (``JsonlReader`` → ``DocumentTokenizer``, no shuffling) on the
  same files, run by another interpreter that has it (``--datatrove-python``).

    python -m bench.prepare --mb 400 --config train_configs/1B.toml          # writes bench/results/prepare.md
    python -m bench.prepare --corpus /tmp/c4like --rounds 3 --datatrove-python /tmp/dt/bin/python
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokenizers import Tokenizer

from bench.c4_like_corpus import main as write_corpus
from boost.training.data.prepare.preparer import default_workers
from boost.training.data.run_tokenizer import read_toml, run_tokenizer_dir

RESULTS = Path(__file__).parent / "results" / "prepare.md"
BATCH = 1024

_DATATROVE = """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import DocumentTokenizer
from tokenizers.processors import TemplateProcessing
corpus, tokenizer_json, out, workers, files, bos, eos = sys.argv[1:8]
step = DocumentTokenizer(out, tokenizer_name_or_path=tokenizer_json, shuffle_documents=False, batch_size=1024)
# BOOST's framing, [BOS] ids [EOS], as datatrove's own post-processor hook sets it
step.post_processor = TemplateProcessing(single="<B> $A <E>", special_tokens=[("<B>", int(bos)), ("<E>", int(eos))])
if __name__ == "__main__":  # datatrove's workers are spawned: they import this file again
    LocalPipelineExecutor([JsonlReader(corpus, glob_pattern="*.json.gz", text_key="text"), step],
        tasks=int(files), workers=int(workers), logging_dir=out + "/logs").run()
"""


def read_texts(corpus: Path) -> list[str]:
    return [json.loads(line)["text"] for path in sorted(corpus.glob("*.json.gz")) for line in gzip.open(path)]


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _sample_tree(root: int, ticks: dict[int, int]) -> None:
    """Record the CPU ticks so far (user + system) of ``root`` and of each descendant alive now."""
    parent_of, used = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent_of[int(entry)], used[int(entry)] = int(fields[1]), int(fields[11]) + int(fields[12])
    for pid, total in used.items():
        ancestor = pid
        while ancestor != root and ancestor in parent_of and ancestor > 1:
            ancestor = parent_of[ancestor]
        if ancestor == root:
            ticks[pid] = total


def run_measured(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``command`` and all its descendants, sampled from /proc every 0.1 s.

    Sampled, not ``RUSAGE_CHILDREN``: a tool whose workers are never waited for (datatrove's pool)
    would count only its main process. A process's last <0.1 s after the final sample is missed."""
    ticks: dict[int, int] = {}
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while process.poll() is None:
        _sample_tree(process.pid, ticks)
        time.sleep(0.1)
    seconds = time.perf_counter() - start
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command, stderr=process.stderr.read())
    return seconds, sum(ticks.values()) / os.sysconf("SC_CLK_TCK")


def in_memory_seconds(tokenizer: Tokenizer, texts: list[str], method: str) -> tuple[float, float, int]:
    encode = getattr(tokenizer, method)
    start, cpu, tokens = time.perf_counter(), cpu_seconds(resource.RUSAGE_SELF), 0
    for i in range(0, len(texts), BATCH):
        tokens += sum(len(e.ids) + 2 for e in encode(texts[i : i + BATCH], add_special_tokens=False))
    return time.perf_counter() - start, cpu_seconds(resource.RUSAGE_SELF) - cpu, tokens


def prepare_seconds(corpus: Path, config: str, workers: int, scratch: Path) -> tuple[float, float, int]:
    out = scratch / f"prepare-w{workers}"
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "boost.training.data.prepare",
        "--config",
        config,
        "--input",
        str(corpus),
    ]
    seconds, cpu = run_measured([*command, "--output", str(out), "--workers", str(workers)])
    manifest = json.loads((out / "manifest.json").read_text())
    tokens = sum(s["tokens"] for split in manifest["splits"].values() for s in split["shards"])
    shutil.rmtree(out)
    return seconds, cpu, tokens


def datatrove_seconds(
    python: str, corpus: Path, folder: Path, workers: int, scratch: Path
) -> tuple[float, float]:
    out = scratch / "datatrove"
    shutil.rmtree(out, ignore_errors=True)
    files = len(list(corpus.glob("*.json.gz")))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    bos, eos = (tokenizer.token_to_id(config[k]) for k in ("bos_token", "eos_token"))
    args = [
        str(corpus),
        str(folder / "tokenizer.json"),
        str(out),
        str(workers),
        str(files),
        str(bos),
        str(eos),
    ]
    script = scratch / "datatrove_run.py"
    script.write_text(_DATATROVE)
    seconds, cpu = run_measured([python, str(script), *args])
    shutil.rmtree(out)
    return seconds, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus", type=Path, help="a folder of .json.gz files (default: generate --mb of them)"
    )
    parser.add_argument("--mb", type=float, default=40, help="size of the generated corpus (JSON lines, MB)")
    parser.add_argument("--config", default="train_configs/1B.toml", help="the run whose tokenizer prepares")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repetitions; medians are reported")
    parser.add_argument("--datatrove-python", help="an interpreter with datatrove installed, to add its row")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    cores = default_workers()
    folder = run_tokenizer_dir(read_toml(args.config))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        scratch = Path(tmp)
        corpus = args.corpus
        if corpus is None:
            corpus = scratch / "corpus"
            write_corpus(["--mb", str(args.mb), "--out", str(corpus)])
        texts = read_texts(corpus)
        size = sum(p.stat().st_size for p in corpus.glob("*.json.gz"))
        print(
            f"{len(texts)} documents, {sum(map(len, texts)) / 1e6:.0f}M characters, {size / 1e6:.0f} MB gzipped"
        )
        rows: dict[str, list[tuple[float, float]]] = {}
        tokens = set()
        for round_ in range(args.rounds):
            runs = {
                f"encode_batch, texts in memory, {cores} cores": lambda: in_memory_seconds(
                    tokenizer, texts, "encode_batch"
                ),
                f"prepare --workers {cores}": lambda: prepare_seconds(corpus, args.config, cores, scratch),
                "prepare --workers 1": lambda: prepare_seconds(corpus, args.config, 1, scratch),
            }
            if args.datatrove_python:
                runs[f"datatrove (JsonlReader → DocumentTokenizer), {cores} workers"] = lambda: (
                    *datatrove_seconds(args.datatrove_python, corpus, folder, cores, scratch),
                    None,
                )
            for name, run in runs.items():
                seconds, cpu, counted = run()
                if counted is not None:
                    tokens.add(counted)
                rows.setdefault(name, []).append((seconds, cpu))
                print(f"round {round_ + 1}: {name}: {seconds:.1f} s, {cpu:.1f} CPU s", flush=True)
        assert len(tokens) == 1, f"prepare and encode_batch counted different tokens: {tokens}"
        total = tokens.pop()
    wall = {name: statistics.median(w for w, _ in runs) for name, runs in rows.items()}
    cpu = {name: statistics.median(c for _, c in runs) for name, runs in rows.items()}
    first = next(iter(rows))
    lines = [
        f"# prepare against encode_batch ({len(texts)} documents, {size / 1e6:.0f} MB gzipped, "
        f"{total / 1e6:.1f}M tokens, tokenizer {folder.name})",
        "",
        f"Side by side in one run on this machine ({cores} cores, shared with other jobs: compare the ratios, "
        f"not the rates); median of {args.rounds} interleaved round{'s' * (args.rounds != 1)}. CPU = user + "
        "system seconds of the process and all its descendants (prepare's includes its start: Python, torch, "
        "tokenizer). The wall column moves with the neighbours' load while each row runs (a row that ran "
        "while the machine was quieter looks faster than a quiet machine would make it); the CPU column "
        "does not, though with several tokenizer threads in one process it also counts their idle threads' "
        "search for work (rayon spins before it sleeps).",
        f"Command: `python -m bench.prepare {' '.join(argv if argv is not None else sys.argv[1:])}`"
        + (
            " (`--datatrove-python`: an interpreter of a separate venv, `pip install datatrove orjson`)."
            if args.datatrove_python
            else ""
        ),
        "",
        "| what | wall s | tokens/s | × encode_batch (wall) | CPU s | tokens per CPU s | × encode_batch (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in rows:
        lines.append(
            f"| {name} | {wall[name]:.1f} | {total / wall[name] / 1e3:,.0f}k | {wall[first] / wall[name]:.2f} "
            f"| {cpu[name]:.1f} | {total / cpu[name] / 1e3:,.0f}k | {cpu[first] / cpu[name]:.2f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    sys.exit(main())

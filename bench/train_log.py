"""What a trainer run's console says, parsed: its steps, its layout and batch, its start-up line, its error.

The benchmarks that launch ``./run_train.sh`` (``bench.rank_dry_run``, ``bench.gpu_report``) read the run
from the text torchtitan and BOOST log on rank 0, e.g. ::

    [titan] 2026-11-26 08:17:43,290 - root - INFO - step:  2  loss: ...  memory:  0.63GiB(2.66%)  tps: 40 ...
    [titan] ... - Building device mesh with parallelism: pp=2, dp_replicate=1, dp_shard=2, cp=1, tp=2, ...
    [titan] ... - Trainer is initialized with local batch size 4, global batch size 8, gradient
                  accumulation steps 1, sequence length 128, ...

torchtitan's ``tps`` is per device: the rank's tokens over the step time *and* over tp·pp·cp
(``non_data_parallel_size`` in ``torchtitan/components/metrics.py``), so a step's seconds are the
rank's tokens per step / (tps · tp·pp·cp) (:func:`step_seconds`).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# torchtitan's logger: "[titan] 2026-11-26 08:17:43,290 - root - INFO - message" (local time)
STAMP = re.compile(r"\[titan\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - ")
STEP = re.compile(r"step:\s+(\d+)\s.*?memory:\s+([\d.]+)GiB.*?tps:\s+([\d,]+)(?:.*?mfu:\s+([\d.]+)%)?")
MESH = re.compile(r"Building device mesh with parallelism: (.*)")
BATCH = re.compile(
    r"local batch size (\d+), global batch size (\d+), gradient accumulation steps (\d+), sequence length (\d+)"
)
STARTUP = re.compile(r"BOOST start-up: (.*)")
PRECISION = re.compile(r"BOOST computes in (.*)")
# an exception's last line: "RuntimeError: ...", "torch.OutOfMemoryError: ...", possibly after "[rank0]: "
EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?[\w.]*(?:Error|Exception|Interrupt)\b:?.*")


@dataclass
class Step:
    """One ``step:`` line of rank 0: when it was logged (the step's end), tokens/s per device, MFU, memory."""

    step: int
    time: float  # seconds since the epoch, the log line's timestamp (local time, millisecond resolution)
    tps: float
    mfu: float | None
    memory_gib: float  # torchtitan's peak reserved memory since the previous log (RSS on a CPU)


@dataclass
class Layout:
    """The run's mesh degrees and the rank's batch, as logged."""

    degrees: dict[str, int]  # pp, dp_replicate, dp_shard, cp, tp, ...
    local_batch: int
    accumulation: int
    seq_len: int

    @property
    def non_data_parallel(self) -> int:
        """The ranks that share one sample (torchtitan's ``non_data_parallel_size``): tp·pp·cp."""
        return self.degrees.get("tp", 1) * self.degrees.get("pp", 1) * self.degrees.get("cp", 1)

    @property
    def tokens_per_step(self) -> int:
        """The tokens one rank feeds per optimizer step (what torchtitan's tps counts)."""
        return self.local_batch * self.accumulation * self.seq_len

    def short(self) -> str:
        d = self.degrees
        return f"tp{d.get('tp', 1)} pp{d.get('pp', 1)} fsdp{d.get('dp_shard', 1)} cp{d.get('cp', 1)}"


def clean(log: str) -> str:
    """The log without terminal colour codes."""
    return ANSI.sub("", log)


def _stamp(line: str) -> float | None:
    m = STAMP.search(line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def steps(log: str) -> list[Step]:
    """Rank 0's ``step:`` lines in order."""
    out = []
    for line in clean(log).splitlines():
        m = STEP.search(line)
        when = _stamp(line)
        if m and when is not None:
            mfu = float(m.group(4)) if m.group(4) is not None else None
            out.append(
                Step(int(m.group(1)), when, float(m.group(3).replace(",", "")), mfu, float(m.group(2)))
            )
    return out


def layout(log: str) -> Layout | None:
    """The mesh degrees and batch the trainer logged, or None if it did not get that far."""
    text = clean(log)
    mesh, batch = MESH.search(text), BATCH.search(text)
    if not (mesh and batch):
        return None
    degrees = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", mesh.group(1))}
    local, _, accumulation, seq = (int(g) for g in batch.groups())
    return Layout(degrees, local, accumulation, seq)


def step_seconds(tps: float, layout: Layout) -> float:
    """A step's seconds from torchtitan's tokens/s per device: tokens per step / (tps · tp·pp·cp)."""
    return layout.tokens_per_step / (tps * layout.non_data_parallel)


def startup_line(log: str) -> str | None:
    """The ``BOOST start-up:`` breakdown (after ``BOOST start-up: ``), or None."""
    m = STARTUP.search(clean(log))
    return m.group(1).strip() if m else None


def precision(log: str) -> str | None:
    m = PRECISION.search(clean(log))
    return m.group(1).strip() if m else None


def last_error_line(log: str) -> str:
    """The line that says why a run failed: the last exception line (torchrun's own ChildFailedError,
    which wraps the rank's, left out), else a BOOST refusal, else rank 0's last line, else the last line."""
    lines = [line.strip() for line in clean(log).splitlines() if line.strip()]
    exceptions = [line for line in lines if EXCEPTION.match(line) and "ChildFailedError" not in line]
    refusals = [line for line in lines if line.startswith("BOOST config error")]
    ranks = [line for line in lines if re.match(r"\[rank\d+\]:", line)]
    for found in (exceptions, refusals, ranks, lines):
        if found:
            return found[-1]
    return "(no output)"

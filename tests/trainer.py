"""Run BOOST's trainer on CPU (gloo) and read its losses: the way a user does (``run_train.sh``:
preflight, torchrun, ranks), or its ranks alone, forked from one process that imported the trainer
once (``tests/rank_server.py``) where the launch is not what a test checks."""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from torchtitan_ext.start import ranks_beside_rank0
from torchtitan_ext.torch_range import newer_torch, newer_torch_line

ROOT = Path(__file__).resolve().parents[1]
# short sequences and batches: a step of the debug model takes well under a second on CPU
SMALL = [
    "--training.seq_len",
    "64",
    "--training.local_batch_size",
    "4",
    "--metrics.log_freq",
    "1",
    "--validation.seq_len",
    "64",
    "--validation.steps",
    "2",
    "--validation.freq",
    "1000",
]

# A test's probe of rank 0 in ``train``'s runs, "module:function": the rank server calls it with the
# trainer's ``main``; it trains through it and reads what the run left in the process
# (tests/end_to_end/compiled_graphs_probe.py).
PROBE_ENV = "BOOST_TEST_RANK0_PROBE"


def stderr_lines(stderr: str) -> list[str]:
    """What the launcher said on stderr, a line each, as on every torch it runs: without the line a torch
    newer than the tested range adds where the preflight first imports torch
    (``torch_range.check_newer_torch``), which the suite run on such a torch would otherwise see first."""
    lines = stderr.strip().splitlines()
    newer = newer_torch()
    return lines if newer is None else [line for line in lines if line != newer_torch_line(newer, [])]


def preflight_refusal(tmp_path: Path, *overrides: str, monkeypatch, dump: Path | None = None) -> str | None:
    """``run_train.sh``'s preflight of the debug TOML in this process, at NGPU=1, for the run folder ``dump``
    (``tmp_path/out``) with the suite's shared BOOST cache: the refusal message, or ``None`` if it would start."""
    from torchtitan_ext.preflight import main

    monkeypatch.setenv("NGPU", "1")
    folders = [
        "--job.dump_folder",
        str(dump or tmp_path / "out"),
        "--boost.cache_dir",
        str(tmp_path.parent / "boost-cache"),
    ]
    try:
        main(["--job.config_file", str(ROOT / "train_configs" / "debug.toml"), *folders, *overrides])
    except SystemExit as e:
        return str(e.code)
    return None


def run_train(
    tmp_path: Path,
    *overrides: str,
    ngpu: int = 1,
    steps: int = 10,
    log_rank: int | None = 0,
    folder: str = "out",
) -> str:
    """``run_train.sh``'s run; its console. ``log_rank=None``: ``LOG_RANK`` unset, the launcher's choice."""
    log_dir = tmp_path / f"{folder}-rank-logs"
    env = dict(
        os.environ,
        NGPU=str(ngpu),
        PYTHON=sys.executable,
        BOOST_CACHE=str(tmp_path.parent / "boost-cache"),
        LOG_RANK="" if log_rank is None else str(log_rank),
        LOG_DIR=str(log_dir),
    )
    cmd = [
        "./run_train.sh",
        "--job.dump_folder",
        str(tmp_path / folder),
        "--training.steps",
        str(steps),
        *SMALL,
        *overrides,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:] + _other_ranks_errors(log_dir, log_rank or 0)
    return out


def train(
    tmp_path: Path,
    *overrides: str,
    ngpu: int = 1,
    steps: int = 10,
    log_rank: int = 0,
    folder: str = "out",
    env: dict[str, str] | None = None,
) -> str:
    """``run_train``'s run without the launcher: the ranks of ``torchtitan_ext.train`` alone (no preflight,
    no torchrun), each forked from the rank server (``tests/rank_server.py``); rank ``log_rank``'s output.
    The same ranks, threads and collectives as ``run_train``: the same losses, bit for bit. ``env``: more
    environment for the ranks. ``LOG_RANK`` as the launcher sets it where the console shows ``log_rank``
    (``torchtitan_ext.start.console_ranks``: rank 0 and the one holding the loss)."""
    shown = {"LOG_RANK": ranks_beside_rank0(log_rank)}
    codes, logs = train_ranks(
        tmp_path, *overrides, ngpu=ngpu, steps=steps, folder=folder, env={**shown, **(env or {})}
    )
    out = logs[log_rank]
    failed = "".join(
        f"\n--- rank {r} (exit {c}) ---\n" + logs[r][-2000:]
        for r, c in enumerate(codes)
        if c and r != log_rank
    )
    assert codes[log_rank] == 0 and not failed, f"exit codes {codes}\n" + out[-6000:] + failed
    return out


def train_ranks(
    tmp_path: Path,
    *overrides: str,
    ngpu: int = 1,
    steps: int = 10,
    folder: str = "out",
    env: dict[str, str] | None = None,
) -> tuple[list[int], list[str]]:
    """``train``'s run, whatever its end: every rank's exit code and output."""
    log_dir = tmp_path / f"{folder}-rank-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    logs = [log_dir / f"rank{rank}.log" for rank in range(ngpu)]
    argv = [
        "--job.config_file",
        "./train_configs/debug.toml",
        "--job.dump_folder",
        str(tmp_path / folder),
        "--training.steps",
        str(steps),
        *SMALL,
        *overrides,
    ]
    env = {"BOOST_CACHE": str(tmp_path.parent / "boost-cache"), **(env or {})}
    codes = _rank_server().run(argv, env, ngpu, logs)
    return codes, [log.read_text(errors="replace") for log in logs]


# The environment the test session started with: the rank server's, whatever a test sets later.
_SESSION_ENV = dict(os.environ)


class _RankServer:
    """``tests/rank_server.py``, started on first use and kept for the session."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.rank_server"],
            cwd=ROOT,
            env=_SESSION_ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline()
        assert ready == "ready\n", f"the rank server did not start: {ready!r}"
        atexit.register(self.close)

    def run(self, argv: list[str], env: dict[str, str], ngpu: int, logs: list[Path]) -> list[int]:
        request = {"argv": argv, "env": env, "ngpu": ngpu, "logs": [str(p) for p in logs], "timeout": 600}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, "the rank server ended"
        return json.loads(answer)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


_server: _RankServer | None = None


def _rank_server() -> _RankServer:
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _RankServer()
    return _server


def _other_ranks_errors(log_dir: Path, shown: int) -> str:
    """The end of every other rank's stderr: the console shows only LOG_RANK's."""
    tails = []
    for err in sorted(log_dir.rglob("stderr.log")):
        if err.parent.name != str(shown) and err.stat().st_size:
            tails.append(f"\n--- {err.relative_to(log_dir)} ---\n" + err.read_text(errors="replace")[-2000:])
    return "".join(tails)


def losses(log: str) -> dict[int, float]:
    """Training loss by step (not the validator's ``validate step: N  loss: ...`` lines)."""
    return {
        int(s): float(v) for s, v in re.findall(r"(?<!validate )step:\s+(\d+)\s+\S*loss:\s+([\d.]+)", log)
    }

"""``bench.comm_table``: bench/results/comm_table.md is what the command it names writes today (130M's
btp rows once held r = 192's bytes after the flavor took r = 256), and ``--out`` holds what is printed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bench import comm_table

COMMITTED = Path(comm_table.__file__).parent / "results" / "comm_table.md"


def test_the_committed_table_is_what_its_command_writes():
    committed = COMMITTED.read_text()
    command = re.search(r"command: `(python -m bench\.comm_table[^`]*)`", committed).group(1)
    argv = shlex.split(command)[3:]
    args = comm_table.parser().parse_args(argv)
    assert comm_table.markdown(args, command) == committed  # closed forms: exact, machine-independent


def test_the_command_writes_what_it_prints_under_the_command_that_reruns_it(tmp_path, capsys):
    out = tmp_path / "table.md"
    text = comm_table.main(["--batch", "2", "--cp-seq", "8192", "--out", str(out)])
    assert out.read_text() == text == capsys.readouterr().out
    command = re.search(r"command: `([^`]*)`", text).group(1)
    assert command == f"python -m bench.comm_table --batch 2 --cp-seq 8192 --out {out}"
    rerun = comm_table.parser().parse_args(shlex.split(command)[3:])
    assert comm_table.markdown(rerun, command) == text
    tokens, r, layers = 2 * 4096, 256, 12  # 130M at its own rank: 7·b·s·r + 2·b·s forward, 7·b·s·r backward
    fwd, bwd = (7 * tokens * r + 2 * tokens) * 2, 7 * tokens * r * 2
    per_step = (fwd + bwd) * layers / 2**30
    row = f"| 130M | 2 | btp (online) | 4 | {fwd / 2**20:.1f} | 4 | {bwd / 2**20:.1f} | {per_step:.2f} |"
    assert row in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seq", "-5"], "argument --seq: -5 is not a positive integer"),  # it printed negative MiB
        (["--batch", "0"], "argument --batch: 0 is not a positive integer"),
        (["--dtype-bytes", "0"], "argument --dtype-bytes: 0 is not a positive integer"),
        (
            ["--cp-seq", "100"],
            "--cp-seq 100 must be divisible by 8 (cp 8): the table shards it over cp 2, 4, 8",
        ),
    ],
)
def test_values_that_describe_no_tensor_are_refused_before_anything_is_written(
    tmp_path, capsys, argv, message
):
    out = tmp_path / "table.md"
    with pytest.raises(SystemExit) as exit_:
        comm_table.main([*argv, "--out", str(out)])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()

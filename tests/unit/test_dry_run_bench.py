"""``bench.dry_run``'s results file: its header names the command that made it (every flag as run), rows made at
other settings are refused rather than mixed under one header, a bad ``--world-size`` is refused before any run,
and a row whose child hangs without printing is stopped at ``--timeout``. No row trains here: ``--max-predicted-gib
0`` skips every row (the skip is written as a row), so these run in-process in seconds."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from bench import dry_run

ROOT = Path(dry_run.__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "bench" / "results").glob("dry_run*.md"))


def _header_command(path: Path) -> str:
    return re.search(r"^`(python -m bench\.dry_run[^`]*)`", path.read_text(), re.M).group(1)


def _skipped(tmp_path: Path, *argv: str) -> list[str]:
    out = tmp_path / "dr.md"
    return ["--max-predicted-gib", "0", "--out", str(out), *argv]


def test_the_header_names_every_flag_the_run_was_given(tmp_path):
    argv = _skipped(tmp_path, "--rows", "1B_cola", "--steps", "1", "--seq-len", "64", "--timeout", "5")
    argv += ["--", "--compile.no-enable"]
    assert dry_run.main(argv) == 0
    out = tmp_path / "dr.md"
    command = _header_command(out)
    assert command.startswith("python -m bench.dry_run ") and command.endswith(" -- --compile.no-enable")
    for flag in ("--rows 1B_cola", "--max-predicted-gib 0", f"--out {out}", "--timeout 5", "--steps 1"):
        assert flag in command
    p = dry_run.parser()
    assert p.parse_args(shlex.split(command)[3:]) == p.parse_args(argv)
    assert "| 1B | cola | 8 | | |" in out.read_text() and "kept from earlier runs" not in out.read_text()


def test_rows_made_at_other_settings_are_refused_not_merged(tmp_path, capsys):
    out = tmp_path / "dr.md"
    shutil.copy(ROOT / "bench" / "results" / "dry_run.md", out)  # steps 2, seq 256, eager
    before = out.read_text()
    argv = _skipped(
        tmp_path, "--rows", "1B_cola", "--steps", "1", "--seq-len", "64", "--", "--compile.no-enable"
    )
    with pytest.raises(SystemExit):
        dry_run.main(argv)
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert f"--out {out} holds rows made at" in line and "'steps': 2" in line and "'steps': 1" in line
    assert out.read_text() == before  # nothing written


def test_rows_made_at_the_same_settings_are_kept_and_the_header_says_so(tmp_path):
    out = tmp_path / "dr.md"
    shutil.copy(ROOT / "bench" / "results" / "dry_run.md", out)
    assert dry_run.main(_skipped(tmp_path, "--rows", "1B_cola", "--", "--compile.no-enable")) == 0
    text = out.read_text()
    assert "| 1B | cola | 8 | | |" in text and "| 7B | cola | 16 | tp4 pp1 fsdp4 btp ac=lowrank |" in text
    kept = re.search(r"^Rows (.*): kept from earlier runs of this command's settings", text, re.M).group(1)
    assert "1B_full" in kept and "30B_lax" in kept and "1B_cola" not in kept.split(", ")


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_each_committed_files_header_names_the_command_that_made_it(path):
    # dry_run_compiled.md named `python -m bench.dry_run --steps 2 --seq-len 256 --`: every row, into dry_run.md
    opts = dry_run.parser().parse_args(shlex.split(_header_command(path))[3:])
    assert (ROOT / opts.out).resolve() == path
    rows = {f"{flavor}_{kind}" for flavor, kind in dry_run._existing_rows(path)}
    assert rows == set(opts.rows)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (  # the trainer's preflight rules, on each row's own arguments, before any row runs
            ["--world-size", "7", "--rows", "1B_cola", "7B_cola"],
            "row 7B_cola at 7 ranks: parallelism = 'tp×pp×dp_replicate×cp = 4': must divide the world size 7",
        ),
        (
            ["--rows", "7B_cola", "--", "--boost.tp_scheme", "megatron"],
            "row 7B_cola at 16 ranks: boost.tp_scheme = 'megatron': megatron is the dense baseline",
        ),
        (["--steps", "0"], "argument --steps: 0 is not a positive integer"),
        (["--seq-len", "-5"], "argument --seq-len: -5 is not a positive integer"),
        (["--timeout", "0"], "--timeout 0: seconds per row, more than 0"),
    ],
)
def test_values_that_describe_no_run_are_refused_in_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        dry_run.main(_skipped(tmp_path, *argv))
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "dr.md").exists()


def test_a_child_that_hangs_without_printing_is_stopped_at_the_timeout():
    # the loop read `for line in proc.stdout` and checked the clock only at a new line: this one waited 60 s
    start = time.perf_counter()
    code, log, first_step, _ = dry_run.run_logged(
        ["bash", "-c", f"echo started; {shlex.quote(sys.executable)} -c 'import time; time.sleep(60)'"],
        {},
        1.0,
    )
    assert time.perf_counter() - start < 20
    assert code != 0 and first_step is None
    assert log.startswith("started\n") and log.endswith("bench.dry_run: stopped after --timeout 1 s\n")

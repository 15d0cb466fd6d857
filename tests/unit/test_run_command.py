"""``bench.run_command.command_as_run``: a trailing positional list (the trainer overrides a benchmark passes on)
is spelt after ``--``, so the recorded command reruns the run (it was refused as having no spelling)."""

from __future__ import annotations

import argparse
import shlex

from bench.run_command import command_as_run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--rows", nargs="*", default=["a", "b"])
    p.add_argument("extra", nargs="*")
    return p


def test_overrides_after_dashes_come_last_and_rerun():
    p = _parser()
    argv = ["--steps", "1", "--rows", "a", "--", "--compile.no-enable", "--training.seq_len", "64"]
    a = p.parse_args(argv)
    command = command_as_run("bench.x", p, a)
    assert command == "python -m bench.x " + shlex.join(argv)
    assert p.parse_args(shlex.split(command)[3:]) == a


def test_no_overrides_no_dashes():
    p = _parser()
    assert command_as_run("bench.x", p, p.parse_args([])) == "python -m bench.x"

"""The command line a benchmark ran with, as its results file records it: rerunning it reruns the table."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path


def command_as_run(module: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """``python -m module`` and every option of ``args`` that differs from ``parser``'s default, spelt as
    ``--`` and the option's name (each benchmark's options are named as their ``dest``, dashes for
    underscores), then a positional list (the trainer overrides some benchmarks pass on) after ``--``.
    A file records what was run: an option left out of it is one the run did not change."""
    positional = {action.dest for action in parser._actions if not action.option_strings}
    words = ["python", "-m", module]
    after: list[str] = []
    for dest, value in vars(args).items():
        if value == parser.get_default(dest):
            continue
        flag = "--" + dest.replace("_", "-")
        if dest in positional:
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{dest}: {value!r} has no command-line spelling after --")
            after += map(str, value)
        elif isinstance(value, bool) and value:
            words.append(flag)
        elif isinstance(value, (list, tuple)):
            words += [flag, *map(str, value)]
        elif isinstance(value, (str, int, float, Path)) and not isinstance(value, bool):
            words += [flag, str(value)]
        else:  # a switch turned off, or a value no command line spells: the record would not rerun it
            raise ValueError(f"--{dest}: {value!r} has no command-line spelling")
    return shlex.join([*words, *(["--", *after] if after else [])])

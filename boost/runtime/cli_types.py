"""Argument types the command-line tools share (the planner, the benchmarks): a value that cannot describe a run
is refused in one line by argparse, which names the option."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An ``int`` of at least 1 (a count of repetitions, steps, tokens, bytes): 0 or less would time nothing,
    or describe no tensor, and end in a table of dashes or a ``statistics.StatisticsError``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer (1 or more)")
    return value

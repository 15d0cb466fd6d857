"""Where a rank's start-up goes, measured from its process start, logged as one line after step 1.

``BOOST start-up: imports 15.4 s, config 0.4 s, tokenizer 0.0 s, data 0.5 s, model 0.8 s, compile 0.0 s,
checkpoint load 0.0 s, step 1 11.7 s, other 0.1 s; to step 1 29.0 s from process start`` (the default
job on a busy 2-core machine)

- imports: process start (the kernel's record on Linux) to the entry point's first line;
- config: torchtitan's ``main`` reading the job, to the trainer's first line;
- tokenizer, data (training loader and validator), checkpoint load: those builders and the load;
- model: from the data loader to the optimizer (build on meta, parallelize, initialise), less the
  metrics processor built in between;
- compile: torch.compile's compilations (dynamo and its deferred backward), which run in step 1;
- step 1: the first step, less its compilation; other: the rest (process group, checks, optimizer, ...).

``STARTUP`` is the process's clock: ``mark`` charges the time since the previous mark, ``timing``
charges a block, ``begin``/``end`` an interval less the blocks timed inside it.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PHASES = ("imports", "config", "tokenizer", "data", "model", "compile", "checkpoint load", "step 1")


def process_age_s() -> float | None:
    """Seconds since this process started, from the kernel's record (Linux); ``None`` elsewhere."""
    try:
        # field 22 of /proc/self/stat, counted after the ")" that ends the command name
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class StartupClock:
    """A rank's start-up, phase by phase (see the module docstring)."""

    def __init__(self) -> None:
        now = time.monotonic()
        age = process_age_s()
        self.started = now - age if age is not None else now  # elsewhere: from this module's import
        self.spent: dict[str, float] = {}
        self._last_mark = self.started
        self._timed_total = 0.0  # every timed block so far: an interval subtracts those inside it
        self._open: dict[str, tuple[float, float]] = {}

    def _charge(self, phase: str, seconds: float) -> None:
        self.spent[phase] = self.spent.get(phase, 0.0) + seconds

    def mark(self, phase: str) -> None:
        """Charge ``phase`` with the time since the previous mark (or process start)."""
        now = time.monotonic()
        self._charge(phase, now - self._last_mark)
        self._last_mark = now

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Charge ``phase`` with the block's time."""
        start = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - start
            self._charge(phase, spent)
            self._timed_total += spent

    def timed(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, its calls charged to ``phase``."""

        @functools.wraps(fn)
        def timed_fn(*args, **kwargs):
            with self.timing(phase):
                return fn(*args, **kwargs)

        return timed_fn

    def begin(self, phase: str) -> None:
        """Open an interval charged to ``phase`` at :meth:`end`, less the blocks timed inside it."""
        self._open[phase] = (time.monotonic(), self._timed_total)

    def end(self, phase: str) -> None:
        if phase not in self._open:
            return
        start, timed_before = self._open.pop(phase)
        self._charge(phase, time.monotonic() - start - (self._timed_total - timed_before))

    def watch_compiles(self) -> None:
        """Charge torch.compile's compilations to ``compile`` (torch's compile start/end callbacks)."""
        from torch._dynamo.callback import callback_handler  # no public hook for compile time in torch 2.13

        started: list[float] = []

        def on_start(_args) -> None:
            started.append(time.monotonic())

        def on_end(_args) -> None:
            if started:
                spent = time.monotonic() - started.pop()
                self._charge("compile", spent)
                self._timed_total += spent

        callback_handler.register_start_callback(on_start)
        callback_handler.register_end_callback(on_end)

    def line(self) -> str:
        """The one-line breakdown, up to now (called at the end of step 1)."""
        total = time.monotonic() - self.started
        shown = [f"{phase} {self.spent.get(phase, 0.0):.1f} s" for phase in PHASES]
        other = total - sum(self.spent.get(phase, 0.0) for phase in PHASES)
        return f"BOOST start-up: {', '.join(shown)}, other {other:.1f} s; to step 1 {total:.1f} s from process start"


STARTUP = StartupClock()

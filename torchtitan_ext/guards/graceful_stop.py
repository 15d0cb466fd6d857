"""SIGTERM or SIGINT stops a run at a step boundary all ranks agree on, with a checkpoint there.

Clusters preempt with SIGTERM and SIGKILL a grace period later; Ctrl-C reaches torchrun, which
forwards it to every rank; Slurm signals every process of the job. A signal only records the
request: the training loop looks at it at a step boundary, never mid-step.

Agreement. A signal may reach only some ranks, or reach them in different steps, and a checkpoint
needs every rank at the same step. Every ``check_every`` steps (``boost.stop_check_every``) the
ranks all-reduce (MAX) one integer, "a stop was asked here"; a rank that sees it stops, and all see
it at the same step. The trade-off: that all-reduce is a host sync; checking every step would stop
one step after the signal at the price of a sync per step, checking every k steps costs one sync per
k steps and stops up to k steps later — pick k so that k steps and a save fit in the grace.

Grace. From the first signal the rank has ``boost.stop_grace_s`` seconds to reach the boundary and
save; past it a watchdog thread (which runs even while the main thread waits in a collective) ends
the process without a checkpoint, leaving the previous one as the resume point. A second signal
ends it at once — unless it comes within ``_SAME_REQUEST_S`` of the first: a signal sent to the whole
job reaches a rank directly and again through torchrun's forwarding, and those two are one request.

Exit codes: 0 after a stop with its checkpoint; 128 + signal number (130 SIGINT, 143 SIGTERM) for
a stop without one (grace exceeded, second signal).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# torchrun's forwarding of a signal the rank already got lands within milliseconds; a person's
# second Ctrl-C rarely comes this fast
_SAME_REQUEST_S = 1.0


class GracefulStop:
    """The stop request of one rank: signal handlers, the agreement at step boundaries, the grace.

    Args:
        grace_s: seconds from the first signal to the end of the process, checkpoint or not.
        check_every: the ranks agree on a stop at steps that are multiples of this.
        device: where the agreement's one-element tensor lives (the default group's device); may be
            set later — the handlers go in before the trainer builds anything, so a signal during
            start-up is a request too.
    """

    def __init__(self, grace_s: float, check_every: int, device: torch.device | None = None) -> None:
        if grace_s <= 0 or check_every < 1:
            raise ValueError(
                f"boost.stop_grace_s = {grace_s} must be > 0 and boost.stop_check_every = {check_every} ≥ 1"
            )
        self.grace_s = grace_s
        self.check_every = check_every
        self.device = device
        self.signum: int | None = None  # this rank's first signal
        self._first_at = 0.0
        self._watchdog: threading.Timer | None = None
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._first_at = signum, now
            _say(
                f"{signal.Signals(signum).name}: stopping at the next agreed step boundary "
                f"(within {self.check_every} steps or {self.grace_s:g} s) with a checkpoint; "
                f"signal again to stop at once without one"
            )
            self._watchdog = threading.Timer(self.grace_s, self._grace_exceeded)
            self._watchdog.daemon = True
            self._watchdog.start()
        elif now - self._first_at >= _SAME_REQUEST_S:
            _leave(f"second {signal.Signals(signum).name}: stopped at once, without a checkpoint", signum)

    def _grace_exceeded(self) -> None:
        _leave(
            f"boost.stop_grace_s = {self.grace_s:g} s passed before a step boundary: stopped without "
            f"a checkpoint",
            self.signum,
        )

    def agreed(self, step: int) -> bool:
        """Whether every rank stops after ``step``; a collective at multiples of ``check_every``."""
        if step % self.check_every:
            return False
        asked = torch.tensor([0 if self.signum is None else 1], dtype=torch.int32, device=self.device)
        if dist.is_initialized():
            dist.all_reduce(asked, op=dist.ReduceOp.MAX)
        return bool(asked.item())

    def done(self) -> None:
        """The stop is saved: the grace no longer applies to the teardown that follows."""
        if self._watchdog is not None:
            self._watchdog.cancel()


def _say(message: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(f"BOOST: {message}", file=sys.stderr, flush=True)


def _leave(message: str, signum: int | None) -> None:
    _say(message)
    sys.stdout.flush()
    os._exit(128 + (signum or signal.SIGTERM))

"""A rank ends when its launcher ends.

torchrun starts each rank in a session of its own, so a launcher killed with SIGKILL (an OOM killer,
``kill -9``, a node agent) leaves its ranks running, re-parented to pid 1, training and saving
checkpoints nobody asked for. Linux's ``PR_SET_PDEATHSIG`` has the kernel send the rank SIGKILL the
moment its parent (the launcher: torchrun's agent spawns the ranks itself, from its main thread)
exits; SIGKILL, not SIGTERM, because a run without its launcher is over — a graceful save would race
a restarted run for the same folder.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def end_with_launcher() -> None:
    """Have the kernel kill this process when its parent exits (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    launcher = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # the launcher may have died between the two reads: the kernel only reports deaths after the prctl
    # (a parent of pid 1 is no sign: in a container torchrun itself may be pid 1)
    if os.getppid() != launcher:
        os.kill(os.getpid(), signal.SIGKILL)

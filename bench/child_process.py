"""A benchmark's child process read line by line against a deadline, and ended with everything it started."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time


class Lines:
    """``proc``'s stdout (text mode), read on a thread: the caller waits for each line with a deadline, so a
    child that hangs without printing is still stopped (a ``for line in proc.stdout`` loop would wait on it
    for ever)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            for line in proc.stdout:
                self._queue.put(line)
            self._queue.put(None)

        threading.Thread(target=read, daemon=True).start()

    def next(self, deadline: float) -> str | None:
        """The next line; ``None`` once the output has ended; ``TimeoutError`` at ``deadline``
        (``time.perf_counter()``'s clock) with no line."""
        try:
            return self._queue.get(timeout=max(deadline - time.perf_counter(), 0.01))
        except queue.Empty:
            raise TimeoutError from None


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group (started with ``start_new_session=True``: a launcher, torchrun and its
    ranks end together); a group already gone is no error. ``proc`` is not reaped here (``proc.poll()`` would
    reap an exited one, and the caller's ``os.wait4`` then find no child): the caller reaps it, with ``wait``
    or ``os.wait4``."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # an exited, unreaped proc still holds its group: no error
    except ProcessLookupError:
        pass

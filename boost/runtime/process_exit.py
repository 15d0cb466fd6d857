"""Leave a finished distributed process without interpreter finalisation.

On torch 2.13 a gloo process can abort during interpreter finalisation, after its work is done and
its process group destroyed ("terminate called without an active exception", SIGABRT, no Python
frame on the stack), so a run that succeeded would exit -6; torchtitan training runs and plain
``mp.spawn`` gloo workers are alike in this. Skipping finalisation keeps the exit status the work's.
Call this last, on the success path only.

Example::

    >>> dist.destroy_process_group()
    >>> exit_finished_process()   # flushes logs and streams, then os._exit(0)
"""

from __future__ import annotations

import logging
import os
import sys


def exit_finished_process() -> None:
    """Flush logging and the standard streams, then end the process with status 0."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

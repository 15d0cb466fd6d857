"""torchrun, with an orderly end when the run is stopped by a signal.

``python -m torchtitan_ext.launch ARGS`` is ``torchrun ARGS`` (``run_train.sh`` and
``scripts/node_train.sh`` use it). torchrun's agent turns SIGTERM/SIGINT into a ``SignalException``,
forwards the signal to the ranks, waits for them, then re-raises: the console ended in two tracebacks
for what was an orderly stop. Here the exception becomes one line and the exit code 128 + signal
number (143 SIGTERM, 130 SIGINT); the ranks have said by then whether they saved.

torchrun waits 30 s for the ranks before SIGKILL; a rank bounds its own stop by ``boost.stop_grace_s``
(``graceful_stop.py``), so the launcher waits longer unless told otherwise (``--shutdown-timeout`` or
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``).

A rank that dies on a signal (a segfault or an abort in NCCL, gloo, CUDA or a compiled kernel) first
prints every thread's Python stack (``PYTHONFAULTHANDLER``, which the ranks inherit, unless it is set):
torchrun alone reports "exitcode: -11" and nothing of where.
"""

import os
import signal
import sys

from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException

# above any sensible boost.stop_grace_s; the cluster's own SIGKILL is the real bound
_SHUTDOWN_TIMEOUT_S = "3600"


def main(argv: list[str]) -> int:
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", _SHUTDOWN_TIMEOUT_S)
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    try:
        torchrun.main(argv)  # torchrun's own, failure reports (@record) included
    except SignalException as e:
        name = signal.Signals(e.sigval).name
        print(
            f"BOOST launcher: {name} received; the ranks have stopped (their last lines above say whether "
            f"they saved a checkpoint)",
            file=sys.stderr,
            flush=True,
        )
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

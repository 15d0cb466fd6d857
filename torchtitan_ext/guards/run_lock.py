"""One trainer per run folder: an ``flock`` on ``<dump>/.boost_run.lock``, held for the life of the run.

torchrun starts its workers in sessions of their own, so killing ``run_train.sh``'s process group
leaves the ranks training and saving; a trainer started on the same folder right away would write
the same checkpoints beside them. Rank 0 holds an exclusive ``flock`` from before its process group
starts until the process ends — the OS releases it when the process dies, however it dies, so a
lock is never stale. A second trainer's rank 0 (and ``run_train.sh``'s preflight, before torchrun)
finds it held and refuses, naming the holder's pid from the file; its other ranks are stopped by
torchrun when rank 0 exits. On a file system without ``flock`` the run starts with a warning, unguarded.

The preflight only probes, with a shared lock, and writes nothing: a multi-node run's nodes each run it at
once (``scripts/node_train.sh``), and shared probes do not refuse each other where exclusive ones would. A
trainer's exclusive lock refuses every probe; a probe that holds the file for its instant as rank 0 takes the
lock is waited out (``PROBE_GRACE_S``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
import warnings
from pathlib import Path

LOCK_FILE = ".boost_run.lock"
# flock's errors where the file system has no locks (not where another process holds one)
NO_LOCKS = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP)
# how long rank 0 retries a lock another process has: a preflight's probe holds it for microseconds, a
# trainer for the life of its run
PROBE_GRACE_S = 2.0


class RunFolderInUse(SystemExit):
    """Another live trainer holds the run folder. A ``SystemExit``: uncaught, it prints the message
    alone (no traceback) and ends the process."""


class RunLock:
    """The held lock of one run folder; keep the object alive for as long as the run."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def acquire(cls, dump_folder: str | Path) -> RunLock:
        """Take the folder's lock, recording this process as its holder; raise ``RunFolderInUse`` if held."""
        path = Path(dump_folder) / LOCK_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + PROBE_GRACE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:  # perhaps a preflight's probe, gone in microseconds
                    time.sleep(0.05)
                    continue
                holder = _read_holder(fd)
                os.close(fd)
                raise RunFolderInUse(_refusal(Path(dump_folder), holder)) from None
            except OSError as e:
                if e.errno not in NO_LOCKS:
                    os.close(fd)
                    raise
                _warn_unguarded(dump_folder, e)
                break
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        """Give the folder up before the process ends (tests; a finished run simply exits)."""
        if self._fd >= 0:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = -1


def check_run_folder_free(dump_folder: str | Path) -> None:
    """Raise ``RunFolderInUse`` if a live trainer holds ``dump_folder``; take nothing and write nothing (the
    preflight): a shared lock, for an instant, which another probe's does not refuse and a trainer's does."""
    path = Path(dump_folder) / LOCK_FILE
    if not path.is_file():
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunFolderInUse(_refusal(Path(dump_folder), _read_holder(fd))) from None
    except OSError as e:
        if e.errno not in NO_LOCKS:
            raise
        _warn_unguarded(dump_folder, e)
    finally:
        os.close(fd)  # drops the shared lock


def _warn_unguarded(dump_folder: str | Path, error: OSError) -> None:
    # a file system without flock (Lustre mounted noflock, some FUSE mounts): the run goes on, unguarded, and
    # says so once
    warnings.warn(
        f"job.dump_folder = {str(dump_folder)!r}: its file system takes no flock ({os.strerror(error.errno)}), "
        "so a second trainer started on this folder would not be refused: start one at a time",
        stacklevel=3,
    )


def _read_holder(fd: int) -> str:
    text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    return text or "a process that has not yet written its pid"


def _refusal(dump_folder: Path, holder: str) -> str:
    return (
        f"BOOST run folder error: job.dump_folder = {str(dump_folder)!r} is in use by another trainer "
        f"({holder}). Two trainers in one folder overwrite each other's checkpoints. Wait for it to finish "
        "or stop it (kill that pid: torchrun's ranks outlive a killed run_train.sh), or train elsewhere "
        "with --job.dump_folder NEW_FOLDER."
    )

"""The run folder's lock (``torchtitan_ext.guards.run_lock``) where the file system takes no ``flock``."""

from __future__ import annotations

import errno
import fcntl

import pytest

from torchtitan_ext.guards import run_lock
from torchtitan_ext.guards.run_lock import RunFolderInUse, RunLock, check_run_folder_free


def test_a_held_folder_is_refused_naming_the_holder(tmp_path):
    held = RunLock.acquire(tmp_path)
    try:
        with pytest.raises(RunFolderInUse, match=r"is in use by another trainer \(pid \d+ on "):
            check_run_folder_free(tmp_path)
    finally:
        held.release()
    check_run_folder_free(tmp_path)  # released: free again


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_file_system_without_flock_starts_the_run_with_a_warning(tmp_path, monkeypatch, code):
    # Lustre mounted noflock answers flock with ENOSYS: the run is not refused for it, and says it is unguarded
    def no_flock(fd, operation):
        raise OSError(code, "no locks here")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.warns(UserWarning, match="its file system takes no flock .* would not be refused"):
        RunLock.acquire(tmp_path).release()
    with pytest.warns(UserWarning, match="takes no flock"):
        check_run_folder_free(tmp_path)


def test_another_flock_error_is_not_taken_for_a_file_system_without_locks(tmp_path, monkeypatch):
    def failing(fd, operation):
        raise OSError(errno.EBADF, "bad descriptor")

    monkeypatch.setattr(fcntl, "flock", failing)
    with pytest.raises(OSError, match="bad descriptor"):
        RunLock.acquire(tmp_path)


def test_preflights_probing_at_once_do_not_refuse_each_other_and_write_nothing(tmp_path):
    # a multi-node run's nodes each run the preflight at the same moment, on a resume's folder: a probe that
    # took the exclusive lock (and wrote its pid) refused the other node's probe as a live trainer
    RunLock.acquire(tmp_path).release()
    lock = tmp_path / ".boost_run.lock"
    written = lock.read_bytes()
    with open(lock, "rb") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # the other node's probe, at this instant
        check_run_folder_free(tmp_path)
    assert lock.read_bytes() == written


def test_rank_0_waits_out_a_probe_but_not_a_trainer(tmp_path, monkeypatch):
    import threading

    RunLock.acquire(tmp_path).release()
    probe = open(tmp_path / ".boost_run.lock", "rb")
    fcntl.flock(probe.fileno(), fcntl.LOCK_SH)
    threading.Timer(0.2, probe.close).start()  # a preflight's probe, gone soon after rank 0 asks
    RunLock.acquire(tmp_path).release()
    held = RunLock.acquire(tmp_path)
    monkeypatch.setattr(run_lock, "PROBE_GRACE_S", 0.2)
    try:
        with pytest.raises(RunFolderInUse, match=r"in use by another trainer \(pid \d+ on "):
            RunLock.acquire(tmp_path)
    finally:
        held.release()

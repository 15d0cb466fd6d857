"""A rank (``TRAIN_FILE=tests.end_to_end.native_crash_rank ./run_train.sh``) that dies on a segfault, as a
rank does when a collective library or a kernel faults: test_lifecycle.py reads what it leaves."""

import faulthandler


def fault_in_native_code() -> None:
    faulthandler._sigsegv()  # CPython's own test hook: a real SIGSEGV in C


if __name__ == "__main__":
    fault_in_native_code()

"""Fixtures of tests/end_to_end/."""

from tests.end_to_end.default_run import default_run  # noqa: F401

"""The one exception for input a user must change: configuration, command line or data.

Everything that checks input raises it; ``torchtitan_ext.preflight.main`` (the preflight in
``run_train.sh``) and the trainer print it as one line, ``BOOST config error: <message>``, and exit 2.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration or input that cannot run; the message names the field or file, the value and the fix."""


def refuse(field: str, value: object, fix: str) -> None:
    """Raise ``ConfigError`` as ``<field> = <value>: <fix>``, the form every refusal takes."""
    raise ConfigError(f"{field} = {value!r}: {fix}")

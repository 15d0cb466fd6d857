"""Refuse a bad job before any process group, tokenizer, model or checkpoint is touched.

``preflight`` is the launcher's check (``torchtitan_ext.start``; ``python -m torchtitan_ext.preflight
--job.config_file X.toml`` alone); the trainer runs ``check_config`` again on every rank. ``read``
reads a job without torch or torchtitan (``schema``: torchtitan's dataclasses from a snapshot,
``config_types``: each value's type, ``command_line``: the overrides as torchtitan's parser would read
them); ``check`` runs the table of range and combination rules (``job_rules``; BOOST's own rules come
from ``boost.training.rules``) and the input files.
"""

from boost.runtime.lazy_exports import lazy_exports

# Loaded on first use: importing torchtitan_ext.preflight.read must not load the checks' imports (torch).
_EXPORTS = {
    "ConfigError": "torchtitan_ext.preflight.check",
    "check_config": "torchtitan_ext.preflight.check",
    "check_job": "torchtitan_ext.preflight.check",
    "dry_run_mode": "torchtitan_ext.preflight.check",
    "dry_run_rank": "torchtitan_ext.preflight.check",
    "load_toml": "torchtitan_ext.preflight.read",
    "main": "torchtitan_ext.preflight.check",
    "preflight": "torchtitan_ext.preflight.check",
    "world_size_from_env": "torchtitan_ext.preflight.check",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

"""Refuse a bad job before any process group, tokenizer, model or checkpoint is touched.

``python -m torchtitan_ext.preflight --job.config_file X.toml`` is ``run_train.sh``'s check; the trainer
runs ``check_config`` again on every rank. ``check`` reads and checks a job, ``config_types`` checks
each value's type, ``command_line`` reads the overrides as torchtitan's parser would, ``job_rules`` is
the table of range and combination rules (BOOST's own rules come from ``boost.rules``).
"""

from torchtitan_ext.preflight.check import (
    ConfigError,
    check_config,
    check_job,
    load_toml,
    main,
    world_size_from_env,
)

__all__ = ["ConfigError", "check_config", "check_job", "load_toml", "main", "world_size_from_env"]

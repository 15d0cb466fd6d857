"""BOOST's registration and glue with torchtitan 0.2.2.

- ``torchtitan_ext.cpu``: lets torchtitan's trainer run on CPU/gloo (import first).
- ``torchtitan_ext.config``: the ``[boost]`` TOML section (``--job.custom_config_module``).
- ``torchtitan_ext.train_spec``: the ``boost_llama`` train spec (``--experimental.custom_import``).
- ``torchtitan_ext.train``: the entry point ``run_train.sh`` launches.
"""

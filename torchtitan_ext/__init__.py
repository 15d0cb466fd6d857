"""BOOST's registration and glue with torchtitan 0.2.2 (the library, ``boost``, knows nothing of it).

- ``train_spec``: the ``boost_llama`` train spec (registered by ``train``); ``model``: the
  calls torchtitan's trainer makes on the model and its args; ``config``: the ``[boost]`` section
  (``--job.custom_config_module``).
- ``infra/``: torchtitan's parallelize and pipeline functions for BOOST models.
- ``text_datasets``, ``tokenizer``: the offline corpus, local files and tokenizer, registered with
  torchtitan's dataloader.
- ``preflight`` (with ``job_rules``, ``config_types``): refuse a bad job before any work starts.
- ``checkpoint_*``, ``run_lock``, ``nonfinite_guard``, ``metrics``: guards and metrics around torchtitan's.
- ``train``: the entry point ``run_train.sh`` launches.
- ``cpu``: lets torchtitan's trainer run without an accelerator; ``torchtitan_private``: every private
  torchtitan name BOOST touches.
"""

# torchtitan fixes its device type when torchtitan.tools.utils is first imported; the CPU adaptation
# must see that import, so every module of this package installs it first (this package's import).
from torchtitan_ext import cpu as _cpu  # noqa: F401,I001

"""BOOST's registration and glue with torchtitan 0.2.2 (the library, ``boost``, knows nothing of it).

- ``train_spec``: the ``boost_llama`` train spec (registered by ``train``); ``model``: the
  calls torchtitan's trainer makes on the model and its args; ``config``: the ``[boost]`` section
  (``--job.custom_config_module``).
- ``infra/``: torchtitan's parallelize and pipeline functions for BOOST models.
- ``text_datasets``, ``tokenizer``: the offline corpus, local files and tokenizer, registered with
  torchtitan's dataloader; ``dataset_check``: the datasets a job names, checked without torchtitan.
- ``preflight`` (``read``, ``schema``, ``config_types``, ``command_line``, ``job_rules``, ``check``):
  refuse a bad job before any work starts, a value that does not parse before torch loads.
- ``checkpoint_*``, ``run_lock``, ``nonfinite_guard``, ``metrics``: guards and metrics around torchtitan's.
- ``start``: run_train.sh's one Python process (preflight, then torchrun or the dry run); ``train``:
  the entry point each rank runs; ``startup_clock``: where a rank's start-up went, one line after step 1.
- ``cpu``: lets torchtitan's trainer run without an accelerator; ``torchtitan_private``: every private
  torchtitan name BOOST touches.
"""

# torchtitan fixes its device type when torchtitan.tools.utils is first imported; the CPU adaptation
# must see that import, so this package's import arranges it (for whichever module imports torchtitan
# first) without importing torch itself.
from torchtitan_ext import cpu as _cpu  # noqa: I001

_cpu.install_at_torchtitan_import()

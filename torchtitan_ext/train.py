"""Entry point: torchtitan's own ``main``, with a trainer that first checks the whole configuration
and the checkpoint it would resume from — before any process group, data or model exists.

``run_train.sh`` runs ``torchrun ... -m torchtitan_ext.train --job.config_file X.toml``.
"""

import os
import sys

import torch.distributed as dist

import torchtitan_ext.cpu  # noqa: F401  (must precede every torchtitan import)
import torchtitan_ext.train_spec  # noqa: F401  (registers the "boost_llama" train spec)

from torchtitan.train import main, Trainer

from boost.process_exit import exit_finished_process
from torchtitan_ext.checkpoint_guard import choose_load_step
from torchtitan_ext.validate import ConfigError, check_config


class BoostTrainer(Trainer):
    """torchtitan's ``Trainer``: config and checkpoint checks first, and an orderly exit."""

    def __init__(self, job_config):
        try:
            check_config(job_config, int(os.environ.get("WORLD_SIZE", "1")))
        except ConfigError as e:
            print(f"BOOST config error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        choose_load_step(job_config)
        super().__init__(job_config)

    def train(self) -> None:
        super().train()
        # torchtitan's rank 0 sleeps after the last step while the other ranks go straight on to
        # destroy_process_group; on gloo, ranks tearing down at different times once aborted
        # (SIGABRT) a run that had finished. Leave together. Only after a normal finish: a rank
        # that raised must not wait here for peers that may be gone.
        if dist.is_initialized():
            dist.barrier()


if __name__ == "__main__":
    main(BoostTrainer)  # raises on failure: only a finished run reaches the next line
    exit_finished_process()  # see boost.process_exit: gloo can abort in interpreter finalisation

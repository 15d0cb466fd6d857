"""Entry point: torchtitan's own ``main(Trainer)``, after the CPU adapter, BOOST's registration and
an up-front check of the whole configuration.

``run_train.sh`` runs ``torchrun ... -m torchtitan_ext.train --job.config_file X.toml``.
"""

import torchtitan_ext.cpu  # noqa: F401  (must precede every torchtitan import)
import torchtitan_ext.train_spec  # noqa: F401  (registers the "boost_llama" train spec)

from torchtitan.train import main, Trainer

from torchtitan_ext.checkpoint_guard import set_aside_corrupt_checkpoints
from torchtitan_ext.validate import main as validate_config

if __name__ == "__main__":
    validate_config()  # exits with a message naming the field before any work starts
    set_aside_corrupt_checkpoints()
    main(Trainer)

"""Entry point: torchtitan's own ``main(Trainer)``, after the CPU adapter and BOOST's registration.

``run_train.sh`` runs ``torchrun ... -m torchtitan_ext.train --job.config_file X.toml``.
"""

import torchtitan_ext.cpu  # noqa: F401  (must precede every torchtitan import)
import torchtitan_ext.train_spec  # noqa: F401  (registers the "boost_llama" train spec)

from torchtitan.train import main, Trainer

if __name__ == "__main__":
    main(Trainer)

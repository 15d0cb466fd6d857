"""``python -m boost.after_training.interop``: see ``boost.after_training.interop.cli``."""

import logging
import sys

from boost.after_training.interop.cli import main

logging.basicConfig(level=logging.WARNING)
sys.exit(main())

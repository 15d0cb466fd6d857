"""``python -m boost.interop``: see ``boost.interop.cli``."""

import logging
import sys

from boost.interop.cli import main

logging.basicConfig(level=logging.WARNING)
sys.exit(main())

"""``python -m boost.training.data.prepare``: see ``boost.training.data.prepare.cli``."""

import sys

from boost.training.data.prepare.cli import main

sys.exit(main())

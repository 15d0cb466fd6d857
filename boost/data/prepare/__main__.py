"""``python -m boost.data.prepare``: see ``boost.data.prepare.cli``."""

import sys

from boost.data.prepare.cli import main

sys.exit(main())

"""Loaded by every Python process a fast-tier test starts (``tests/conftest.py`` puts this folder first on
their ``PYTHONPATH``): the first import of torch in such a process is written to ``$BOOST_TORCH_IMPORT_LOG``,
and the test that started it fails unless it is marked ``slow``. The fast tier starts no process that
imports torch (README): such a process costs seconds of the 2 cores, where the tier's tests cost
milliseconds."""

import os
import sys

_LOG = os.environ.get("BOOST_TORCH_IMPORT_LOG")


class _TorchImportWatch:
    """A meta-path finder that finds nothing: it notes the first ``import torch`` and steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            with open(_LOG, "a") as log:
                log.write(" ".join(sys.argv)[:300] + "\n")
            sys.meta_path.remove(self)
        return None


if _LOG:
    sys.meta_path.insert(0, _TorchImportWatch())

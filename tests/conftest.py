# The CPU adapter must see torchtitan's import first, as the trainer's entry point arranges.
import torchtitan_ext.cpu  # noqa: F401

# torchtitan_ext installs its CPU adaptation on import: before any test module imports torchtitan.
import torchtitan_ext  # noqa: F401

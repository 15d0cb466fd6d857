# The Python run_train.sh and scripts/node_train.sh run, sourced by both from the repository root:
# PYTHON where it is set; else the checkout's .venv where no virtual environment is active (a bare
# checkout runs with what its README installed); else the python on PATH.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -z "${VIRTUAL_ENV:-}" && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python; fi
fi

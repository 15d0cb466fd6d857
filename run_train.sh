#!/usr/bin/env bash
# torchtitan-style launcher for BOOST.
#   NGPU=2 CONFIG_FILE=train_configs/debug.toml ./run_train.sh --parallelism.tensor_parallel_degree 2
# NGPU is the number of processes on this node (GPUs, or CPU processes with gloo where there is no GPU).
# Extra arguments override TOML fields (--section.field value). Multi-node: see README.
# DRY_RUN=1 runs one process as rank 0 of NGPU on torchtitan's fake process group (no torchrun,
# no communication): the real layout and model at the real world size, on one machine.
#   DRY_RUN=1 NGPU=16 CONFIG_FILE=train_configs/7B.toml ./run_train.sh --training.steps 2 --checkpoint.no-enable
# DRY_RUN_RANK=k plays rank k instead (e.g. a pipeline's last stage, which holds the head and the loss).
# LOG_RANK=0,1 chooses the ranks on the console (unset: rank 0, and under PP the rank holding the loss);
# LOG_DIR=path keeps every rank's output in files;
# TRAIN_FILE names the module each rank runs (torchtitan_ext.train).
# PYTHON=path runs that interpreter; unset, the checkout's .venv where no virtual environment is active.
set -euo pipefail
cd "$(dirname "$0")"

NGPU=${NGPU:-1}
source scripts/config_choice.sh "$@"  # CONFIG_ARGS: CONFIG_FILE, or --job.config_file among the arguments
source scripts/python_choice.sh

# torchtitan's dry-run convention: the fake backend takes its world size from NGPU. The flag goes
# before "$@", where tyro wants fixed options.
DRY_ARGS=()
if [[ "${DRY_RUN:-0}" == "1" ]]; then DRY_ARGS=(--comm.mode fake_backend); fi

# One Python process before the ranks (torchtitan_ext/start.py): the preflight refuses a bad
# configuration before any process starts (one line naming the field and the fix; a value that does
# not parse before torch loads), each CPU process gets its share of the cores (OMP_NUM_THREADS),
# then torchrun's agent starts the ranks in that process (with DRY_RUN=1, the trainer runs there).
NGPU="$NGPU" exec "$PYTHON" -m torchtitan_ext.start "${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}" \
  "${DRY_ARGS[@]+"${DRY_ARGS[@]}"}" "$@"

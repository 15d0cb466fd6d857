#!/usr/bin/env bash
# torchtitan-style launcher for BOOST.
#   NGPU=2 CONFIG_FILE=train_configs/debug.toml ./run_train.sh --parallelism.tensor_parallel_degree 2
# NGPU is the number of processes on this node (GPUs, or CPU processes with gloo where there is no GPU).
# Extra arguments override TOML fields (--section.field value). Multi-node: see README.
# DRY_RUN=1 runs one process as rank 0 of NGPU on torchtitan's fake process group (no torchrun,
# no communication): the real layout and model at the real world size, on one machine.
#   DRY_RUN=1 NGPU=16 CONFIG_FILE=train_configs/7B.toml ./run_train.sh --training.steps 2
set -euo pipefail
cd "$(dirname "$0")"

NGPU=${NGPU:-1}
# The config is CONFIG_FILE or an argument --job.config_file X (torchtitan's CLI form); the default
# only where neither is given. Both given: both are passed and the preflight refuses two different
# files (torchtitan would read the first one alone).
CONFIG_ARGS=()
config_in_args=0
for arg in "$@"; do
  case "$arg" in --job.config_file|--job.config_file=*|--job.config-file|--job.config-file=*) config_in_args=1 ;; esac
done
if [[ -n "${CONFIG_FILE:-}" || "$config_in_args" == "0" ]]; then
  CONFIG_ARGS=(--job.config_file "${CONFIG_FILE:-./train_configs/debug.toml}")
fi
TRAIN_FILE=${TRAIN_FILE:-"torchtitan_ext.train"}
PYTHON=${PYTHON:-python}
if [[ -z "${VIRTUAL_ENV:-}" && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi

# torchtitan's dry-run convention: the fake backend takes its world size from NGPU. The flag goes
# before "$@", where tyro wants fixed options.
DRY_ARGS=()
if [[ "${DRY_RUN:-0}" == "1" ]]; then DRY_ARGS=(--comm.mode fake_backend); fi

# Refuse a bad configuration before any process starts (names the field and the fix); NGPU
# is checked there too, before the arithmetic below divides by it.
WORLD_SIZE="$NGPU" "$PYTHON" -m torchtitan_ext.preflight "${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}" \
  "${DRY_ARGS[@]+"${DRY_ARGS[@]}"}" "$@" || exit 2

# Two CPU processes on two cores: keep each to its share instead of oversubscribing.
PROCESSES=$NGPU
if [[ "${DRY_RUN:-0}" == "1" ]]; then PROCESSES=1; fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( ($(nproc) + PROCESSES - 1) / PROCESSES ))}
fi

if [[ "${DRY_RUN:-0}" == "1" ]]; then
  # one process, rank 0 of NGPU; torchtitan's trainer still reads LOCAL_RANK
  NGPU="$NGPU" LOCAL_RANK=0 RANK=0 exec "$PYTHON" -m "$TRAIN_FILE" \
    "${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}" "${DRY_ARGS[@]}" "$@"
fi

# LOG_DIR=path keeps every rank's stdout/stderr in files (torchrun's --log-dir), not only LOG_RANK's.
LOG_ARGS=()
if [[ -n "${LOG_DIR:-}" ]]; then LOG_ARGS=(--log-dir "$LOG_DIR"); fi

PYTORCH_ALLOC_CONF=${PYTORCH_ALLOC_CONF:-"expandable_segments:True"} \
exec "$PYTHON" -m torchtitan_ext.launch --nproc_per_node="$NGPU" --rdzv_backend c10d --rdzv_endpoint="localhost:0" \
  --local-ranks-filter "${LOG_RANK:-0}" --role rank --tee 3 "${LOG_ARGS[@]+"${LOG_ARGS[@]}"}" \
  -m "$TRAIN_FILE" "${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}" "$@"

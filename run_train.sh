#!/usr/bin/env bash
# torchtitan-style launcher for BOOST.
#   NGPU=2 CONFIG_FILE=train_configs/debug_cola.toml ./run_train.sh --parallelism.tensor_parallel_degree 2
# NGPU is the number of processes on this node (GPUs, or CPU processes with gloo where there is no GPU).
# Extra arguments override TOML fields (--section.field value). Multi-node: see README.
set -euo pipefail
cd "$(dirname "$0")"

NGPU=${NGPU:-1}
CONFIG_FILE=${CONFIG_FILE:-"./train_configs/debug_cola.toml"}
TRAIN_FILE=${TRAIN_FILE:-"torchtitan_ext.train"}
PYTHON=${PYTHON:-python}
if [[ -z "${VIRTUAL_ENV:-}" && -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; fi

if [[ ! -f "$CONFIG_FILE" ]]; then
  echo "run_train.sh: CONFIG_FILE=$CONFIG_FILE does not exist (see train_configs/)" >&2
  exit 2
fi

# Two CPU processes on two cores: keep each to its share instead of oversubscribing.
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( ($(nproc) + NGPU - 1) / NGPU ))}
fi

# Refuse a bad configuration before any process starts (names the field and the fix).
WORLD_SIZE="$NGPU" "$PYTHON" -m torchtitan_ext.validate --job.config_file "$CONFIG_FILE" "$@" || exit 2

# LOG_DIR=path keeps every rank's stdout/stderr in files (torchrun's --log-dir), not only LOG_RANK's.
LOG_ARGS=()
if [[ -n "${LOG_DIR:-}" ]]; then LOG_ARGS=(--log-dir "$LOG_DIR"); fi

PYTORCH_ALLOC_CONF=${PYTORCH_ALLOC_CONF:-"expandable_segments:True"} \
exec "$PYTHON" -m torch.distributed.run --nproc_per_node="$NGPU" --rdzv_backend c10d --rdzv_endpoint="localhost:0" \
  --local-ranks-filter "${LOG_RANK:-0}" --role rank --tee 3 "${LOG_ARGS[@]+"${LOG_ARGS[@]}"}" \
  -m "$TRAIN_FILE" --job.config_file "$CONFIG_FILE" "$@"

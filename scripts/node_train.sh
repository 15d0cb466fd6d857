#!/usr/bin/env bash
# One node's part of a multi-node run: torchrun (through torchtitan_ext.launch) with a c10d rendezvous.
# Run it on every node, by hand or from scripts/slurm_train.sbatch (one srun task per node):
#   NNODES=2 NGPU=8 RDZV_HOST=node01 CONFIG_FILE=train_configs/7B.toml scripts/node_train.sh --training.steps 100
# Under Slurm NNODES, RDZV_HOST and the run id come from SLURM_JOB_NUM_NODES, the first host of
# SLURM_JOB_NODELIST and SLURM_JOB_ID. SIGTERM/SIGINT stop the run with a checkpoint (README, "Signals").
set -euo pipefail
cd "$(dirname "$0")/.."

NNODES=${NNODES:-${SLURM_JOB_NUM_NODES:?set NNODES (or run under Slurm)}}
NGPU=${NGPU:-8}
CONFIG_FILE=${CONFIG_FILE:-"./train_configs/debug.toml"}
source scripts/python_choice.sh

first_host() {  # "gpu[07-09,12],cpu3" -> gpu07; what `scontrol show hostnames | head -1` gives
  local list=$1 head=${1%%,*}
  if [[ "$list" == *"["* && "${list%%[*}" != *","* ]]; then
    local rest=${list#*[}
    head="${list%%[*}${rest%%[-,\]]*}"
  fi
  echo "$head"
}
RDZV_HOST=${RDZV_HOST:-$(first_host "${SLURM_JOB_NODELIST:?set RDZV_HOST (or run under Slurm)}")}
RDZV_PORT=${RDZV_PORT:-29500}
RUN_ID=${RUN_ID:-${SLURM_JOB_ID:-boost}}

# The preflight first, at the whole world size, on every node: a bad job is refused in one line before
# any rendezvous (each rank checks again, as under run_train.sh).
NGPU="$NGPU" NNODES="$NNODES" "$PYTHON" -m torchtitan_ext.preflight --job.config_file "$CONFIG_FILE" "$@"

exec "$PYTHON" -m torchtitan_ext.launch --nnodes "$NNODES" --nproc_per_node "$NGPU" \
  --rdzv-backend c10d --rdzv-endpoint "$RDZV_HOST:$RDZV_PORT" --rdzv-id "$RUN_ID" \
  -m torchtitan_ext.train --job.config_file "$CONFIG_FILE" "$@"

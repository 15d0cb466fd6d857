#!/usr/bin/env bash
# One node's part of a multi-node run: torchrun (through torchtitan_ext.launch) with a c10d rendezvous.
# Run it on every node, by hand or from scripts/slurm_train.sbatch (one srun task per node):
#   NNODES=2 NGPU=8 RDZV_HOST=node01 CONFIG_FILE=train_configs/7B.toml scripts/node_train.sh --training.steps 100
# (or --job.config_file train_configs/7B.toml among the arguments, as run_train.sh takes it).
# Under Slurm NNODES, RDZV_HOST and the run id come from SLURM_JOB_NUM_NODES, the first host of
# SLURM_JOB_NODELIST and SLURM_JOB_ID. RDZV_PORT (29500) is the rendezvous port on RDZV_HOST; RUN_ID
# (SLURM_JOB_ID, else "boost") names the rendezvous: every node of one run passes the same.
# SIGTERM/SIGINT stop the run with a checkpoint (README, "Signals").
set -euo pipefail
cd "$(dirname "$0")/.."

NNODES=${NNODES:-${SLURM_JOB_NUM_NODES:?set NNODES (or run under Slurm)}}
NGPU=${NGPU:-8}
source scripts/config_choice.sh "$@"  # CONFIG_ARGS: CONFIG_FILE, or --job.config_file among the arguments
source scripts/python_choice.sh

# The first host of a Slurm node list, what `scontrol show hostnames | head -1` gives: the list's first
# entry (up to a comma outside brackets), each bracket's first value ("gpu[07-09,12],cpu3" -> gpu07,
# "rack[1-2]-node[01-04]" -> rack1-node01).
first_host() {
  local list=$1 host="" in_brackets=0 taking=0 c i
  for ((i = 0; i < ${#list}; i++)); do
    c=${list:i:1}
    if ((in_brackets)); then
      if [[ "$c" == "]" ]]; then in_brackets=0; elif [[ "$c" == "-" || "$c" == "," ]]; then taking=0
      elif ((taking)); then host+=$c; fi
    elif [[ "$c" == "[" ]]; then in_brackets=1 taking=1
    elif [[ "$c" == "," ]]; then break
    else host+=$c; fi
  done
  echo "$host"
}
RDZV_HOST=${RDZV_HOST:-$(first_host "${SLURM_JOB_NODELIST:?set RDZV_HOST (or run under Slurm)}")}
RDZV_PORT=${RDZV_PORT:-29500}
RUN_ID=${RUN_ID:-${SLURM_JOB_ID:-boost}}

# The preflight first, at the whole world size, on every node: a bad job is refused in one line before
# any rendezvous (each rank checks again, as under run_train.sh).
NGPU="$NGPU" NNODES="$NNODES" "$PYTHON" -m torchtitan_ext.preflight "${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}" "$@"

exec "$PYTHON" -m torchtitan_ext.launch --nnodes "$NNODES" --nproc_per_node "$NGPU" \
  --rdzv-backend c10d --rdzv-endpoint "$RDZV_HOST:$RDZV_PORT" --rdzv-id "$RUN_ID" \
  -m torchtitan_ext.train "${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"}" "$@"

# The config run_train.sh and scripts/node_train.sh pass, sourced by both from the repository root with
# the script's arguments: CONFIG_FILE, or an argument --job.config_file X (torchtitan's CLI form); the
# default only where neither is given. Both given: both are passed and the preflight refuses two
# different files (torchtitan would read the first one alone). Sets CONFIG_ARGS.
CONFIG_ARGS=()
config_in_args=0
for arg in "$@"; do
  case "$arg" in --job.config_file|--job.config_file=*|--job.config-file|--job.config-file=*) config_in_args=1 ;; esac
done
if [[ -n "${CONFIG_FILE:-}" || "$config_in_args" == "0" ]]; then
  CONFIG_ARGS=(--job.config_file "${CONFIG_FILE:-./train_configs/debug.toml}")
fi

"""run_train.sh's check, exit 2 on refusal.

python -m torchtitan_ext.preflight --job.config_file X.toml [overrides]
"""

from torchtitan_ext.preflight.check import main

main()

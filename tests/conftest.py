# torchtitan_ext installs its CPU adaptation on import: before any test module imports torchtitan.
import torchtitan_ext  # noqa: F401,I001
import torch

# One intra-op thread in the pytest process: its tests compute on tiny tensors, where a second
# OpenMP thread costs more in synchronisation than it computes, and many times more when the other
# core is busy (a 2-core machine; test_generate.py's sampling: 0.45 s on one thread, 8.9 s on two
# beside other work). Processes the tests start choose their own (run_train.sh's share, a gloo rank 1).
torch.set_num_threads(1)

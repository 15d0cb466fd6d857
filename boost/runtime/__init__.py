"""The few helpers any BOOST process uses, whatever it runs: they import nothing of BOOST.

- ``checkpoint_folder``: DCP step folders: which are checkpoints, which are intact, which to read;
- ``comm_counter``: ``CommCounter``, every collective a rank issues, counted and sized;
- ``memory``: activation memory on CPU (resident memory between forward and backward);
- ``process_exit``: leave a finished gloo process without interpreter finalisation;
- ``torch_names``: the private torch names the library reads, which a torch newer than the range must have;
- ``lazy_exports``: a package's names loaded on first use (``boost``, its model, the preflight);
- ``cli_types``: argparse types the command-line tools share (the planner, the benchmarks).
"""

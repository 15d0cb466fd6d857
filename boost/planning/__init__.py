"""Planning a run before it starts: what a layout costs in step time, memory and communication.

- ``perf_model/``: the analytic step-time model of the three TP schemes (docs/perf_model.md);
- ``layout_planner``: every layout of a flavor on N GPUs, fitted to memory, ranked by step time;
- ``comm_volume``: tensor-parallel communication per layer, in closed form.

It imports the training library's rules and model arguments, never the after-training tools.
"""

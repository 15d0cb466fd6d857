"""Analytic performance model of BOOST's three tensor-parallel schemes (DESIGN §6, §7); docs/perf_model.md.

=====================  ======================================================================
``step_time``          the model: GEMM, attention, elementwise and collective terms per layer,
                       pipeline, optimizer, FSDP → ``predict_step_time``
``hardware``           ``Hardware`` and the machines it knows (``A100``, ``H100``, ``CPU_GLOO``)
``reference_table``    the reference paper's measurements beside the model (``python -m boost.planning.perf_model``)
``fit``                ``fit_a100``: refit A100's efficiencies to that table (by hand)
``cpu_calibration``    ``calibrate_cpu``: measure this machine for ``CPU_GLOO`` (by hand)
``peak_memory``        ``memory_per_gpu``: a layout's peak memory per GPU, calibrated on an H100
``micro_batch_advice`` ``advise_micro_batch``: the largest micro-batch a training TOML fits on a GPU;
                       ``advise_long_sequence``: the smallest CP degree its windows need stretched
=====================  ======================================================================

Example::

    >>> round(predict_step_time("7B", "btp", tp=4, pp=1, hardware="a100", micro_batch=4, seq_len=4096), 2)
    0.76
"""

from boost.planning.perf_model.cpu_calibration import calibrate_cpu
from boost.planning.perf_model.fit import fit_a100
from boost.planning.perf_model.hardware import A100, CPU_GLOO, H100, HARDWARE, Hardware, get_hardware
from boost.planning.perf_model.loro_cost import loro_exact_step_time
from boost.planning.perf_model.micro_batch_advice import (
    LongSequenceAdvice,
    MicroBatchAdvice,
    TrainingLayout,
    advise_long_sequence,
    advise_micro_batch,
)
from boost.planning.perf_model.peak_memory import HEADROOM, memory_per_gpu, usable_bytes
from boost.planning.perf_model.reference_table import (
    PAPER_COMM_7B,
    PAPER_STEP_TIMES,
    forward_comm_per_layer,
    paper_microbatches,
    paper_table,
    print_paper_table,
)
from boost.planning.perf_model.step_time import (
    args_params,
    attention_time,
    block_gemms,
    collective_time,
    gemm_time,
    layer_times,
    model_args,
    predict_step_time,
)

__all__ = [
    "HEADROOM",
    "LongSequenceAdvice",
    "MicroBatchAdvice",
    "TrainingLayout",
    "advise_long_sequence",
    "advise_micro_batch",
    "loro_exact_step_time",
    "memory_per_gpu",
    "usable_bytes",
    "A100",
    "CPU_GLOO",
    "H100",
    "HARDWARE",
    "Hardware",
    "PAPER_COMM_7B",
    "PAPER_STEP_TIMES",
    "args_params",
    "attention_time",
    "block_gemms",
    "calibrate_cpu",
    "collective_time",
    "fit_a100",
    "forward_comm_per_layer",
    "gemm_time",
    "get_hardware",
    "layer_times",
    "model_args",
    "paper_microbatches",
    "paper_table",
    "predict_step_time",
    "print_paper_table",
]

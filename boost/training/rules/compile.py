"""Compilation: whether ``torch.compile`` compiles the model's blocks, and what CUDA graphs over them
(``boost.cudagraphs``) need.

Example::

    >>> compiles_model(True, ["loss"]), compiles_model(True, ["model", "loss"])
    (False, True)
"""

from __future__ import annotations


def compiles_model(enable: bool, components: list[str]) -> bool:
    """Whether ``torch.compile`` compiles the model's blocks: ``compile.enable`` with "model" in
    ``compile.components`` (torchtitan compiles the loss alone otherwise)."""
    return enable and "model" in components


def cudagraphs_problem(
    cudagraphs: bool,
    *,
    compiled: bool,
    backend: str,
    fsdp: str,
    fsdp_wraps: bool,
    pp: int,
    dp_replicate: int,
    microbatches: int,
    cpu_offload: bool,
    optimizer: str,
) -> str | None:
    """What ``boost.cudagraphs`` needs that the job lacks, or ``None`` (also when it is off).

    A CUDA graph replays its kernels on the memory it was recorded with. Parameters must keep their
    addresses: FSDP2 gathers each block's weights into new memory every step, outside the graphs
    (SimpleFSDP gathers inside them). Each replay reuses its outputs' memory: a second micro-batch's
    backward would overwrite the first one's gradients, which gradient accumulation, a pipeline
    schedule or HSDP's replicas' all-reduce still hold.

    Example::

        >>> cudagraphs_problem(True, compiled=True, backend="inductor", fsdp="fully_shard", fsdp_wraps=True,
        ...                    pp=1, dp_replicate=1, microbatches=1, cpu_offload=False, optimizer="AdamW")[:43]
        "FSDP2 gathers each block's weights into new"
    """
    if not cudagraphs:
        return None
    if not compiled or backend != "inductor":
        return (
            'CUDA graphs are inductor\'s, over the compiled blocks: set compile.enable with "model" in '
            'compile.components and compile.backend = "inductor", or boost.cudagraphs = false'
        )
    refused = {
        "parallelism.pipeline_parallel_degree > 1": pp > 1,
        "parallelism.data_parallel_replicate_degree > 1 (HSDP)": dp_replicate > 1,
        f"{microbatches} micro-batches a step (training.global_batch_size over local_batch_size × "
        "the data-parallel degree)": microbatches > 1,
        "training.enable_cpu_offload": cpu_offload,
        'optimizer.name = "LORO"': optimizer == "LORO",
    }
    for what, present in refused.items():
        if present:
            return (
                f"CUDA graphs are not built for {what} here (each replay reuses the memory of the last "
                "one's outputs): set boost.cudagraphs = false"
            )
    if fsdp_wraps and fsdp == "fully_shard":
        return (
            "FSDP2 gathers each block's weights into new memory every step, outside the compiled graphs, "
            'where a CUDA graph replays fixed addresses: set boost.fsdp = "simple_fsdp" (gathers inside '
            "the graphs), or boost.cudagraphs = false"
        )
    return None

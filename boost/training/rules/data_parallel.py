"""Data parallelism: its degree, whether FSDP wraps the model (sharding, replicas, or the precision TP and
PP ask for), FSDP's reshard policy, and what torchtitan's SimpleFSDP (``boost.fsdp = "simple_fsdp"``) needs.

Example::

    >>> data_parallel_degree(16, tp=4, pp=1, cp=1, dp_replicate=1, dp_shard=-1)
    4
"""

from __future__ import annotations

# torchtitan's ``parallelism.fsdp_reshard_after_forward``: whether FSDP frees a block's gathered weights
# after its forward (and gathers them again for its backward). "never" keeps every block's weights
# gathered from forward to backward: one all-gather a block a step instead of two, and half FSDP's
# per-parameter host work, for the stage's weights held at once (``boost.planning.perf_model.peak_memory``).
RESHARD_POLICIES = ("default", "always", "never")


def reshards_after_forward(policy: str, pp_enabled: bool) -> bool:
    """Whether ``policy`` frees the blocks' gathered weights after their forward ("default": not under
    PP, whose schedule runs each stage's forward many times before its backward).

    Example::

        >>> reshards_after_forward("default", pp_enabled=False), reshards_after_forward("never", pp_enabled=False)
        (True, False)
    """
    if policy not in RESHARD_POLICIES:
        raise ValueError(f"fsdp_reshard_after_forward = {policy!r} is not one of {RESHARD_POLICIES}")
    return policy == "always" or (policy == "default" and not pp_enabled)


# ``boost.fsdp``: torch's FSDP2 (``fully_shard``) or torchtitan's SimpleFSDP, traced into compiled blocks
FSDP_IMPLS = ("fully_shard", "simple_fsdp")


def simple_fsdp_problem(
    fsdp: str,
    *,
    fsdp_wraps: bool,
    compiled: bool,
    pp: int,
    dp_replicate: int,
    cpu_offload: bool,
    reshard_policy: str,
    optimizer: str,
) -> str | None:
    """What ``boost.fsdp = "simple_fsdp"`` needs that the job lacks, or ``None`` (also for ``fully_shard``, and
    where FSDP does not wrap the model, ``fsdp_wraps``: nothing is SimpleFSDP's there, one process say).

    Example::

        >>> simple_fsdp_problem("simple_fsdp", fsdp_wraps=True, compiled=False, pp=1, dp_replicate=1,
        ...                     cpu_offload=False, reshard_policy="default", optimizer="AdamW")[:48]
        'SimpleFSDP gathers each weight where it is read:'
    """
    if fsdp != "simple_fsdp" or not fsdp_wraps:
        return None
    if not compiled:
        return (
            "SimpleFSDP gathers each weight where it is read: uncompiled, that is one collective per "
            'weight and read; set compile.enable with "model" in compile.components, or boost.fsdp = "fully_shard"'
        )
    refused = {
        "parallelism.pipeline_parallel_degree > 1": pp > 1,
        "parallelism.data_parallel_replicate_degree > 1 (HSDP)": dp_replicate > 1,
        "training.enable_cpu_offload": cpu_offload,
        'optimizer.name = "LORO"': optimizer == "LORO",
    }
    for what, present in refused.items():
        if present:
            return f'SimpleFSDP is not built for {what} here: use boost.fsdp = "fully_shard"'
    if reshard_policy != "default":
        return (
            f"parallelism.fsdp_reshard_after_forward = {reshard_policy!r} is FSDP2's; SimpleFSDP's compiled "
            'blocks decide what they keep: set it to "default" (--parallelism.fsdp_reshard_after_forward '
            'default), or boost.fsdp = "fully_shard"'
        )
    return None


def fsdp_for_precision(*, tp: int, pp: int, mixed_precision_param: str) -> bool:
    """Whether FSDP must wrap the model at a shard degree of 1 for its mixed-precision policy.

    torchtitan trains TP/PP without FSDP in fp32 whatever ``training.mixed_precision_param`` says
    (``maybe_enable_amp``: autocast is for one device or DDP). FSDP over a group of one casts the
    parameters as it would at any degree and communicates nothing, so the precision asked for holds.

    Example::

        >>> fsdp_for_precision(tp=4, pp=1, mixed_precision_param="bfloat16")
        True
    """
    return (tp > 1 or pp > 1) and mixed_precision_param != "float32"


def fsdp_wraps(
    *, dp_replicate: int, dp_shard: int, cp: int, tp: int, pp: int, mixed_precision_param: str
) -> bool:
    """Whether FSDP wraps the model: data parallelism (dp_replicate, dp_shard or CP above 1), or the mixed
    precision of TP/PP at a shard degree of 1 (``fsdp_for_precision``).

    Replicas are FSDP2's HSDP, mesh ``(dp_replicate, dp_shard × cp)``, at every shard degree, 1 included;
    never torchtitan's DDP (its ``apply_ddp`` where only dp_replicate is above 1). The loss is divided by
    the global token count and FSDP2's gradient division is off, so the replicas' gradients must be
    summed: DDP averages them, 1/dp_replicate of the gradient (pytorch/torchtitan#2323), and is built for
    no TP or PP beside it.

    Example::

        >>> fsdp_wraps(dp_replicate=1, dp_shard=1, cp=1, tp=4, pp=1, mixed_precision_param="float32")
        False
        >>> fsdp_wraps(dp_replicate=2, dp_shard=1, cp=1, tp=1, pp=1, mixed_precision_param="float32")
        True
    """
    return (
        dp_replicate > 1
        or dp_shard > 1
        or cp > 1
        or fsdp_for_precision(tp=tp, pp=pp, mixed_precision_param=mixed_precision_param)
    )


def data_parallel_degree(
    world_size: int, *, tp: int, pp: int, cp: int, dp_replicate: int, dp_shard: int
) -> int:
    """dp_replicate × dp_shard, how many different batches a step reads; ``dp_shard = -1`` takes the
    ranks the other mesh dims leave (torchtitan's ``ParallelDims``)."""
    if dp_shard == -1:
        dp_shard = world_size // (tp * pp * cp * dp_replicate)
    return dp_replicate * dp_shard

"""What a job may do but a user would not expect: each a one-line warning before any work.

A rule of ``job_rules.RULES`` refuses what cannot work; these are jobs that run, and run as asked, but
not as a user reading the TOML would assume. ``job_warnings`` returns each as one line naming the field
and what to set instead; the preflight says them (``BOOST warning: ...``, after every check passed), and
a rank that checks its own job (started by torchrun directly) warns with ``JobWarning``.
"""

from __future__ import annotations

from boost.training.rules import SHARD_LOCAL_NORM_WARNING, norm_is_shard_local, splits_backward

# A step of train_configs/60M.toml's model on a 2-core CPU, bf16 autocast against float32, interleaved
# (bench/results/cpu_bf16.md): without bf16 instructions (torch's AVX2 kernels, most CPUs) bf16 has no
# fast kernels and a step takes 8× as long; with AVX512-BF16 it is no slower. Either way, a CPU run asked
# for bf16 computes in bf16 and is told so.
CPU_BF16_COST = (
    "a train_configs/60M.toml step took 8.0× float32's time with AVX2 kernels, 0.7-0.9× with AVX512-BF16"
)
CPU_BF16_RESULT = "bench/results/cpu_bf16.md"


class JobWarning(UserWarning):
    """A job that runs, and runs as asked, but not as its TOML suggests (``job_warnings``)."""


def loro_keeps_moments_across_exact_steps(job) -> str | None:
    """LORO with moments kept across an exact step: the run parts from the authors' after it.

    The authors' recipes zero every Adam moment right after each exact step (refresh = loro_freq). An
    exact step's SVD fixes the new factors up to the sign of each column pair, and BOOST's signs need
    not be LAPACK's in the authors' code: with the moments zeroed the rest of the run does not see the
    sign, with moments kept it does (a moment of the old basis pushes a flipped column the wrong way).
    Moments survive the exact step at ``loro_freq`` unless ``loro_refresh_freq`` divides ``loro_freq``.
    """
    opt = job.optimizer
    if opt.name != "LORO":
        return None
    every, refresh = opt.loro_freq, opt.loro_refresh_freq
    if (refresh and every % refresh == 0) or every > job.training.steps:
        return None  # a refresh after every exact step, or no exact step in the run
    cadence = "0 never refreshes them" if refresh == 0 else f"{refresh} does not divide loro_freq = {every}"
    return (
        f"optimizer.loro_refresh_freq = {refresh}: the Adam moments outlive LORO's exact steps "
        f"({cadence}), so after step {every} they are moments of the old factor basis; BOOST's new factors "
        "equal the LORO authors' up to column signs, which kept moments do not follow, and the run parts "
        f"from theirs there. Their recipes refresh at every exact step: loro_refresh_freq = {every}"
    )


def bf16_on_a_cpu(job, on_cpu: bool) -> str | None:
    """A job that computes in bf16 on a machine without an accelerator: right for a GPU, slow on a CPU."""
    training = job.training
    fields = [f for f in ("mixed_precision_param", "dtype") if getattr(training, f) == "bfloat16"]
    if not on_cpu or not fields:
        return None
    overrides = " ".join(f"--training.{f} float32" for f in fields)
    return (
        f"training.{fields[0]} = 'bfloat16' on a machine with no GPU: the run computes in bf16 on the CPU, "
        f"where {CPU_BF16_COST} ({CPU_BF16_RESULT}); to compute in float32 pass {overrides}"
    )


def split_backward_recomputes(job) -> str | None:
    """Activation checkpointing under a zero-bubble schedule: the losses are 1F1B's, the compute is not.

    torch's weight-gradient pass (``stage_backward_weight``) asks autograd once per parameter group, and each
    ask recomputes a checkpointed block. Counted on the debug LaX model at pp 2 × tp 2 (4 layers, 4
    micro-batches, low-rank AC): 368 and 704 recomputes a rank over 4 steps under InterleavedZeroBubble, 32
    under 1F1B; the feature matrix's full-AC row took 104 s against 16 s.
    """
    par, ac = job.parallelism, job.boost.activation_checkpoint
    schedule = par.pipeline_parallel_schedule
    if par.pipeline_parallel_degree == 1 or ac == "none" or not splits_backward(schedule):
        return None
    return (
        f"boost.activation_checkpoint = {ac!r} under schedule {schedule}: its weight-gradient pass asks "
        "autograd once per parameter group, and each ask recomputes the checkpointed block (11-22 times a "
        "micro-batch on the debug model, where 1F1B recomputes it once); the losses are the same. Set "
        "boost.activation_checkpoint none, or choose Interleaved1F1B"
    )


def job_warnings(job, world_size: int, on_cpu: bool) -> list[str]:
    """Every warning ``job`` at ``world_size`` earns, one line each; ``on_cpu``: no accelerator here."""
    said = []
    if norm_is_shard_local(job.boost.norm, job.boost.tp_scheme, job.parallelism.tensor_parallel_degree):
        said.append(SHARD_LOCAL_NORM_WARNING)
    for message in (
        loro_keeps_moments_across_exact_steps(job),
        bf16_on_a_cpu(job, on_cpu),
        split_backward_recomputes(job),
    ):
        if message is not None:
            said.append(message)
    return said

"""Fill ``boost.ModelArgs`` from a torchtitan ``JobConfig`` (its ``[boost]``, training and parallelism sections)."""

from __future__ import annotations

from boost.model.args import ModelArgs


def resolved_rank(args: ModelArgs, job_config) -> int:
    boost = job_config.boost
    if boost.rank:
        return boost.rank
    if not 0 < boost.rank_ratio < 1:
        raise ValueError(f"boost.rank_ratio = {boost.rank_ratio} must lie in (0, 1); the paper uses 0.25")
    return max(1, round(boost.rank_ratio * args.dim))


def apply_job_config(args: ModelArgs, job_config) -> None:
    from torchtitan_ext.data import boost_vocab_size

    boost = job_config.boost
    args.linear = boost.linear
    args.group_linears = boost.group_linears
    if boost.linear != "full":
        args.rank = resolved_rank(args, job_config)
    # vanilla TP with grouped linears is refused by validate (config_rules), not silently ungrouped.
    # The RoPE table must cover validation sequences too.
    args.max_seq_len = max(
        job_config.training.seq_len, job_config.validation.seq_len if job_config.validation.enable else 0
    )
    args.vocab_size = boost_vocab_size(job_config)
    args.init_seed = job_config.debug.seed if job_config.debug.seed is not None else 0
    args.check()

"""torchtitan's ``pipeline_llm`` with the loss normalised per token, as the non-pipelined path is.

torchtitan 0.2.2's pipeline schedules back-propagate the *summed* cross-entropy of each microbatch,
while the non-pipelined trainer divides by the step's global token count before backward — so
gradients under PP are ~tokens× too large (grad_norm ~1000 instead of ~1; torchtitan issue #2972)
and gradient clipping then distorts the update. Here each microbatch loss is divided by the step's
global token count inside the schedule, and the recorded losses are multiplied back so that the
trainer's logging (which divides by that count itself) is unchanged.

The count is the local batch's labels (all valid: BOOST's datasets pack without padding) times the
data-parallel degree and the gradient-accumulation steps — the trainer's ``global_valid_tokens``.
"""

from __future__ import annotations

import functools

from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.distributed.pipeline_parallel import pipeline_llm

from boost.layout_rules import splits_into_pipeline_stages


class _PerTokenLoss:
    def __init__(self, loss_fn):
        self.loss_fn = loss_fn
        self.tokens = 1.0

    def __call__(self, pred, labels):
        return self.loss_fn(pred, labels) / self.tokens


def pipeline_boost(model, parallel_dims, job_config, device, model_args, parallelize_fn, loss_fn):
    if not splits_into_pipeline_stages(model_args.linear):  # the preflight refuses it first
        raise ValueError(
            "boost.linear = lax carries latents between blocks and cannot be split into pipeline stages; "
            "use parallelism.pipeline_parallel_degree = 1 or another linear kind"
        )
    per_token = _PerTokenLoss(loss_fn)
    schedule, parts, has_first, has_last = pipeline_llm(
        model, parallel_dims, job_config, device, model_args, parallelize_fn, per_token
    )
    dp = parallel_dims.get_mesh("batch").size() if parallel_dims.dp_enabled else 1
    training = job_config.training
    global_batch = training.global_batch_size if training.global_batch_size > 0 else training.local_batch_size * dp
    accumulation = global_batch // (training.local_batch_size * dp)
    step = schedule.step

    @functools.wraps(step)
    def step_per_token(*args, target=None, losses=None, **kwargs):
        if target is not None:
            local = int((target != IGNORE_INDEX).sum())
            per_token.tokens = float(local * dp * accumulation)
        out = step(*args, target=target, losses=losses, **kwargs)
        if losses is not None:
            losses[:] = [loss * per_token.tokens for loss in losses]
        return out

    schedule.step = step_per_token
    return schedule, parts, has_first, has_last

"""The range and combination rules of a BOOST job: one table, checked in order, rendered into the docs.

Each ``Rule`` names the field it refuses, says in words what must hold (the docs column), and checks
a :class:`JobContext`; a broken rule ends the check with ``<field> = <value>: <what to change>``.
Rules run after the type check (``torchtitan_ext.preflight.config_types``), so they may assume well-typed
values, and in table order, so a rule may assume every rule above it held (the TP-shape rules
assume a known flavor, the batch rules a consistent mesh). The preflight runs them on the job's values
before torchtitan builds its dataclasses, whose ``__post_init__`` checks name no field: the table
restates those checks (``validation.steps``, ``parallelism.context_parallel_load_balancer``) with the
field and the fix.

The table is ``RULES``, its rows kept by section, one module each, in the order they are checked: ``job``
(the model, its kind and switches), ``mesh`` (the degrees and the tensor-parallel shapes), ``pipeline``,
``training`` (the batch, FSDP, the optimizer, LORO) and ``runs`` (checkpoints, metrics, validation,
profiling, communication). ``rule`` holds what a row is.

``python -m torchtitan_ext.preflight.job_rules`` prints the table as it appears in docs/config_errors.md
(a test keeps the two equal).
"""

from __future__ import annotations

import copy
from typing import Any

from boost.training.rules import ATTENTION_TYPES
from torchtitan_ext.preflight.job_rules import job, mesh, pipeline, runs, training
from torchtitan_ext.preflight.job_rules.rule import JobContext, Rule

__all__ = ["RULES", "JobContext", "Rule", "broken_rule", "kernel_bound", "rules_markdown"]

RULES: tuple[Rule, ...] = (*job.ROWS, *mesh.ROWS, *pipeline.ROWS, *training.ROWS, *runs.ROWS)


def broken_rule(job: Any, world_size: int) -> tuple[Rule, Any, str] | None:
    """The first rule of ``RULES`` that ``job`` at ``world_size`` breaks, with the value and message."""
    ctx = JobContext(job, world_size)
    for rule in RULES:
        found = rule.problem(ctx)
        if found is not None:
            return rule, *found
    return None


def kernel_bound(rule: Rule, job: Any, world_size: int) -> bool:
    """Whether ``job`` breaks ``rule`` only with its ``boost.attn_type``: another kernel passes it. The
    refusal is then the kernel's, and a machine that cannot train the kernel at all has the one to say first."""
    if job.boost.attn_type not in ATTENTION_TYPES:
        return False
    for kind in ATTENTION_TYPES:
        other = copy.deepcopy(job)
        other.boost.attn_type = kind
        if rule.problem(JobContext(other, world_size)) is None:
            return True
    return False


def rules_markdown() -> str:
    """``RULES`` as the markdown table in docs/config_errors.md."""
    rows = ["| field | must be |", "|---|---|"]
    rows += [f"| `{rule.field}` | {rule.requirement.replace('|', '/')} |" for rule in RULES]
    return "\n".join(rows) + "\n"

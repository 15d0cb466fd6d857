"""``python -m torchtitan_ext.preflight.job_rules``: the rule table as docs/config_errors.md holds it."""

from torchtitan_ext.preflight.job_rules import rules_markdown

print(rules_markdown(), end="")

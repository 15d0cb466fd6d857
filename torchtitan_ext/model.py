"""BOOST's model as torchtitan's trainer calls it: the calls torchtitan makes that the library has no use for.

torchtitan 0.2.2's trainer takes the flavor's args from the train spec, calls
``update_from_config(job_config)`` and later ``get_nparams_and_flops(model, seq_len)`` on them, and its
validator calls ``model.get_attention_masks(...)`` (all duck-typed: ``BaseModelArgs`` and
``ModelProtocol`` are only type hints there). The library's ``ModelArgs`` and ``Transformer`` know
nothing of job configs; these subclasses add those calls and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from boost.training.model import ModelArgs, Transformer, flops_per_token
from boost.training.rules import KINDS, resolve_rank
from torchtitan_ext.data.tokenizer import boost_vocab_size


@dataclass
class JobModelArgs(ModelArgs):
    """The model a job describes: the flavor's shapes with the ``[boost]`` section and tokenizer applied.

    Example::

        >>> args = JobModelArgs.from_flavor("debug")
        >>> args.update_from_config(job_config)   # kind, rank, vocabulary, sequence length, seed
    """

    def update_from_config(self, job_config, **kwargs) -> None:
        boost = job_config.boost
        self.linear = boost.linear
        self.group_linears = boost.group_linears
        self.only_lr_act = boost.only_lr_act
        self.lax_gate = boost.lax_gate
        if KINDS[boost.linear].low_rank:
            self.rank = resolve_rank(self.dim, boost.rank, boost.rank_ratio)
        # The RoPE table must cover validation sequences too.
        self.max_seq_len = max(
            job_config.training.seq_len, job_config.validation.seq_len if job_config.validation.enable else 0
        )
        self.vocab_size = boost_vocab_size(job_config)
        self.init_seed = job_config.debug.seed if job_config.debug.seed is not None else 0
        self.check()

    def get_nparams_and_flops(self, model: nn.Module, seq_len: int) -> tuple[int, int]:
        return sum(p.numel() for p in model.parameters()), flops_per_token(self, seq_len)


class JobTransformer(Transformer):
    """``boost.Transformer`` with the mask hook torchtitan's validator calls on every model, and the
    ``attention_masks`` keyword its trainer and validator pass to forward (always ``None`` here)."""

    def forward(self, tokens: torch.Tensor, *carried: torch.Tensor, attention_masks: None = None):
        return super().forward(tokens, *carried)

    def get_attention_masks(self, input_batch, tokenizer, extra_inputs=None) -> None:
        # Causal attention only (SDPA's is_causal): there is no mask to build.
        return None

"""BOOST's model as torchtitan's trainer calls it: the calls torchtitan makes that the library has no use for.

torchtitan 0.2.2's trainer takes the flavor's args from the train spec, calls
``update_from_config(job_config)`` and later ``get_nparams_and_flops(model, seq_len)`` on them, and its
trainer (``BoostTrainer.post_dataloading_process``) and validator call ``model.get_attention_masks(...)``
once a batch (all duck-typed: ``BaseModelArgs`` and ``ModelProtocol`` are only type hints there). The
library's ``ModelArgs`` and ``Transformer`` know nothing of job configs; these subclasses add those calls
and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torchtitan.models.attention import create_attention_mask

from boost.training.model import ModelArgs, Transformer, flops_per_token
from boost.training.model.attention import KERNELS
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
        self.lax_gate, self.lax_gate_form = boost.lax_gate, boost.lax_gate_form
        self.attn_type, self.attn_mask_type = boost.attn_type, boost.attn_mask_type
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
    """``boost.Transformer`` with the mask hook torchtitan's trainer and validator call once a batch, and the
    keywords they pass to forward: ``attention_masks``, and ``positions`` under context parallelism."""

    def forward(self, tokens: torch.Tensor, *carried: torch.Tensor, attention_masks=None, positions=None):
        return super().forward(tokens, *carried, attention_masks=attention_masks, positions=positions)

    def get_attention_masks(self, input_batch: torch.Tensor, tokenizer, extra_inputs=None):
        """What the attention kernel takes for ``input_batch`` (``boost.training.model.attention``): ``None``
        for causal SDPA; documents end at the tokenizer's EOS. FlexAttention's block mask is built by
        torchtitan's compiled ``create_block_mask`` (``create_attention_mask``), as its LLaMA builds it."""
        args = self.model_args
        return KERNELS[args.attn_type].masks(
            input_batch, args.attn_mask_type, tokenizer.eos_id, block_mask_fn=create_attention_mask
        )

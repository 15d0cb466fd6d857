"""Attention kernels and masks (boost.training.model.attention): a packed window under block_causal is its
documents computed one at a time, for every attention type that offers the mask and every linear kind."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import and_masks, create_mask

from boost.training.model import ModelArgs, Transformer
from boost.training.model.attention import KERNELS, block_causal_mask, document_ids
from boost.training.rules import ATTENTION_KINDS, LINEAR_KINDS
from torchtitan_ext.infra.attention import kernel_problem

BOS, EOS, VOCAB = 1, 2, 512
# float64 throughout: a document's loss is the same sum computed in another order, so the packed window
# and the documents alone agree to rounding (~1e-14 on these sums); a mask that let one document see
# another moves the loss by more than 1e-2 (asserted too).
TOL = 1e-10
# varlen offers the mask too, but torch's varlen_attn computes in half precision on CUDA alone: its
# document offsets are held to torchtitan's below, and its numerics to nothing on this machine.
MASKED = [t for t, kind in ATTENTION_KINDS.items() if "block_causal" in kind.masks and t != "varlen"]


def packed_window(seq_len: int = 48) -> torch.Tensor:
    """``[1, seq_len + 1]``: documents framed [BOS] ids [EOS] as the datasets frame them, the window cut from
    the stream mid-document at both ends (as the packing cuts it)."""
    g = torch.Generator().manual_seed(0)
    stream = []
    for n in (9, 4, 1, 15, 6, 12, 20):
        stream += [BOS, *torch.randint(3, VOCAB, (n,), generator=g).tolist(), EOS]
    return torch.tensor(stream[5 : 5 + seq_len + 1])[None]


def model(linear: str, attn_type: str) -> Transformer:
    torch.manual_seed(0)
    args = ModelArgs.from_flavor(
        "debug",
        linear=linear,
        vocab_size=VOCAB,
        n_layers=2,
        attn_type=attn_type,
        attn_mask_type="block_causal",
    )
    return Transformer(args)


def loss_sum(m: Transformer, inputs: torch.Tensor, labels: torch.Tensor, mask_type: str) -> torch.Tensor:
    masks = KERNELS[m.model_args.attn_type].masks(inputs, mask_type, EOS)
    return F.cross_entropy(m(inputs, attention_masks=masks).flatten(0, 1), labels.flatten(), reduction="sum")


@pytest.fixture
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the model and its RoPE table (rope_cache) in float64
    yield
    torch.set_default_dtype(previous)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("attn_type", MASKED)
@pytest.mark.parametrize("linear", LINEAR_KINDS)
def test_block_causal_window_is_its_documents_one_at_a_time(linear, attn_type, float64):
    window = packed_window()
    inputs, labels = window[:, :-1], window[:, 1:]
    m = model(linear, attn_type)
    # FlexAttention has no backward on a CPU (torch 2.13): its loss is compared without a gradient there
    trains = kernel_problem(attn_type, inputs.device) is None
    params = [p for p in m.parameters() if p.requires_grad]
    with torch.set_grad_enabled(trains):
        packed = loss_sum(m, inputs, labels, "block_causal")
        doc = document_ids(inputs, EOS)[0]
        alone = []
        for d in doc.unique():
            at = (doc == d).nonzero()[:, 0]
            alone.append(loss_sum(m, inputs[:, at], labels[:, at], "causal"))
        assert len(alone) >= 5  # the window holds several documents, cut at both ends
        assert abs(float(packed.detach()) - float(sum(alone).detach())) <= TOL
        assert abs(float(packed.detach()) - float(loss_sum(m, inputs, labels, "causal").detach())) > 1e-2
    if trains:
        packed_grads = torch.autograd.grad(packed, params)
        alone_grads = torch.autograd.grad(sum(alone), params)
        for got, want in zip(packed_grads, alone_grads, strict=True):
            assert (got - want).abs().max() <= TOL


def test_document_mask_is_torchtitans():
    from torchtitan.models.attention import (
        create_varlen_metadata_for_document,
        get_causal_mask_mod,
        get_document_mask_mod,
    )

    tokens = torch.cat([packed_window(32)[:, :32], packed_window(40)[:, 8:40]])  # two rows, other cuts
    b, s = tokens.shape
    titan = and_masks(get_causal_mask_mod(), get_document_mask_mod(tokens.clone(), EOS))
    assert torch.equal(block_causal_mask(tokens, EOS), create_mask(titan, b, 1, s, s, device="cpu"))
    ours = KERNELS["varlen"].masks(tokens.clone(), "block_causal", EOS)
    theirs = create_varlen_metadata_for_document(tokens.clone(), EOS)
    assert torch.equal(ours.cu_seq_q, theirs.cu_seq_q) and ours.max_q == theirs.max_q
    flex = KERNELS["flex"].masks(tokens, "block_causal", EOS)
    assert torch.equal(create_mask(flex.mask_mod, b, 1, s, s, device="cpu"), block_causal_mask(tokens, EOS))


@pytest.mark.skipif(torch.accelerator.is_available(), reason="the CPU's kernels")
def test_cpu_trains_sdpa_and_refuses_flex_and_varlen_in_one_line():
    assert kernel_problem("sdpa") is None
    for attn_type in ("flex", "varlen"):
        problem = kernel_problem(attn_type)
        assert problem and "\n" not in problem and f"torch {torch.__version__}" in problem
        assert 'use boost.attn_type = "sdpa"' in problem
    from tests.trainer import ROOT
    from torchtitan_ext.preflight import ConfigError, check_job

    argv = ["--job.config_file", str(ROOT / "train_configs" / "debug.toml"), "--boost.attn_type", "flex"]
    argv += ["--boost.no-log-comm"]  # flex's own refusal with the collective counter comes first otherwise
    with pytest.raises(ConfigError, match="boost.attn_type = 'flex': torch .* does not train it on cpu"):
        check_job(argv, 1)


def test_a_kernel_that_runs_on_masks_refuses_none_and_a_window_past_the_table_is_named():
    # varlen without its documents' offsets was an AttributeError deep in the kernel (flex's twin refusal:
    # tests/unit/test_evaluate.py); positions past the RoPE table, a size mismatch inside a layer
    inputs = packed_window()[:, :-1]
    with pytest.raises(ValueError, match="attn_type = 'varlen' needs its documents' offsets"):
        model("cola", "varlen")(inputs)
    short = Transformer(ModelArgs.from_flavor("debug", vocab_size=VOCAB, n_layers=1, max_seq_len=8))
    with pytest.raises(
        ValueError, match=r"48 positions: past the model's max_seq_len = 8 \(its RoPE table\)"
    ):
        short(inputs)


def test_varlen_documents_end_at_each_rows_end_even_without_an_eos():
    # the packing cuts windows mid-document: a row's last document ends with the row, never joining the next
    # row's first (the flattened batch is [b·s]); the offsets are those of torchtitan's per-row reading
    from torchtitan.models.attention import create_varlen_metadata_for_document

    tokens = torch.tensor([[5, EOS, 5, 5], [5, 5, EOS, 5]])
    ours = KERNELS["varlen"].masks(tokens.clone(), "block_causal", EOS)
    assert ours.cu_seq_q.tolist() == [0, 2, 4, 7, 8] and ours.max_q == 3
    theirs = create_varlen_metadata_for_document(tokens.clone(), EOS)
    assert torch.equal(ours.cu_seq_q, theirs.cu_seq_q) and ours.max_q == theirs.max_q

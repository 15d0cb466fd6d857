"""BOOST's ``cola`` kind against the CoLA authors' own modeling code, in float64.

``tests/data/cola_golden.pt`` holds a tiny CoLA model's weights and its logits for both settings of
``only_lr_act``, computed once by ``ColaForCausalLM`` (github alvin-zyl/CoLA; the file's ``meta``
records the commit, the transformers and torch versions and the command, ``tests/data/make_cola_golden.py``).
Here the same weights go into BOOST's model (names mapped, q/k rows from transformers' half-split RoPE
order to BOOST's interleaved pairs) and the logits must agree. Tolerance 1e-6 relative: everything is
float64 except the authors' RoPE tables, which transformers builds in fp32 (seen: ~6e-8).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from boost import ModelArgs, Transformer
from boost.after_training.hf_folder import lowrank_from_hf
from boost.training.model.grouped_state import to_grouped

GOLDEN = Path(__file__).parents[1] / "data" / "cola_golden.pt"


def _boost_args(config: dict, only_lr_act: bool, group_linears: bool) -> ModelArgs:
    return ModelArgs(
        dim=config["hidden_size"],
        n_layers=config["num_hidden_layers"],
        n_heads=config["num_attention_heads"],
        n_kv_heads=config["num_key_value_heads"],
        vocab_size=config["vocab_size"],
        ffn_dim=config["intermediate_size"],
        norm_eps=config["rms_norm_eps"],
        rope_theta=config["rope_theta"],
        max_seq_len=config["max_position_embeddings"],
        linear="cola",
        rank=config["rank"],
        group_linears=group_linears,
        only_lr_act=only_lr_act,
    )


def _as_exported_names(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The authors' ``cola_a [d_in, r]`` / ``cola_b [r, d_out]`` as BOOST's exported ``down``/``up`` (A, B)."""
    out = {}
    for name, w in weights.items():
        if name.endswith(".cola_a"):
            out[name.removesuffix("cola_a") + "down.weight"] = w.t()
        elif name.endswith(".cola_b"):
            out[name.removesuffix("cola_b") + "up.weight"] = w.t()
        else:
            out[name] = w
    return out


@pytest.mark.parametrize("group_linears", [False, True], ids=["ungrouped", "grouped"])
@pytest.mark.parametrize("only_lr_act", [True, False], ids=["only_lr_act", "full_width_silu"])
def test_cola_logits_equal_the_authors_modeling_code(only_lr_act, group_linears):
    golden = torch.load(GOLDEN, weights_only=True)
    config = golden["meta"]["config"]
    args = _boost_args(config, only_lr_act, group_linears)
    sd = lowrank_from_hf(
        _as_exported_names(golden["weights"]), _boost_args(config, only_lr_act, False), str(GOLDEN)
    )
    if group_linears:
        sd = to_grouped(sd, args)
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device="cpu")
    model.init_weights(buffer_device=torch.device("cpu"))  # the RoPE table; the weights come next
    model.load_state_dict({k: v.double() for k, v in sd.items()}, strict=True)
    model.double()
    with torch.no_grad():
        got = model(golden["tokens"])
    want = golden["logits"][only_lr_act]
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6 * want.abs().max().item())
    # the switch matters at this size: the other setting's logits are far off
    other = golden["logits"][not only_lr_act]
    assert (got - other).abs().max() > 1e-3 * other.abs().max()

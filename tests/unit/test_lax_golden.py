"""BOOST's LaX crossing against the LaX authors' own module, in float64, forward and gradients.

``tests/data/lax_golden.pt`` holds, for each gate (tensorized, linear, none), a chain of 4 LaX projections
computed once by the authors' ``TensorizedLinear`` (github K1seki221/Latent_Crossing; the file's ``meta``
records the commit and the command, ``tests/data/make_lax_golden.py``): each projection's output added to
its input, its latent carried to the next, a probe's dot product with the last output as the loss. Here
the same weights go into BOOST's ``Bottleneck`` (A = the authors' ``cores[0]ᵀ``, B = ``cores[1]ᵀ``, their
gate and LayerNorm as the crossing's parameters) and every output, latent and gradient must agree to
float64 rounding.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from boost.training.model.latent_crossing import LatentCrossing
from boost.training.model.linears import Bottleneck

GOLDEN = Path(__file__).parents[1] / "data" / "lax_golden.pt"
TOL = 1e-12  # float64 rounding over a chain of four (seen: ≤ 4e-15)

# the authors' parameter -> BOOST's (its shape with the member dim in front)
AUTHORS = {
    "Inter_resgate.0": "latent.gate_encoder",
    "Inter_resgate.1": "latent.gate_decoder",
    "Inter_resgate.weight": "latent.gate_weight",
    "Inter_resgate.bias": "latent.gate_bias",
    "res_layernorm.weight": "latent.norm_weight",
    "res_layernorm.bias": "latent.norm_bias",
}


def _boost_chain(golden: dict, gate: str, form: str = "factored") -> list[Bottleneck]:
    blocks = []
    for layer, params in enumerate(golden["params"]):
        d_in, rank = params["cores.0"].shape
        d_out = params["cores.1"].shape[1]
        block = Bottleneck(
            d_in,
            [("p", rank, d_out)],
            "silu",
            lax_gate=gate if layer else None,
            returns_latent=True,
            lax_gate_form=form,
        )
        state = {"down.weight": params["cores.0"].t(), "up.0.weight": params["cores.1"].t()}
        state.update({AUTHORS[k]: v.unsqueeze(0) for k, v in params.items() if k in AUTHORS})
        block.double().load_state_dict(state)
        blocks.append(block)
    return blocks


def _boost_grad(block: Bottleneck, authors_name: str) -> torch.Tensor:
    if authors_name == "cores.0":
        return block.down.weight.grad.t()
    if authors_name == "cores.1":
        return block.up[0].weight.grad.t()
    return block.get_parameter(AUTHORS[authors_name]).grad.squeeze(0)


@pytest.mark.parametrize(
    "gate,form",
    [("tensorized", "factored"), ("tensorized", "kron"), ("linear", "factored"), ("none", "factored")],
)
def test_lax_equals_the_authors_module_forward_and_backward(gate, form):
    """Either form of the tensorized gate (``boost.lax_gate_form``): the authors' two contractions, or one
    ``[r, r]`` GEMM by ``kron(D, E)``."""
    golden = torch.load(GOLDEN, weights_only=True)["gates"][gate]
    blocks = _boost_chain(golden, gate, form)
    assert isinstance(blocks[1].latent, LatentCrossing) and blocks[1].latent.gate == gate
    assert blocks[1].latent.form == form
    x0 = golden["x0"].clone().requires_grad_(True)
    x, carry = x0, None
    for layer, block in enumerate(blocks):
        y, carry = block(x, carry)
        torch.testing.assert_close(y, golden["outputs"][layer], rtol=TOL, atol=TOL)
        torch.testing.assert_close(carry, golden["latents"][layer], rtol=TOL, atol=TOL)
        x = x + y
    (x * golden["probe"]).sum().backward()
    torch.testing.assert_close(x0.grad, golden["grad_x0"], rtol=TOL, atol=TOL)
    for layer, (block, grads) in enumerate(zip(blocks, golden["grads"], strict=True)):
        # every parameter of the authors' module has its gradient compared, and so has every one of BOOST's
        assert set(grads) == set(golden["params"][layer]), (layer, sorted(grads))
        assert len(list(block.parameters())) == len(grads), (layer, [n for n, _ in block.named_parameters()])
        for name, want in grads.items():
            torch.testing.assert_close(_boost_grad(block, name), want, rtol=TOL, atol=TOL, msg=name)


def test_the_golden_chain_crosses():
    """The golden numbers would not tell the crossing from plain CoLA if the carry did nothing: with the
    carries dropped, the chain's outputs move far beyond the tolerance from block 1 on."""
    golden = torch.load(GOLDEN, weights_only=True)["gates"]["tensorized"]
    blocks = _boost_chain(golden, "tensorized")
    x = golden["x0"]
    with torch.no_grad():
        y0, first = blocks[0](x)
        crossed, _ = blocks[1](x + y0, first)
        uncrossed, _ = blocks[1](x + y0, torch.zeros_like(first))
    assert (crossed - uncrossed).abs().max() > 1e3 * TOL

"""``bench.lax_gate`` on this CPU: it times every bottleneck of a block for CoLA's σ and LaX's crossing in each
gate form, sums them as a step does, and refuses forms that compute different functions."""

from __future__ import annotations

import json

import pytest
import torch

from bench import lax_gate
from boost.training.rules import LAX_GATE_FORMS


def test_a_step_is_block_0s_sigma_and_every_other_blocks_crossing(tmp_path):
    out = tmp_path / "gate.json"
    (result,) = lax_gate.main(
        ["--device", "cpu", "--flavor", "debug", "--tokens", "64", "--dtype", "float32", "--backend", "eager",
         "--warmup", "1", "--repeats", "2", "--json", str(out)]
    )  # fmt: skip
    assert json.loads(out.read_text()) == [result]
    names = [lax_gate.COLA, *(f"LaX {form}" for form in LAX_GATE_FORMS)]
    assert list(result["bottleneck_ms"]) == [name for name, _ in lax_gate.BOTTLENECKS]
    for times in result["bottleneck_ms"].values():
        assert list(times) == names and all(t > 0 for t in times.values())
    for name in names:
        block = sum(times[name] for times in result["bottleneck_ms"].values())
        assert result["block_ms"][name] == pytest.approx(block)
        want = result["block_ms"][lax_gate.COLA] + (result["layers"] - 1) * block
        assert result["step_ms"][name] == pytest.approx(want)
    assert result["lax_extra_step_ms"].keys() == set(names[1:])
    assert "| LaX's extra a step |" in lax_gate.table(result)


def test_forms_that_compute_different_functions_are_refused_before_timing():
    modules = lax_gate.variants(members=2, rank=16)
    pre, carry, grad = (torch.randn(8, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
    pre.requires_grad_()
    carry.requires_grad_()
    lax_gate.check_forms_agree(modules, pre, carry, grad)  # the same function
    with torch.no_grad():
        modules["LaX kron"].gate_encoder.mul_(1.01)  # another gate
    with pytest.raises(AssertionError, match="the gate forms disagree"):
        lax_gate.check_forms_agree(modules, pre, carry, grad)

"""``bench.lax_gate`` on this CPU: it times every bottleneck of a block for CoLA's σ and LaX's crossing in each
gate form, sums them as a step does, and refuses forms that compute different functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench import lax_gate
from boost.training.rules import LAX_GATE_FORMS

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.skipif(
    torch.accelerator.is_available(), reason="the refusal of a machine without an accelerator"
)
def test_the_readmes_command_without_a_gpu_is_refused_in_one_line_naming_the_cpu_device():
    # it stopped in a traceback (AssertionError: Torch not compiled with CUDA enabled) at the first tensor;
    # SystemExit with a message: Python prints it, one line, and exits 1
    with pytest.raises(SystemExit) as exit_:
        lax_gate.main(["--flavor", "7B", "--tokens", "16384", "4096"])
    (line,) = str(exit_.value.code).splitlines()
    assert line.startswith("bench.lax_gate: --device cuda: torch ") and "pass --device cpu" in line


def test_each_repetition_runs_every_variant_in_turn():
    # the variants were timed one after another (all of σ's repetitions, then all of kron's, ...): a burst of
    # load fell on one variant, and LaX's "extra" came out negative
    order = lax_gate.schedule(["a", "b", "c"], warmup=1, repeats=2)
    assert [name for name, _ in order] == ["a", "b", "c"] * 3
    assert [timed for _, timed in order] == [False] * 3 + [True] * 6


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--flavor", "nope"], "argument --flavor: invalid choice: 'nope' (choose from 'debug',"),
        (["--repeats", "0"], "argument --repeats: 0 is not a positive integer"),
        (["--tokens", "0"], "argument --tokens: 0 is not a positive integer"),
    ],
)
def test_values_that_time_nothing_are_refused_in_one_line(capsys, argv, message):
    # --flavor nope ended in a KeyError traceback, --repeats 0 in statistics.StatisticsError
    with pytest.raises(SystemExit) as exit_:
        lax_gate.main(["--device", "cpu", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err

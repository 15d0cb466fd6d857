"""Every example in the library's docstrings runs and prints what it says (``doctest``).

Left out, by name: the examples that need a process group (a ``DeviceMesh`` of 2 or 4 ranks, under
``torchrun``; the multi-process tests run the same calls) or a trained run's folder (the
after-training tests train one and run the same calls).
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDS_A_PROCESS_GROUP = {
    "boost.runtime.comm_counter",
    "boost.training.parallel.activation_checkpoint.apply_lowrank_ac",
    "boost.training.parallel.bottleneck_style.BoostParallelStyle",
    "boost.training.parallel.tp_plans.apply_tp",
    "boost.runtime.process_exit",
}
NEEDS_A_TRAINED_RUN = {"boost.after_training.interop.write.save_hf", "boost.after_training.trained_run"}
LEFT_OUT = NEEDS_A_PROCESS_GROUP | NEEDS_A_TRAINED_RUN
# Optional dependencies and remote code of an exported folder: no examples to run here.
NOT_IMPORTED = ("boost.after_training.hf.", "boost.after_training.lm_eval_local")


def _modules() -> list[str]:
    names = (
        ".".join(p.relative_to(ROOT).with_suffix("").parts) for p in sorted((ROOT / "boost").rglob("*.py"))
    )
    return [
        n.removesuffix(".__init__")
        for n in names
        if not n.endswith("__main__") and not n.startswith(NOT_IMPORTED)
    ]


def _examples() -> list[doctest.DocTest]:
    found = []
    for name in _modules():
        for test in doctest.DocTestFinder().find(importlib.import_module(name)):
            if test.examples and test.name not in LEFT_OUT and test.name not in {t.name for t in found}:
                found.append(test)
    return found


EXAMPLES = _examples()


@pytest.mark.parametrize("test", EXAMPLES, ids=[t.name for t in EXAMPLES])
def test_docstring_example(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    result = runner.run(test, out=lambda text: pytest.fail(text, pytrace=False))
    assert result.failed == 0


def test_the_skipped_examples_exist():
    names = {
        t.name for name in _modules() for t in doctest.DocTestFinder().find(importlib.import_module(name))
    }
    assert LEFT_OUT <= names  # a renamed function must take its entry along

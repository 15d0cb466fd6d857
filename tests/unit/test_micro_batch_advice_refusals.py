"""The micro-batch advice's refusals of a TOML it cannot model, each naming the file, the section and key:
a key left unset or set to what the memory model has no formula for is refused, never defaulted to a guess
that would advise a micro-batch the GPU cannot hold. (The advice itself: test_micro_batch_advice.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from boost.planning.perf_model import advise_micro_batch

GIB = 2**30
# the keys the planner needs and nothing else: each test changes one
SECTIONS = {
    "model": {"flavor": '"7B"'},
    "training": {"seq_len": "4096", "local_batch_size": "4"},
    "parallelism": {"tensor_parallel_degree": "4"},
}


def _toml(tmp_path: Path, section: str, key: str, value: str | None) -> Path:
    """``SECTIONS`` as a TOML file, with ``[section] key`` set to ``value`` (``None``: left out)."""
    sections = {name: dict(keys) for name, keys in SECTIONS.items()}
    sections.setdefault(section, {})[key] = value
    path = tmp_path / "layout.toml"
    path.write_text(
        "".join(
            f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None)
            for name, keys in sections.items()
        )
    )
    return path


def test_the_base_layout_is_advised(tmp_path):
    # the refusals below are each one change away from a TOML the planner reads
    path = _toml(tmp_path, "model", "flavor", '"7B"')
    assert advise_micro_batch(path, 16, 80 * GIB).micro_batch >= 1


@pytest.mark.parametrize(("section", "key"), [("model", "flavor"), ("training", "seq_len")])
def test_a_key_the_memory_model_needs_is_refused_when_unset(tmp_path, section, key):
    path = _toml(tmp_path, section, key, None)
    with pytest.raises(
        ValueError,
        match=re.escape(f"{path}: [{section}] {key} is not set; the planner reads it from the TOML"),
    ):
        advise_micro_batch(path, 16, 80 * GIB)


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("model", "flavor", '"5B"', "[model] flavor = '5B' is not one of ['130M', "),
        (
            "training",
            "mixed_precision_param",
            '"float8"',
            "[training] mixed_precision_param = 'float8' is not one of ['bfloat16', 'float16', 'float32']",
        ),
        (
            "parallelism",
            "fsdp_reshard_after_forward",
            '"sometimes"',
            "[parallelism] fsdp_reshard_after_forward = 'sometimes' is not one of ('default', 'always', 'never')",
        ),
    ],
    ids=["flavor", "mixed_precision_param", "fsdp_reshard_after_forward"],
)
def test_a_value_the_memory_model_has_no_formula_for_is_refused(tmp_path, section, key, value, message):
    path = _toml(tmp_path, section, key, value)
    with pytest.raises(ValueError, match=re.escape(f"{path}: {message}")):
        advise_micro_batch(path, 16, 80 * GIB)


def test_parallel_degrees_that_do_not_multiply_to_the_gpus_are_refused(tmp_path):
    # tp 4 × dp_shard 2 is 8 GPUs: on 16 the other 8 would hold no rank of the layout the peak is for
    path = _toml(tmp_path, "parallelism", "data_parallel_shard_degree", "2")
    with pytest.raises(
        ValueError, match=re.escape(f"{path}: its parallel degrees do not multiply to 16 GPUs")
    ):
        advise_micro_batch(path, 16, 80 * GIB)

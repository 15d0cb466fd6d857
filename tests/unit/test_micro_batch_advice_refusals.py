"""The micro-batch advice's refusals of a TOML it cannot model, each naming the file, the section and key:
a key left unset or set to what the memory model has no formula for is refused, never defaulted to a guess
that would advise a micro-batch the GPU cannot hold. (The advice itself: test_micro_batch_advice.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from boost.planning.layout_planner import main as plan_main
from boost.planning.perf_model import advise_long_sequence, advise_micro_batch
from boost.planning.perf_model.micro_batch_advice import LARGEST_MICRO_BATCH

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


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("boost", "linear", '"colaa"', "[boost] linear = 'colaa' is unknown; choose one of ('full', "),
        ("boost", "tp_scheme", '"btpp"', "[boost] tp_scheme = 'btpp' is unknown; choose one of ('btp', "),
        ("boost", "attn_type", '"sdpaa"', "[boost] attn_type = 'sdpaa' is unknown; choose one of ('sdpa', "),
        (
            "boost",
            "activation_checkpoint",
            '"selective"',
            "[boost] activation_checkpoint = 'selective' is unknown",
        ),
        ("training", "seq_len", '"4096"', "[training] seq_len = '4096': must be a whole number ≥ 2"),
        ("training", "seq_len", "1", "[training] seq_len = 1: must be a whole number ≥ 2"),
        (
            "parallelism",
            "tensor_parallel_degree",
            "3",
            "[parallelism] tensor_parallel_degree = 3: must divide n_heads",
        ),
        ("boost", "sequence_parallel", '"yes"', "[boost] sequence_parallel = 'yes': must be true or false"),
        (
            "boost",
            "lax_gate",
            '"kron"',
            "[boost] lax_gate = 'kron' is unknown; choose one of ('tensorized', ",
        ),
        ("boost", "lax_gate_form", '"fused"', "[boost] lax_gate_form = 'fused': choose one of ('factored', "),
        ("boost", "group_linears", '"no"', "[boost] group_linears = 'no': must be true or false"),
    ],
    ids=[
        "linear",
        "tp_scheme",
        "attn_type",
        "ac",
        "seq_len-string",
        "seq_len-1",
        "tp-3",
        "sequence_parallel",
        "lax_gate",
        "lax_gate_form",
        "group_linears",
    ],
)
@pytest.mark.parametrize("seq_len", [None, 32768], ids=["micro-batch", "long-windows"])
def test_a_value_the_preflight_refuses_is_refused_up_front_naming_it(
    tmp_path, capsys, section, key, value, message, seq_len
):
    """The TOML's values go through the preflight's rules (``boost.training.rules``) before any peak is taken:
    one line naming the key, from the CLI as from the library (a KeyError, a TypeError or an answer before)."""
    path = _toml(tmp_path, section, key, value)
    long_windows = [] if seq_len is None else ["--seq-len", str(seq_len)]
    assert plan_main(["--config", str(path), "--gpus", "16", *long_windows]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: {message}" + err.split(message, 1)[1] and err.count("\n") == 1


def test_long_window_advice_keeps_the_preflights_context_parallel_rules(tmp_path):
    """The degrees tried are the preflight's: under sequence parallelism the window splits into 2·cp·tp, varlen
    has no CP path; and a seq_len below 2 or a GPU count the layout does not divide is refused."""
    from torchtitan_ext.preflight.check import check_values
    from torchtitan_ext.preflight.read import read_job

    seven_b = Path("train_configs/7B.toml").read_text()
    sp = tmp_path / "sp.toml"
    sp.write_text(seven_b.replace("[boost]\n", "[boost]\nsequence_parallel = true\n"))
    varlen = tmp_path / "varlen.toml"
    varlen.write_text(
        seven_b.replace("[boost]\n", '[boost]\nattn_type = "varlen"\nattn_mask_type = "block_causal"\n')
    )
    for toml, seq_len in ((sp, 32776), (sp, 32768), (varlen, 32768)):
        advice = advise_long_sequence(toml, 16, 80 * GIB, seq_len)
        # the rules (check_job would also refuse varlen's kernel on this CPU)
        check_values(read_job(["--job.config_file", str(toml), *advice.overrides().split()]), 16)
    assert advise_long_sequence(varlen, 16, 80 * GIB, 32768).layout.cp == 1
    with pytest.raises(ValueError, match="seq_len must be at least 2"):
        advise_long_sequence(sp, 16, 80 * GIB, 1)
    with pytest.raises(
        ValueError, match=re.escape("needs a multiple of tp × pp × dp_replicate = 4 GPUs, not 2")
    ):
        advise_long_sequence("train_configs/7B.toml", 2, 80 * GIB, 32768)


def test_the_dense_model_at_tp_1_is_advised_whatever_the_scheme(tmp_path):
    # the trainer runs no TP plan at one rank: the default tp_scheme "btp" beside linear "full" passes the preflight
    path = _toml(tmp_path, "parallelism", "tensor_parallel_degree", "1")
    path.write_text(path.read_text() + '[boost]\nlinear = "full"\n')
    advice = advise_micro_batch(path, 8, 80 * GIB)
    assert advice.micro_batch >= 1 and advice.layout.scheme == "megatron"


def test_the_search_says_where_it_stops_when_every_micro_batch_fits(capsys):
    assert plan_main(["--config", "train_configs/debug.toml", "--gpus", "1", "--memory-gib", "1000000"]) == 0
    out = capsys.readouterr().out
    assert f"micro-batch {LARGEST_MICRO_BATCH} (largest that fits)" in out
    assert f"micro-batch {LARGEST_MICRO_BATCH + 1} and above: not tried (the search stops at" in out
    assert ", over" not in out

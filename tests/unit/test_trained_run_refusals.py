"""``trained_run``'s refusals of a TOML and a checkpoint that do not belong together, on hand-made DCP
checkpoints of the debug flavor (untrained, ``dcp.save`` without a process group): each names the source
and says which file to pass, where loading would otherwise fail inside DCP or build the wrong model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from boost.after_training.trained_run import find_checkpoint, load_checkpoint_model
from boost.training.data.run_tokenizer import RunError
from boost.training.model import ModelArgs, Transformer

# dcp.save without a process group says it saves in one process: that is the intent here
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

VOCAB = 64  # a small embedding: the checks read shapes, never a tokenizer


def _state(linear: str = "cola", **overrides) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    args = ModelArgs.from_flavor("debug", linear=linear, vocab_size=VOCAB, max_seq_len=16, **overrides)
    return Transformer(args).state_dict()


def _save(folder: Path, state: dict[str, torch.Tensor]) -> Path:
    dcp.save(state, checkpoint_id=folder, no_dist=True)
    return folder


def _config(flavor: str = "debug", linear: str = "cola") -> dict:
    return {"model": {"flavor": flavor}, "boost": {"linear": linear}, "training": {"seq_len": 16}}


def test_no_checkpoint_under_the_run_folder_says_train_first(tmp_path):
    config = {"job": {"dump_folder": str(tmp_path)}}
    with pytest.raises(
        RunError,
        match=re.escape(
            f"no checkpoint under {tmp_path / 'checkpoint'}; train first (./run_train.sh) "
            "or pass a step-N folder or a step number as --checkpoint"
        ),
    ):
        find_checkpoint(config)
    (tmp_path / "checkpoint" / "step-5").mkdir(parents=True)  # a save that did not finish
    with pytest.raises(
        RunError,
        match=re.escape("(1 corrupt: no .metadata (the save did not finish)); train first (./run_train.sh)"),
    ):
        find_checkpoint(config)
    # one a newer torch wrote, whose .metadata this torch cannot read, is no damage
    step = _save(tmp_path / "checkpoint" / "step-5", {"w": torch.zeros(4)})
    (step / "boost_model.json").write_text('{"torch_version": "99.0.0", "model": {}}')
    (step / ".metadata").write_bytes((step / ".metadata").read_bytes()[:40])
    with pytest.raises(
        RunError, match=re.escape("(1 skipped: written by a newer torch (99.0.0) than this one")
    ):
        find_checkpoint(config)


def _evaluate(argv: list[str]) -> int:
    from boost.after_training.evaluate import main

    return main(argv)


def _generate(argv: list[str]) -> int:
    from boost.after_training.generate import main

    return main(argv)


def _export(argv: list[str]) -> int:
    from boost.after_training.interop.cli import main

    return main(["export", *argv])


@pytest.mark.parametrize("cli", [_evaluate, _generate, _export])
def test_each_cli_names_its_own_way_to_pass_a_checkpoint(cli, tmp_path, capsys):
    """A run without a checkpoint: the refusal's fix is one the refusing CLI parses (export takes the step as its
    positional SOURCE, not evaluate's --checkpoint), and what it passes reaches the checkpoint lookup."""
    toml = tmp_path / "run.toml"
    toml.write_text(f'[job]\ndump_folder = "{tmp_path}"\n[model]\nflavor = "debug"\n')
    (tmp_path / "notes.txt").write_text("hello world\n" * 300)  # more than one window of seq_len 2048
    argv = {_evaluate: ["--data", str(tmp_path / "notes.txt")], _export: ["--out", str(tmp_path / "out")]}
    argv = ["--config", str(toml), *argv.get(cli, [])]
    assert cli(argv) == 2
    (message,) = capsys.readouterr().err.splitlines()
    fix = re.search(r"or pass a step-N folder or a step number as (\S+)$", message)
    assert message.startswith("error: no checkpoint under") and fix, message
    arg = fix.group(1)
    # the fix, followed: parsed (no usage error, SystemExit) and taken for the checkpoint to read
    assert cli([*argv, *([arg] if arg.startswith("--") else []), "step-9"]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: {arg} step-9: {tmp_path / 'checkpoint' / 'step-9'} is not"
    )


def test_a_step_is_named_by_number_or_folder_name_and_a_newer_corrupt_one_is_reported(tmp_path, caplog):
    config = {"job": {"dump_folder": str(tmp_path)}}
    intact = _save(tmp_path / "checkpoint" / "step-3", _state())
    (tmp_path / "checkpoint" / "step-5").mkdir()  # a save that did not finish
    with caplog.at_level("WARNING", logger="boost.after_training.trained_run"):
        assert find_checkpoint(config) == intact
    assert "step-5 skipped: no .metadata (the save did not finish)" in caplog.text
    # by number, by the step folder's name (under the run's checkpoint folder, not the working one)
    assert find_checkpoint(config, 3) == find_checkpoint(config, "step-3") == intact
    assert find_checkpoint(config, str(intact)) == intact


def test_a_checkpoint_without_token_embeddings_is_not_taken_for_a_model(tmp_path):
    path = _save(tmp_path / "step-1", {"w": torch.zeros(4)})
    with pytest.raises(
        RunError,
        match=re.escape("the checkpoint holds no tok_embeddings.weight: it is not a BOOST model checkpoint"),
    ):
        load_checkpoint_model(path, _config(), "run.toml")


def test_a_dense_checkpoint_under_a_low_rank_toml_is_refused(tmp_path):
    # the kind is the TOML's alone (the shapes do not say cola from lax): a wrong one must not load
    path = _save(tmp_path / "step-1", _state("full"))
    with pytest.raises(
        RunError,
        match=re.escape(
            "run.toml: boost.linear = 'cola' but the checkpoint holds a dense model; "
            "pass the TOML this run was trained with"
        ),
    ):
        load_checkpoint_model(path, _config(linear="cola"), "run.toml")


@pytest.mark.parametrize(
    ("saved_layers", "flavor", "message"),
    [
        (2, "debug", "flavor 'debug' has dim 256 and 4 layers, the checkpoint dim 256 and 2 layers"),
        (4, "60M", "flavor '60M' has dim 512 and 8 layers, the checkpoint dim 256 and 4 layers"),
    ],
    ids=["fewer-layers", "another-dim"],
)
def test_a_checkpoint_of_another_flavor_is_refused_with_both_shapes(tmp_path, saved_layers, flavor, message):
    path = _save(tmp_path / "step-1", _state(n_layers=saved_layers))
    with pytest.raises(
        RunError, match=re.escape(f"run.toml: {message}; pass the TOML this run was trained with")
    ):
        load_checkpoint_model(path, _config(flavor), "run.toml")


def test_a_checkpoint_missing_a_model_tensor_is_refused_before_dcp_reads_it(tmp_path):
    state = _state()
    del state["norm.weight"]
    path = _save(tmp_path / "step-1", state)
    with pytest.raises(
        RunError,
        match=re.escape(
            f"{path}: the checkpoint lacks 1 model tensor(s) the config implies, e.g. ['norm.weight']"
        ),
    ):
        load_checkpoint_model(path, _config(), "run.toml")


def test_a_checkpoint_tensor_of_another_shape_is_refused_naming_both_shapes(tmp_path):
    state = _state()
    state["norm.weight"] = torch.ones(128)
    path = _save(tmp_path / "step-1", state)
    with pytest.raises(
        RunError,
        match=re.escape(f"{path}: tensor norm.weight has shape (128,), the config implies (256,)"),
    ):
        load_checkpoint_model(path, _config(), "run.toml")


def test_a_checkpoint_holding_model_tensors_the_config_does_not_build_is_refused(tmp_path):
    # a LaX checkpoint with no model record, read with a TOML whose gate is "none": its gates would be
    # dropped unread, another model scored without a word
    state = _state("lax")
    state["optimizer.state.layers.0.attention.q.A.exp_avg"] = torch.zeros(1)  # not the model's: ignored
    path = _save(tmp_path / "step-1", state)
    config = _config(linear="lax")
    config["boost"]["lax_gate"] = "none"
    with pytest.raises(RunError, match=re.escape(f"{path}: the checkpoint holds ")) as refused:
        load_checkpoint_model(path, config, "run.toml")
    assert "latent.gate_" in str(refused.value) and "optimizer" not in str(refused.value)
    config["boost"]["lax_gate"] = "tensorized"
    load_checkpoint_model(path, config, "run.toml")


@pytest.mark.parametrize(
    ("section", "field", "value", "kind"),
    [
        ("training", "seq_len", "64", "int"),
        ("boost", "only_lr_act", "false", "bool"),
        ("boost", "rank", True, "int"),
    ],
)
def test_a_toml_value_of_another_type_is_refused_naming_the_field(tmp_path, section, field, value, kind):
    path = _save(tmp_path / "step-1", _state())
    config = _config()
    config[section][field] = value
    with pytest.raises(RunError, match=re.escape(f"run.toml: {section}.{field} = {value!r} is not a {kind}")):
        load_checkpoint_model(path, config, "run.toml")


def test_a_run_or_checkpoint_folder_given_as_the_checkpoint_names_its_steps(tmp_path):
    # not "no .metadata (the save did not finish)": the folder is one level above the checkpoints
    config = {"job": {"dump_folder": str(tmp_path)}}
    _save(tmp_path / "checkpoint" / "step-3", _state())
    _save(tmp_path / "checkpoint" / "step-12", _state())
    for given in (tmp_path, tmp_path / "checkpoint"):
        with pytest.raises(RunError, match=re.escape("holds step folders under")) as e:
            find_checkpoint(config, str(given))
        assert "(step-3, step-12); pass one of them or a step number" in str(e.value)
        assert "did not finish" not in str(e.value)


@pytest.mark.parametrize("given", ["", " ", "²", "٣"])
def test_an_empty_or_non_ascii_digit_checkpoint_is_refused_naming_the_argument(tmp_path, given, monkeypatch):
    # '' read the working folder; '²'.isdigit() is True and int('²') raised an unnamed ValueError
    monkeypatch.chdir(tmp_path)
    config = {"job": {"dump_folder": str(tmp_path)}}
    _save(tmp_path / "checkpoint" / "step-2", _state())
    expected = (
        r"^--checkpoint is empty" if not given.strip() else rf"^--checkpoint {given}: {given} is not a folder"
    )
    with pytest.raises(RunError, match=expected):
        find_checkpoint(config, given)


@pytest.mark.parametrize("cli", [_evaluate, _generate, _export])
def test_a_misspelt_run_override_is_refused_not_read_over_another_run(cli, tmp_path, capsys):
    """A typo in an override of a field the tools read (``--job.dump-foldr``) read the TOML's run folder, and
    scored another run's checkpoint; a ``[boost]`` field BOOST lacks was dropped unsaid. Both are refused
    naming the field meant; a field no tool reads (``--training.steps``) still passes, so that a run is read
    back with the overrides it was started with."""
    trained = tmp_path / "trained"
    _save(trained / "checkpoint" / "step-2", _state())
    toml = tmp_path / "run.toml"
    toml.write_text(f'[job]\ndump_folder = "{trained}"\n[model]\nflavor = "debug"\n')
    (tmp_path / "notes.txt").write_text("hello world\n")
    argv = {_evaluate: ["--data", str(tmp_path / "notes.txt")], _export: ["--out", str(tmp_path / "out")]}
    argv = ["--config", str(toml), *argv.get(cli, [])]
    for typo, message in (
        (["--job.dump-foldr", str(tmp_path / "other")], "--job.dump_foldr: "),
        (["--boost.linaer", "svd"], "--boost.linaer: BOOST has no such option; did you mean --boost.linear?"),
    ):
        assert cli([*argv, *typo]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: {message}"), line
    assert "did you mean --job.dump_folder?" in _refusal_of(["--job.dump-foldr", "x"], toml)
    assert _refusal_of([], tmp_path).startswith(f"--config {tmp_path} is a folder; pass the TOML")
    # a field no tool reads, as the run was started with it, passes
    from boost.after_training.job_defaults import read_run_config

    assert read_run_config(toml, ["--training.steps", "20"])["training"] == {"steps": 20}


def _refusal_of(overrides: list[str], toml: Path) -> str:
    from boost.after_training.job_defaults import read_run_config

    with pytest.raises(RunError) as refused:
        read_run_config(toml, overrides)
    return str(refused.value)

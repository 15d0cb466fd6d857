"""What ``trained_run`` reads where a checkpoint's shapes do not say it: LaX's gate and the MLP's activation
from the checkpoint's record of its model (``boost_model.json``), else from the TOML over the trainer's own
defaults; the attention mask from the TOML, which ``evaluate`` scores with as the run attended.

Hand-made DCP checkpoints of the debug flavor (``dcp.save`` without a process group), as in
``test_trained_run_refusals.py``."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from boost.after_training.evaluate import packed_windows, score
from boost.after_training.trained_run import inference_norm, load_checkpoint_model, model_args_from_run
from boost.runtime.checkpoint_folder import MODEL_IDENTITY_FILE
from boost.training.data.run_tokenizer import RunError
from boost.training.model import ModelArgs, Transformer
from boost.training.model.attention import block_causal_mask
from boost.training.options import BoostOptions

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

VOCAB = 64


def _trained(folder: Path, **fields) -> Transformer:
    """A debug-flavor model with ``fields``, saved as a ``step-1`` checkpoint in ``folder``."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs.from_flavor("debug", vocab_size=VOCAB, max_seq_len=16, **fields)).eval()
    dcp.save(model.state_dict(), checkpoint_id=folder, no_dist=True)
    return model


def _config(**boost) -> dict:
    return {"model": {"flavor": "debug"}, "boost": boost, "training": {"seq_len": 16}}


@pytest.mark.parametrize("gate", ["linear", "none"])
def test_a_lax_run_loads_with_its_gate_from_the_toml_or_the_checkpoints_record(tmp_path, gate):
    # the gate's weights have other names and shapes per gate: built with the default gate, the run's
    # checkpoint lacked tensors and generate, evaluate and export refused it
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    trained = _trained(tmp_path / "step-1", linear="lax", lax_gate=gate)
    with torch.no_grad():
        want = trained(tokens)
    from_toml = load_checkpoint_model(tmp_path / "step-1", _config(linear="lax", lax_gate=gate), "run.toml")
    # a TOML without the line (run with --boost.lax_gate): the checkpoint's record says it
    (tmp_path / "step-1" / MODEL_IDENTITY_FILE).write_text(
        json.dumps({"model": {"linear": "lax", "lax_gate": gate, "only_lr_act": True}})
    )
    from_record = load_checkpoint_model(tmp_path / "step-1", _config(linear="lax"), "run.toml")
    for model in (from_toml, from_record):
        assert model.model_args.lax_gate == gate
        with torch.no_grad():
            torch.testing.assert_close(model(tokens), want, rtol=0, atol=0)


def test_the_mlps_activation_is_the_trainers_default_or_the_checkpoints_record():
    # 60M's flavor keeps SwiGLU's SiLU (only_lr_act false), but the trainer takes boost.only_lr_act, whose
    # default is true: a TOML without the line trained with true; the record, where there is one, decides
    with torch.device("meta"):
        shapes = {
            k: v.shape
            for k, v in Transformer(ModelArgs.from_flavor("60M", vocab_size=VOCAB)).state_dict().items()
        }
    config = {"model": {"flavor": "60M"}, "boost": {"linear": "cola"}}
    assert model_args_from_run(config, shapes, "run.toml").only_lr_act is BoostOptions().only_lr_act is True
    recorded = model_args_from_run(
        config, shapes, "run.toml", identity={"linear": "cola", "only_lr_act": False}
    )
    assert recorded.only_lr_act is False


def test_a_block_causal_run_is_scored_within_each_document(tmp_path):
    # evaluate's loss is the trainer's validation loss: a block_causal run attended within documents
    eos = 3
    trained = _trained(tmp_path / "step-1", linear="cola")
    model = load_checkpoint_model(
        tmp_path / "step-1", _config(linear="cola", attn_mask_type="block_causal"), "r"
    )
    assert model.model_args.attn_mask_type == "block_causal"
    ids = torch.randint(4, VOCAB, (33,), generator=torch.Generator().manual_seed(2)).tolist()
    ids[10] = ids[22] = eos  # three documents in the window
    windows = list(packed_windows([ids], seq_len=16))
    lengths = torch.ones(VOCAB, dtype=torch.long)
    got = score(model, windows, lengths, progress=False, eos_id=eos)
    with torch.no_grad():
        batch = torch.tensor(windows)
        logits = trained(batch[:, :-1], attention_masks=block_causal_mask(batch[:, :-1], eos))
        want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item()
        causal = torch.nn.functional.cross_entropy(
            trained(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten()
        )
    assert math.isclose(got.loss, want, rel_tol=1e-6) and not math.isclose(
        got.loss, causal.item(), rel_tol=1e-4
    )
    with pytest.raises(ValueError, match="pass eos_id"):
        score(model, windows, lengths, progress=False)


def test_inference_normalises_as_the_checkpoint_records_and_refuses_another_tp_degree_for_local_norms():
    # boost.norm = "local" under BTP at tp 4 is a different model for each TP degree: sharded over 2
    # processes, or whole on one, inference computed another function and said nothing
    local4 = {"rms_norm": "shard-local over 4 tensor-parallel ranks"}
    assert inference_norm({"boost": {}}, local4, 4, "step-9") == "local"  # a TOML run with --boost.norm local
    for world in (1, 2):
        with pytest.raises(
            RunError, match=r"over 4 tensor-parallel ranks.*run it on 4 processes .*not " + str(world)
        ):
            inference_norm({"boost": {"norm": "local"}}, local4, world, "step-9")
    # recorded exact (local at tp 1 is the exact norm): sharded inference must not make it shard-local
    assert inference_norm({"boost": {"norm": "local"}}, {"rms_norm": "exact"}, 2, "step-9") == "online"
    assert inference_norm({"boost": {"norm": "sync"}}, {"rms_norm": "exact"}, 2, "step-9") == "sync"
    assert inference_norm({"boost": {"norm": "local"}}, None, 2, "step-9") == "local"  # no record: the TOML's


def test_load_run_refuses_a_shard_local_run_on_another_process_count(tmp_path, monkeypatch):
    from boost.after_training.trained_run import load_run
    from tests.trained_runs import make_run

    toml = make_run(tmp_path, "cola")
    (tmp_path / "checkpoint" / "step-3" / MODEL_IDENTITY_FILE).write_text(
        json.dumps({"model": {"linear": "cola", "rms_norm": "shard-local over 2 tensor-parallel ranks"}})
    )
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(RunError, match="run it on 2 processes"):
        load_run(toml)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert load_run(toml).config["boost"]["norm"] == "local"  # what shard_for_inference then applies


def test_a_shard_local_run_is_not_exported_on_any_process_count(tmp_path, monkeypatch, capsys):
    # Under torchrun at the run's TP degree load_run accepts it (for sharded inference), but the export
    # writes one unsharded model, whose RMSNorm transformers computes exactly: another function.
    from boost.after_training.interop.cli import main
    from tests.trained_runs import make_run

    toml = make_run(tmp_path, "cola")
    (tmp_path / "checkpoint" / "step-3" / MODEL_IDENTITY_FILE).write_text(
        json.dumps({"model": {"linear": "cola", "rms_norm": "shard-local over 2 tensor-parallel ranks"}})
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["export", "--config", str(toml), "--out", str(tmp_path / "hf")]) == 2
    assert "no Hugging Face folder computes" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


def test_a_tokenizer_of_the_same_size_but_not_the_runs_is_refused(tmp_path):
    # the checkpoint records its tokenizer's fingerprint: a retrained BPE of the same size maps the same ids
    # to other text, and only the size was compared
    from boost.after_training.trained_run import load_run
    from boost.training.data.tokenizer_fingerprint import tokenizer_fingerprint
    from tests.trained_runs import make_run, offline_tokenizer_dir

    toml = make_run(tmp_path, "cola")
    identity = tmp_path / "checkpoint" / "step-3" / MODEL_IDENTITY_FILE
    recorded = {"linear": "cola", "tokenizer": tokenizer_fingerprint(offline_tokenizer_dir())}
    identity.write_text(json.dumps({"model": recorded}))
    load_run(toml)  # the run's own
    other = tmp_path / "other-tokenizer"
    shutil.copytree(offline_tokenizer_dir(), other)
    vocabulary = json.loads((other / "tokenizer.json").read_text())
    vocab = vocabulary["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[300:302]  # two ordinary tokens' ids swapped
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(vocabulary))
    with pytest.raises(RunError, match=f"tokenizer {other} .* is not the one .* was trained with"):
        load_run(toml, tokenizer_dir=other)


def test_a_run_trained_with_overrides_is_read_back_with_them(tmp_path, capsys):
    # ./run_train.sh --boost.linear svd: the TOML at hand says cola, and the tools took no overrides, so
    # every after-training tool refused the run ("pass the TOML this run was trained with": there is none)
    from boost.after_training import evaluate, generate
    from boost.after_training.interop import cli
    from tests.trained_runs import make_run

    toml = make_run(tmp_path, "svd")
    toml.write_text(toml.read_text().replace('linear = "svd"', 'linear = "cola"'))
    # svd and cola factors have the same shapes: the record says which the run trained, as every run's does
    (tmp_path / "checkpoint" / "step-3" / MODEL_IDENTITY_FILE).write_text(
        json.dumps({"model": {"linear": "svd"}})
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("def main():\n    return 0\n" * 40)
    scored = ["--config", str(toml), "--max-tokens", "64", "--batch-size", "1", "--data", str(notes)]
    assert evaluate.main(scored) == 2
    assert "boost.linear = 'cola' but the checkpoint holds a 'svd' model" in capsys.readouterr().err
    assert evaluate.main([*scored, "--boost.linear", "svd"]) == 0
    assert "bits/byte" in capsys.readouterr().out
    assert generate.main(["--config", str(toml), "--max-new-tokens", "2", "--boost.linear=svd"]) == 0
    out = tmp_path / "hf"
    assert cli.main(["export", "--config", str(toml), "--out", str(out), "--boost.linear", "svd"]) == 0
    assert json.loads((out / "config.json").read_text())["boost"]["linear"] == "svd"
    # what is neither the tool's nor an override is named, not dropped
    with pytest.raises(SystemExit):
        evaluate.main([*scored, "--boost.linear", "svd", "stray"])
    assert "unrecognized arguments: stray" in capsys.readouterr().err

"""Hugging Face LLaMA interop: import, export and round trips against ``transformers`` itself.

``transformers`` is a test-only dependency; every model here is a tiny one built locally from a
fixed seed (nothing is downloaded).
"""

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

transformers = pytest.importorskip("transformers")

from boost.after_training.interop import densify, factorize, load_hf, load_hf_with_report, save_hf  # noqa: E402
from boost.after_training.interop.cli import main  # noqa: E402
from boost.after_training.interop.factorize import initial_crossings  # noqa: E402
from boost.training.model import ModelArgs, Transformer  # noqa: E402
from boost.training.model.grouped_state import to_ungrouped  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    rms_norm_eps=1e-5,
    max_position_embeddings=64,
)
# Same weights, same op order up to the RoPE formula (HF: half-split, float32 inv_freq; BOOST:
# interleaved, float64 table) → float32 rounding only.
F32 = dict(rtol=1e-5, atol=1e-5)


def _hf_model(seed: int = 0, low_rank: int | None = None, **overrides):
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:  # norms at ones would hide a swapped attention_norm / ffn_norm
                p.uniform_(0.5, 1.5)
            elif low_rank and p.shape != (TINY["vocab_size"], TINY["hidden_size"]):
                # Projections of rank ≤ low_rank: a rank-low_rank SVD import is then exact.
                p.copy_(torch.randn(p.shape[0], low_rank) @ torch.randn(low_rank, p.shape[1]) / p.shape[1])
    return model


def _save(model, path: Path, **kwargs) -> Path:
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    return path


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    model = _hf_model()
    return model, _save(model, tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def _logits(model, tokens):
    out = model(tokens)
    return out.logits if hasattr(out, "logits") else out


def test_dense_import_reproduces_transformers(hf, tokens):
    model, path = hf
    ours = load_hf(path)
    assert ours.model_args.linear == "full" and ours.model_args.kv_heads == 2 and ours.import_report == {}
    torch.testing.assert_close(_logits(ours, tokens), _logits(model, tokens), **F32)


def test_sharded_checkpoint(hf, tokens, tmp_path):
    model, _ = hf
    path = _save(model, tmp_path, max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").is_file()
    torch.testing.assert_close(_logits(load_hf(path), tokens), _logits(model, tokens), **F32)


def test_svd_import_exact_for_weights_of_rank_r(tmp_path, tokens):
    # ModelArgs.check wants rank < min(dim, kv_dim) = 32, so a "full-rank" SVD of the 64×64 wq
    # cannot be built; instead every projection has rank 16 and the rank-16 import must be exact.
    # Tolerance 1e-4: B·(A·x) in float32 reassociates W·x (factors from a float64 SVD).
    model = _hf_model(low_rank=16)
    ours, report = load_hf_with_report(_save(model, tmp_path), "svd", rank=16, group_linears=False)
    assert max(max(row.values()) for row in report.values()) < 1e-6
    torch.testing.assert_close(_logits(ours, tokens), _logits(model, tokens), rtol=1e-4, atol=1e-4)


def test_factorize_at_full_rank_and_beyond():
    w = torch.randn(32, 64, dtype=torch.float64)
    for rank in (32, 40):  # 40 > min(d_out, d_in): zero-padded factors
        a, b, err = factorize(w, rank)
        assert a.shape == (rank, 64) and b.shape == (32, rank) and err < 1e-12
        torch.testing.assert_close(b @ a, w, rtol=0, atol=1e-12)


@pytest.mark.parametrize("linear", ["svd", "cola", "lax"])
def test_low_rank_import_reports_errors(hf, tokens, linear):
    _, path = hf
    model = load_hf(path, linear)
    assert model.model_args.rank == 16 and model.model_args.grouped  # dim // 4, BOOST's grouped layout
    assert set(model.import_report) == {0, 1}
    for row in model.import_report.values():
        assert set(row) == {"wq", "wk", "wv", "wo", "w1", "w3", "w2"}
    # each error is ‖W − BA‖ / ‖W‖ of the best rank-16 approximation: the tail of W's singular values
    model_hf = hf[0]
    for i, row in model.import_report.items():
        layer = model_hf.model.layers[i]
        for name, hf_linear in {
            "wq": layer.self_attn.q_proj, "wk": layer.self_attn.k_proj, "wv": layer.self_attn.v_proj,
            "wo": layer.self_attn.o_proj, "w1": layer.mlp.gate_proj, "w3": layer.mlp.up_proj,
            "w2": layer.mlp.down_proj,
        }.items():  # fmt: skip
            s = torch.linalg.svdvals(hf_linear.weight.detach().double())
            expected = (s[16:].square().sum() / s.square().sum()).sqrt().item()
            assert abs(row[name] - expected) < 1e-12 and 0 < expected < 1, (i, name, row[name], expected)
    assert torch.isfinite(_logits(model, tokens)).all()


def test_a_dense_model_imported_as_lax_starts_its_norms_and_gates_as_a_new_lax_model(hf):
    _, path = hf
    imported = load_hf(path, "lax")
    fresh = Transformer(dataclasses.replace(imported.model_args, init_seed=0)).state_dict()
    crossing = [k for k in fresh if ".latent." in k]
    assert crossing and all(torch.equal(imported.state_dict()[k], fresh[k]) for k in crossing)


@pytest.mark.parametrize("gate", ["tensorized", "linear", "none"])
def test_initial_crossings_are_a_new_lax_models_for_every_gate(gate):
    args = ModelArgs(
        dim=64, n_layers=3, n_heads=4, n_kv_heads=2, vocab_size=128, ffn_dim=176, linear="lax", rank=16,
        lax_gate=gate, init_seed=0,
    )  # fmt: skip
    fresh = to_ungrouped(Transformer(args).state_dict(), args)
    crossings = initial_crossings(args, 0)
    assert crossings and set(crossings) == {k for k in fresh if ".latent." in k}
    assert all(torch.equal(v, fresh[k]) for k, v in crossings.items())


def test_grouped_and_ungrouped_imports_agree(hf, tokens):
    _, path = hf
    grouped, flat = load_hf(path, "cola", group_linears=True), load_hf(path, "cola", group_linears=False)
    assert hasattr(grouped.layers["0"].attention, "wqkv") and hasattr(flat.layers["0"].attention, "wq")
    torch.testing.assert_close(_logits(grouped, tokens), _logits(flat, tokens), **F32)


@pytest.mark.parametrize("tie", [False, True])
def test_export_loads_in_transformers(tmp_path, tokens, tie):
    torch.manual_seed(0)
    args = ModelArgs(
        dim=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=128,
        ffn_dim=176,
        linear="full",
        rope_theta=50000.0,
        norm_eps=1e-6,
        max_seq_len=64,
        tie_embeddings=tie,
    )
    ours = Transformer(args)
    save_hf(ours, tmp_path)
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(_logits(theirs, tokens), _logits(ours, tokens), **F32)
    back = load_hf(tmp_path)  # q/k permutation and its inverse are row shuffles: bit-exact
    assert dataclasses.replace(back.model_args, rank=args.rank) == args  # a dense model has no rank
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


def test_dense_round_trip_is_exact(hf, tmp_path, tokens):
    _, path = hf
    first = load_hf(path)
    save_hf(first, tmp_path)
    second = load_hf(tmp_path)
    assert all(torch.equal(v, second.state_dict()[k]) for k, v in first.state_dict().items())
    assert torch.equal(_logits(first, tokens), _logits(second, tokens))


@pytest.mark.parametrize("linear,grouped", [("cola", True), ("cola", False), ("lax", True), ("svd", False)])
def test_low_rank_round_trip_is_exact(tmp_path, tokens, linear, grouped):
    torch.manual_seed(0)
    args = ModelArgs(
        dim=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=128,
        ffn_dim=176,
        linear=linear,
        rank=16,
        group_linears=grouped,
        max_seq_len=64,
    )
    ours = Transformer(args)
    save_hf(ours, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["boost"]["linear"] == linear
    back = load_hf(tmp_path)
    assert back.model_args == args
    assert back.state_dict().keys() == ours.state_dict().keys()
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())
    assert torch.equal(_logits(back, tokens), _logits(ours, tokens))
    other = load_hf(tmp_path, group_linears=not grouped)  # the file is per-projection: either layout loads
    torch.testing.assert_close(_logits(other, tokens), _logits(ours, tokens), **F32)
    with pytest.raises(ValueError, match="cannot be loaded as 'full'"):
        load_hf(tmp_path, "full")


def test_svd_densifies_to_a_llama_checkpoint(hf, tmp_path, tokens):
    _, path = hf
    svd = load_hf(path, "svd", rank=8)
    save_hf(densify(svd), tmp_path)
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    # Dense W = B·A (float64 product) vs B·(A·x) in float32: reassociation only.
    torch.testing.assert_close(_logits(theirs, tokens), _logits(svd, tokens), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="no dense"):
        densify(load_hf(path, "cola"))


@pytest.mark.slow
def test_cli_import_and_export(hf, tmp_path, tokens, capsys):
    # Two subprocesses only: each pays torchtitan's import (~5-8 s); the error path runs in-process.
    model, path = hf
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "boost.after_training.interop", *map(str, a)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run("import", path, "--linear", "cola", "--rank", "8", "--out", tmp_path / "cola")
    assert out.returncode == 0, out.stderr
    assert "w2" in out.stdout and "mean" in out.stdout
    assert load_hf(tmp_path / "cola").model_args.rank == 8
    # HF -> BOOST dense -> HF through the CLI: transformers gets its own logits back, bit for bit.
    assert main(["import", str(path), "--out", str(tmp_path / "dense")]) == 0
    out = run("export", tmp_path / "dense", "--out", tmp_path / "hf")
    assert out.returncode == 0, out.stderr
    theirs = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf").eval()
    torch.testing.assert_close(_logits(theirs, tokens), _logits(model, tokens), rtol=0, atol=0)
    assert main(["export", str(tmp_path / "cola"), "--densify", "--out", str(tmp_path / "nope")]) == 2
    assert "no dense" in capsys.readouterr().err


def _import_error(capsys, *argv) -> str:
    assert main(["import", *map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_cli_names_the_bad_file_tensor_or_argument(hf, tmp_path, capsys):
    # Each broken input in-process: exit status 2 and a message naming what is wrong, no traceback.
    _, path = hf
    good = (path / "model.safetensors").read_bytes()
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(path / "config.json", broken / "config.json")
    for name, payload in (("truncated", good[: len(good) // 2]), ("garbage", b"\x00not safetensors" * 64)):
        (broken / "model.safetensors").write_bytes(payload)
        err = _import_error(capsys, broken, "--out", tmp_path / f"out_{name}")
        assert f"{broken / 'model.safetensors'} is not a readable safetensors file" in err, (name, err)
    # A tensor of the wrong shape is named (the weights of a model with another FFN width).
    config = json.loads((path / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "intermediate_size": 160}))
    (broken / "model.safetensors").write_bytes(good)
    err = _import_error(capsys, broken, "--out", tmp_path / "out_shape")
    assert (
        "tensor model.layers.0.mlp.gate_proj.weight has shape (176, 64), config.json implies (160, 64)" in err
    )
    (broken / "config.json").write_text('{"model_type": "llama", ')
    assert f"{broken / 'config.json'} is not valid JSON" in _import_error(
        capsys, broken, "--out", tmp_path / "o"
    )
    existing = tmp_path / "a_file"
    existing.write_text("")
    assert f"--out {existing} is an existing file" in _import_error(capsys, path, "--out", existing)
    assert existing.read_text() == ""


@pytest.mark.parametrize(
    "field,value",
    [
        ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}),
        ("rope_scaling", {"type": "linear", "factor": 4.0}),  # the spelling before transformers 4.43
        ("rope_parameters", {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
        ("attention_bias", True),
        ("mlp_bias", True),
        ("hidden_act", "gelu"),
        ("model_type", "mistral"),
        ("head_dim", 32),
    ],
)
def test_unsupported_config_is_refused(hf, tmp_path, field, value):
    _, path = hf
    config = json.loads((path / "config.json").read_text())
    config[field] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"config\.json: {field} = "):
        load_hf(tmp_path)


def test_the_whole_context_is_imported_and_written_back(tmp_path):
    """A checkpoint's max_position_embeddings is the imported model's sequence length, not a cap below it."""
    model = _hf_model(max_position_embeddings=5000)
    ours = load_hf(_save(model, tmp_path / "hf"))
    assert ours.model_args.max_seq_len == 5000
    tokens = torch.randint(0, TINY["vocab_size"], (1, 4200), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(_logits(ours, tokens), _logits(model, tokens), **F32)
    save_hf(ours, tmp_path / "back")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["max_position_embeddings"] == 5000


def test_a_rank_the_model_cannot_take_is_refused_naming_the_rank_option(tmp_path, capsys):
    # LLaMA 3's shape: the key/value width is hidden_size / 4, so the default rank does not fit under it.
    path = _save(_hf_model(num_attention_heads=8, num_key_value_heads=2), tmp_path / "gqa")
    with pytest.raises(ValueError, match=r"rank 16 \(the default hidden_size // 4\).*\(16\).*--rank"):
        load_hf(path, "cola")
    assert load_hf(path, "cola", rank=8).model_args.rank == 8
    # a rank below 1: the fix is a positive rank, not a smaller one
    for rank in ("-3", "0"):
        err = _import_error(capsys, path, "--rank", rank, "--linear", "cola", "--out", tmp_path / "o")
        assert (
            f"rank {rank} (given) must be below the smallest dim it factors (16) and positive: pass a positive "
            in err
        )
        assert "smaller" not in err
    assert (
        "rank 16 (given) must be below the smallest dim it factors (16) and positive: pass a smaller rank"
        in (_import_error(capsys, path, "--rank", "16", "--linear", "cola", "--out", tmp_path / "o"))
    )
    assert not (tmp_path / "o").exists()


def test_a_refused_export_leaves_no_out_folder(tmp_path, capsys):
    """The tokenizer is checked before --out is made: a refused export writes nothing, not an empty folder."""
    torch.manual_seed(0)
    args = ModelArgs(dim=64, n_layers=1, n_heads=4, vocab_size=128, ffn_dim=176, linear="cola", rank=16)
    save_hf(Transformer(args), tmp_path / "cola")
    out = tmp_path / "exported"
    assert (
        main(["export", str(tmp_path / "cola"), "--tokenizer", str(tmp_path / "nope"), "--out", str(out)])
        == 2
    )
    assert f"error: --tokenizer {tmp_path / 'nope'} holds no tokenizer.json" in capsys.readouterr().err
    assert not out.exists()


def test_a_boost_folder_keeps_its_kind_and_rank(tmp_path, capsys):
    torch.manual_seed(0)
    args = ModelArgs(dim=64, n_layers=1, n_heads=4, vocab_size=128, ffn_dim=176, linear="cola", rank=16)
    save_hf(Transformer(args), tmp_path / "cola")
    with pytest.raises(ValueError, match="holds a rank-16 model; it cannot be loaded at rank 8"):
        load_hf(tmp_path / "cola", rank=8)
    assert load_hf(tmp_path / "cola", rank=16).model_args == args
    # The CLI reads the folder's own kind: no --linear needed to import what BOOST wrote.
    assert main(["import", str(tmp_path / "cola"), "--out", str(tmp_path / "again")]) == 0
    assert "rank-16 cola import" in capsys.readouterr().out
    assert load_hf(tmp_path / "again").model_args == args
    assert "cannot be loaded at rank 8" in _import_error(
        capsys, tmp_path / "cola", "--rank", "8", "--out", tmp_path / "o"
    )


def test_missing_files_are_named(hf, tmp_path):
    _, path = hf
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf(tmp_path)
    shutil.copy(path / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="model.safetensors.*pickle"):
        load_hf(tmp_path)
    config = json.loads((path / "config.json").read_text())
    del config["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="intermediate_size"):
        load_hf(tmp_path)


def test_a_checkpoint_lacking_llama_tensors_is_refused_naming_them(hf, tmp_path):
    # a tensor config.json implies but the file lacks would otherwise surface as a bare KeyError mid-build
    _, path = hf
    shutil.copy(path / "config.json", tmp_path / "config.json")
    weights = load_file(path / "model.safetensors")
    del weights["model.norm.weight"]
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(
        KeyError,
        match=re.escape(f"{tmp_path}: the checkpoint lacks 1 LLaMA tensor(s), e.g. ['model.norm.weight']"),
    ):
        load_hf(tmp_path)


def test_a_sharded_checkpoints_index_is_read_strictly(hf, tmp_path):
    _, path = hf
    shutil.copy(path / "config.json", tmp_path / "config.json")
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}}))  # an index cut down to its header
    with pytest.raises(ValueError, match=re.escape(f"{index} has no weight_map object")):
        load_hf(tmp_path)
    # a shard the index names but the folder lacks: a copy that left one behind
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(
        FileNotFoundError,
        match=re.escape(
            f"{tmp_path / 'model-00002-of-00002.safetensors'} not found (named by the folder's safetensors index)"
        ),
    ):
        load_hf(tmp_path)


def test_a_boost_folder_with_fields_this_boost_does_not_know_is_refused(tmp_path):
    # a folder from a newer BOOST: dropping the field would build another model than the one saved
    save_hf(
        Transformer(ModelArgs(dim=64, n_layers=1, n_heads=4, vocab_size=128, ffn_dim=176, rank=16)), tmp_path
    )
    config = json.loads((tmp_path / "config.json").read_text())
    config["boost"]["carry_width"] = 8
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError,
        match=re.escape(f"{tmp_path / 'config.json'}: boost section has unknown field(s) ['carry_width']"),
    ):
        load_hf(tmp_path)


def test_a_rank_for_a_dense_import_is_refused_not_dropped(hf, tmp_path, capsys):
    # --rank with the default (dense) kind: no bottleneck to give it; it was ignored, a LLaMA folder written
    _, path = hf
    out = tmp_path / "out"
    err = _import_error(capsys, path, "--rank", 8, "--out", out)
    assert "rank 8 applies to a low-rank import" in err and "--linear" in err, err
    assert not out.exists()


def test_an_empty_out_is_refused_not_the_working_folder(hf, tmp_path, capsys, monkeypatch):
    _, path = hf
    monkeypatch.chdir(tmp_path)
    err = _import_error(capsys, path, "--out", "")
    assert err.startswith("error: --out is empty"), err
    assert list(tmp_path.iterdir()) == []


def test_an_out_folder_that_holds_files_is_refused_not_written_over(hf, tmp_path, capsys):
    # written over, it kept what the new folder does not write: another model's tokenizer, loaded beside it
    _, path = hf
    out = tmp_path / "out"
    out.mkdir()
    (out / "tokenizer.json").write_text("{}")
    err = _import_error(capsys, path, "--linear", "svd", "--rank", 8, "--out", out)
    assert err.startswith(f"error: --out {out} already holds files (tokenizer.json); give a new folder"), err
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer.json"]

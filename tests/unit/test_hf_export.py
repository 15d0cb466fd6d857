"""Export of every linear kind to a Hugging Face folder, with transformers itself as the client.

Per kind: ``AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)`` gives BOOST's logits,
greedy ``generate`` gives ``boost.after_training.generate``'s tokens, and ``load_hf`` round-trips bit-exactly; the
tokenizer loads as a fast tokenizer that frames text as the trainer did; ``pipeline`` runs; and the
CLI exports straight from a run's DCP checkpoint.
"""

import json
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

from boost.after_training.generate import sample  # noqa: E402
from boost.after_training.interop import load_hf, save_hf  # noqa: E402
from boost.after_training.interop.cli import main  # noqa: E402
from boost.after_training.trained_run import load_run  # noqa: E402
from boost.training.data.run_tokenizer import load_tokenizer  # noqa: E402
from boost.training.model import ModelArgs, Transformer  # noqa: E402
from tests.trained_runs import make_run, offline_tokenizer_dir  # noqa: E402


def _model(linear: str) -> Transformer:
    torch.manual_seed(0)
    vocab = load_tokenizer(offline_tokenizer_dir()).vocab_size
    linear, _, lax_gate = linear.partition("/")  # "lax/linear": LaX with that gate
    args = ModelArgs(
        dim=64, n_layers=3, n_heads=4, n_kv_heads=2, vocab_size=vocab, ffn_dim=176, linear=linear, rank=16,
        max_seq_len=64, rope_theta=50000.0, lax_gate=lax_gate or "tensorized",
    )  # fmt: skip
    model = Transformer(args).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 or ".latent.norm" in name:  # norms at one (LaX's at zero) would hide a mix-up
                p.uniform_(0.5, 1.5)
    return model


def _relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return ((ours - theirs).abs().max() / ours.abs().max()).item()


@pytest.mark.parametrize("linear", ["full", "svd", "cola", "lax", "lax/linear", "lax/none"])
def test_transformers_reproduces_boost(tmp_path, linear):
    ours = _model(linear)
    save_hf(ours, tmp_path, tokenizer_dir=offline_tokenizer_dir())
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == ("llama" if linear == "full" else "boost_llama")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True).eval()
    assert type(theirs).__name__ == ("LlamaForCausalLM" if linear == "full" else "BoostForCausalLM")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    boost_tokenizer = load_tokenizer(offline_tokenizer_dir())
    text = "def main(argv):\n    return 0  # é\n"
    assert tokenizer(text)["input_ids"] == boost_tokenizer.encode(text)  # BOS first, as in training
    tokens = torch.randint(0, ours.model_args.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        error = _relative_error(ours(tokens), theirs(tokens).logits)
    # Same weights; the RoPE table is float64 on both sides; op order differs (grouped/batched GEMMs).
    assert error <= 1e-5, error
    prompt = tokenizer("import os\n", return_tensors="pt")
    generated = theirs.generate(**prompt, max_new_tokens=20, do_sample=False)[
        0, prompt["input_ids"].shape[1] :
    ]
    expected = list(
        sample(ours, prompt["input_ids"][0].tolist(), 20, temperature=0, eos_id=tokenizer.eos_token_id)
    )
    assert generated.tolist() == expected
    back = load_hf(tmp_path)  # renames and row shuffles only: bit-exact
    assert back.model_args == ours.model_args
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


def test_pipeline_runs_on_the_folder(tmp_path):
    ours = _model("lax")
    save_hf(ours, tmp_path, tokenizer_dir=offline_tokenizer_dir())
    generator = transformers.pipeline("text-generation", model=str(tmp_path), trust_remote_code=True)
    out = generator("def main(", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    ids = load_tokenizer(offline_tokenizer_dir()).encode("def main(")
    assert out == "def main(" + load_tokenizer(offline_tokenizer_dir()).decode(
        list(sample(ours, ids, 8, temperature=0))
    )


def test_cli_exports_a_dcp_checkpoint(tmp_path, capsys):
    toml = make_run(tmp_path, "cola")
    out = tmp_path / "hf"
    assert main(["export", "--config", str(toml), "--out", str(out)]) == 0
    run = load_run(toml)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    tokens = torch.tensor([run.tokenizer.encode("class Foo:\n    pass\n")])
    with torch.no_grad():
        assert _relative_error(run.model(tokens), theirs(tokens).logits) <= 1e-5
    assert (out / "tokenizer.json").is_file() and (out / "modeling_boost.py").is_file()
    # A DCP folder without its TOML is refused with the fix.
    assert main(["export", str(tmp_path / "checkpoint" / "step-3"), "--out", str(tmp_path / "x")]) == 2
    assert "add --config" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "linear",
            "full",
            "config.json: linear = 'full' must be svd, cola or lax (full models are LlamaForCausalLM)",
        ),
        ("lax_gate", "gated", "config.json: lax_gate = 'gated' must be tensorized, linear or none"),
    ],
    ids=["linear", "lax_gate"],
)
def test_the_exported_config_class_refuses_a_kind_its_modeling_code_cannot_build(
    tmp_path, field, value, message
):
    # the folder's own configuration_boost.py reads config.json where BOOST is not installed: an edited
    # kind must stop there, not build a model of another kind than the weights
    args = ModelArgs(dim=64, n_layers=1, n_heads=4, vocab_size=128, ffn_dim=176, linear="lax", rank=16)
    save_hf(Transformer(args), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[field] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=re.escape(message)):
        transformers.AutoConfig.from_pretrained(tmp_path, trust_remote_code=True)

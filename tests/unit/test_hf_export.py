"""Export of every linear kind to a Hugging Face folder, with transformers itself as the client.

Per kind: ``AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)`` gives BOOST's logits,
greedy ``generate`` gives ``boost.after_training.generate``'s tokens, activation checkpointing keeps the gradients,
and ``load_hf`` round-trips bit-exactly; the
tokenizer loads as a fast tokenizer that frames text as the trainer did; ``pipeline`` runs; and the
CLI exports straight from a run's DCP checkpoint.
"""

import json
import re
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from boost.after_training.generate import sample  # noqa: E402
from boost.after_training.hf_folder import write_tokenizer  # noqa: E402
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
    # the inputs the model takes (transformers < 5's tokenizer adds token_type_ids unless told, which its
    # generate refuses: CI's oldest compatibility tier runs transformers 4.45)
    assert list(tokenizer(text)) == ["input_ids", "attention_mask"]
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


def _gradients(model, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    model(tokens, labels=tokens).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("linear", ["cola", "lax"])
def test_checkpointed_blocks_give_the_same_gradients(tmp_path, linear):
    """Fine-tuning with transformers' activation checkpointing: a recomputed LaX block reads the latent
    its previous block carried, not the last block's, and reentrant checkpointing (which would cut the
    carry from the gradient) is refused for LaX."""
    save_hf(_model(linear), tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True).train()
    tokens = torch.randint(0, theirs.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    plain = _gradients(theirs, tokens)
    theirs.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    checkpointed = _gradients(theirs, tokens)
    assert all(torch.allclose(plain[k], checkpointed[k], rtol=1e-5, atol=1e-7) for k in plain), linear
    theirs.gradient_checkpointing_disable()
    if linear == "lax":
        with pytest.raises(ValueError, match="use_reentrant"):
            theirs.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})


def test_pipeline_runs_on_the_folder(tmp_path):
    ours = _model("lax")
    save_hf(ours, tmp_path, tokenizer_dir=offline_tokenizer_dir())
    generator = transformers.pipeline("text-generation", model=str(tmp_path), trust_remote_code=True)
    out = generator("def main(", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    ids = load_tokenizer(offline_tokenizer_dir()).encode("def main(")
    assert out == "def main(" + load_tokenizer(offline_tokenizer_dir()).decode(
        list(sample(ours, ids, 8, temperature=0))
    )


def test_a_tokenizer_config_with_added_token_objects_exports_as_with_strings(tmp_path):
    """LLaMA 2-era folders write special tokens as transformers' serialised ``AddedToken`` objects."""
    source = offline_tokenizer_dir()
    config = json.loads((source / "tokenizer_config.json").read_text())
    objects = tmp_path / "objects"
    objects.mkdir()
    shutil.copy(source / "tokenizer.json", objects / "tokenizer.json")
    as_object = lambda token: {"__type": "AddedToken", "content": token, "lstrip": False}  # noqa: E731
    (objects / "tokenizer_config.json").write_text(
        json.dumps(
            {
                **config,
                "bos_token": as_object(config["bos_token"]),
                "eos_token": as_object(config["eos_token"]),
            }
        )
    )
    text = "def main(argv):\n    return 0\n"
    framed = []
    for folder in (source, objects):
        out = tmp_path / f"out-{folder.name}"
        out.mkdir()
        assert write_tokenizer(folder, out, model_max_length=64) == (
            load_tokenizer(source).bos_id,
            load_tokenizer(source).eos_id,
        )
        framed.append(transformers.AutoTokenizer.from_pretrained(out)(text)["input_ids"])
    assert framed[0] == framed[1] == load_tokenizer(source).encode(text)


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

"""Hugging Face folders of BOOST models: LLaMA names, RoPE row order, low-rank config, remote code, tokenizer.

A low-rank model's folder holds ``config.json`` (a ``LlamaConfig`` plus ``linear``/``rank``/``only_lr_act``,
``auto_map`` pointing at the shipped code, and a ``boost`` section with every ``ModelArgs`` field for
an exact re-import), ``model.safetensors``, ``configuration_boost.py`` + ``modeling_boost.py``
(``boost/after_training/hf/``) and, when given, the tokenizer as ``PreTrainedTokenizerFast`` files.

Weight names are LLaMA's with each projection split into its factors, and LaX's crossing beside them::

    layers.{i}.attention.wq.down.weight   ->  model.layers.{i}.self_attn.q_proj.down.weight   (A, [r, d_in])
    layers.{i}.attention.wq.up.0.weight   ->  model.layers.{i}.self_attn.q_proj.up.weight     (B, [d_out, r])
    layers.{i}.attention.wq.latent.norm_weight [1, r]  ->  ....q_proj.lax.norm.weight [r]   (LaX, i ≥ 1; LAX_PARAMS)

and the rows of q's and k's B in transformers' half-split RoPE order (``boost.after_training.interop``'s row
permutation below; A is untouched because RoPE acts on the projection's output). Both directions
are pure renames and row shuffles: a round trip is bit-exact. The dense kind is plain LLaMA
(``boost.after_training.interop``), which shares the names and the permutation from here.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from boost.after_training.hf import REMOTE_CODE_FILES
from boost.training.data.run_tokenizer import missing_special_tokens, special_token_text
from boost.training.model.args import ModelArgs
from boost.training.rules import MODEL_NAME

if TYPE_CHECKING:  # imported where used: tokenizers is the exports' dependency
    from tokenizers import Tokenizer

# BOOST per-projection name -> Hugging Face module name, inside layer i (LLaMA's).
PROJECTIONS = {
    "attention.wq": "self_attn.q_proj",
    "attention.wk": "self_attn.k_proj",
    "attention.wv": "self_attn.v_proj",
    "attention.wo": "self_attn.o_proj",
    "feed_forward.w1": "mlp.gate_proj",
    "feed_forward.w3": "mlp.up_proj",
    "feed_forward.w2": "mlp.down_proj",
}
NORMS = {"attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
# LaX's crossing (blocks ≥ 1), inside each projection: BOOST's ``latent.<name>`` ([1, ...] per projection)
# -> the exported projection's ``lax.<name>`` (modeling_boost.LaxCrossing)
LAX_PARAMS = {
    "norm_weight": "lax.norm.weight",
    "norm_bias": "lax.norm.bias",
    "gate_encoder": "lax.gate_encoder",
    "gate_decoder": "lax.gate_decoder",
    "gate_weight": "lax.gate.weight",
    "gate_bias": "lax.gate.bias",
}
LAX_GATE_PARAMS = {
    "tensorized": ("gate_encoder", "gate_decoder"),
    "linear": ("gate_weight", "gate_bias"),
    "none": (),
}


def lax_param_names(args: ModelArgs, layer: int) -> tuple[str, ...]:
    """The crossing's parameters of one projection of ``layer`` (none for other kinds and block 0)."""
    if args.linear != "lax" or layer == 0:
        return ()
    return ("norm_weight", "norm_bias", *LAX_GATE_PARAMS[args.lax_gate])


# config.json's model_type: BoostConfig.model_type in boost/after_training/hf/ says the same
MODEL_TYPE = MODEL_NAME
AUTO_MAP = {
    "AutoConfig": "configuration_boost.BoostConfig",
    "AutoModelForCausalLM": "modeling_boost.BoostForCausalLM",
}


def to_hf_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """HF's ``permute`` (convert_llama_weights_to_hf.py): interleaved RoPE pairs to half-split rows."""
    d1, d2 = w.shape
    return w.view(n_heads, d1 // n_heads // 2, 2, d2).transpose(1, 2).reshape(d1, d2)


def from_hf_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Inverse of :func:`to_hf_rows`: half-split rows back to interleaved pairs."""
    d1, d2 = w.shape
    return w.view(n_heads, 2, d1 // n_heads // 2, d2).transpose(1, 2).reshape(d1, d2)


def _rope_heads(args: ModelArgs) -> dict[str, int]:
    return {"attention.wq": args.n_heads, "attention.wk": args.kv_heads}


def lowrank_to_hf(sd: dict[str, torch.Tensor], args: ModelArgs) -> dict[str, torch.Tensor]:
    """Per-projection BOOST state dict -> the exported folder's tensor names (contiguous copies)."""
    hf = {"model.embed_tokens.weight": sd["tok_embeddings.weight"], "model.norm.weight": sd["norm.weight"]}
    if not args.tie_embeddings:
        hf["lm_head.weight"] = sd["output.weight"]
    heads = _rope_heads(args)
    for i in range(args.n_layers):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        for ours, theirs in PROJECTIONS.items():
            up = sd[f"{src}{ours}.up.0.weight"]
            hf[f"{dst}{theirs}.down.weight"] = sd[f"{src}{ours}.down.weight"]
            hf[f"{dst}{theirs}.up.weight"] = to_hf_rows(up, heads[ours]) if ours in heads else up
            for name in lax_param_names(args, i):
                hf[f"{dst}{theirs}.{LAX_PARAMS[name]}"] = sd[f"{src}{ours}.latent.{name}"].squeeze(0)
        for ours, theirs in NORMS.items():
            hf[f"{dst}{theirs}.weight"] = sd[f"{src}{ours}.weight"]
    return {k: v.contiguous().clone() for k, v in hf.items()}


def lowrank_from_hf(hf: dict[str, torch.Tensor], args: ModelArgs, source: str) -> dict[str, torch.Tensor]:
    """The exported folder's tensors -> per-projection BOOST names; ``KeyError``/``ValueError`` naming the tensor."""
    expected = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    if not args.tie_embeddings:
        expected["output.weight"] = "lm_head.weight"
    for i in range(args.n_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        for ours, theirs in PROJECTIONS.items():
            expected[f"{dst}{ours}.down.weight"] = f"{src}{theirs}.down.weight"
            expected[f"{dst}{ours}.up.0.weight"] = f"{src}{theirs}.up.weight"
            for name in lax_param_names(args, i):
                expected[f"{dst}{ours}.latent.{name}"] = f"{src}{theirs}.{LAX_PARAMS[name]}"
        for ours, theirs in NORMS.items():
            expected[f"{dst}{ours}.weight"] = f"{src}{theirs}.weight"
    missing = [theirs for theirs in expected.values() if theirs not in hf]
    if missing:
        raise KeyError(f"{source}: lacks {len(missing)} tensor(s) the config implies, e.g. {missing[:3]}")
    sd = {
        ours: hf[theirs].unsqueeze(0) if ".latent." in ours else hf[theirs]
        for ours, theirs in expected.items()
    }
    heads = _rope_heads(args)
    for i in range(args.n_layers):
        for ours, n in heads.items():
            key = f"layers.{i}.{ours}.up.0.weight"
            sd[key] = from_hf_rows(sd[key], n)
    if args.tie_embeddings:
        sd["output.weight"] = sd["tok_embeddings.weight"]
    return sd


def llama_config(
    args: ModelArgs, dtype: torch.dtype, bos_id: int | None = None, eos_id: int | None = None
) -> dict:
    """``config.json`` of a dense BOOST model as transformers' ``LlamaForCausalLM``."""
    dtype_name = str(dtype).removeprefix("torch.")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": args.dim,
        "intermediate_size": args.ffn_dim,
        "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "vocab_size": args.vocab_size,
        "rms_norm_eps": args.norm_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "max_position_embeddings": args.max_seq_len,
        "tie_word_embeddings": args.tie_embeddings,
        # Both spellings: transformers < 5 reads rope_theta, >= 5 rope_parameters.
        "rope_theta": args.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": args.rope_theta},
        "torch_dtype": dtype_name,
        "dtype": dtype_name,
    }
    if bos_id is not None or eos_id is not None:  # LlamaConfig's defaults (1, 2) are another tokenizer's
        config.update(bos_token_id=bos_id, eos_token_id=eos_id)
    return config


def lowrank_config(
    args: ModelArgs, dtype: torch.dtype, bos_id: int | None = None, eos_id: int | None = None
) -> dict:
    """``config.json`` of a low-rank model: LLaMA's fields, the bottleneck's, ``auto_map`` and all of ``ModelArgs``."""
    return {
        **llama_config(args, dtype, bos_id, eos_id),
        "architectures": ["BoostForCausalLM"],
        "model_type": MODEL_TYPE,
        "auto_map": AUTO_MAP,
        "linear": args.linear,
        "rank": args.rank,
        "only_lr_act": args.only_lr_act,
        "lax_gate": args.lax_gate,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "boost": dataclasses.asdict(args),
    }


def write_remote_code(path: Path) -> None:
    """Copy the modeling and configuration files next to the weights."""
    for file in REMOTE_CODE_FILES:
        shutil.copyfile(file, path / file.name)


@dataclasses.dataclass
class ExportTokenizer:
    """A run's tokenizer, read and checked, ready to be written as ``PreTrainedTokenizerFast`` files."""

    tokenizer: Tokenizer  # with the post-processor that puts BOS first
    bos: str | None
    eos: str | None
    bos_id: int | None
    eos_id: int | None
    model_max_length: int

    def write(self, path: Path) -> None:
        self.tokenizer.save(str(path / "tokenizer.json"))
        hf_config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            # the inputs the model takes, LLaMA's: PreTrainedTokenizerFast's default adds token_type_ids,
            # which transformers < 5's generate refuses
            "model_input_names": ["input_ids", "attention_mask"],
            "bos_token": self.bos,
            "eos_token": self.eos,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": False,
        }
        (path / "tokenizer_config.json").write_text(json.dumps(hf_config, indent=2))
        special = {"bos_token": self.bos, "eos_token": self.eos}
        (path / "special_tokens_map.json").write_text(json.dumps(special, indent=2))


def write_tokenizer(
    tokenizer_dir: str | Path, path: Path, model_max_length: int
) -> tuple[int | None, int | None]:
    """The run's ``tokenizer.json`` as ``PreTrainedTokenizerFast`` files; returns ``(bos_id, eos_id)``."""
    tokenizer = read_tokenizer(tokenizer_dir, model_max_length)
    tokenizer.write(path)
    return tokenizer.bos_id, tokenizer.eos_id


def read_tokenizer(tokenizer_dir: str | Path, model_max_length: int) -> ExportTokenizer:
    """The run's ``tokenizer.json`` read and checked, nothing written (an export checks it before it makes its
    folder).

    The copy gains a post-processor that puts BOS first, as the trainer framed every document, so
    ``tokenizer(text)`` in transformers gives the ids ``boost.after_training.generate`` feeds the model.
    """
    from tokenizers import Tokenizer, processors

    tokenizer_dir = Path(tokenizer_dir)
    source = tokenizer_dir / "tokenizer.json"
    if not source.is_file():
        raise FileNotFoundError(f"--tokenizer {tokenizer_dir} holds no tokenizer.json")
    config_file = tokenizer_dir / "tokenizer_config.json"
    try:
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{config_file} is not valid JSON ({e}); restore it from the tokenizer's source"
        ) from None
    tokenizer = Tokenizer.from_file(str(source))
    missing = missing_special_tokens(tokenizer, config)
    if missing:
        raise ValueError(f"{config_file} {missing}")
    bos, eos = special_token_text(config.get("bos_token")), special_token_text(config.get("eos_token"))
    bos_id = tokenizer.token_to_id(bos) if bos else None
    eos_id = tokenizer.token_to_id(eos) if eos else None
    if bos_id is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B:1", special_tokens=[(bos, bos_id)]
        )
    return ExportTokenizer(tokenizer, bos, eos, bos_id, eos_id, model_max_length)

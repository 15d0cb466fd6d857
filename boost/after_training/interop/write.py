"""A ``boost.Transformer`` written as a folder ``transformers`` loads, and ``densify``.

The dense kind becomes a Hugging Face LLaMA checkpoint (q/k rows in HF's half-split RoPE order); the
low-rank kinds keep their two factors per projection beside BOOST's modeling code
(``boost.after_training.hf_folder``). ``boost.after_training.interop.read`` reloads either exactly.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import torch
from safetensors.torch import save_file

from boost.after_training.hf_folder import (
    NORMS,
    PROJECTIONS,
    llama_config,
    lowrank_config,
    lowrank_to_hf,
    read_tokenizer,
    to_hf_rows,
    write_remote_code,
)
from boost.after_training.interop.factorize import multiply_factors
from boost.after_training.interop.read import build_model
from boost.training.model.args import ModelArgs
from boost.training.model.grouped_state import to_ungrouped
from boost.training.model.model import Transformer
from boost.training.rules import KINDS

logger = logging.getLogger(__name__)


def save_hf(model: Transformer, path: str | Path, tokenizer_dir: str | Path | None = None) -> None:
    """Write ``model`` to folder ``path`` for transformers, with the tokenizer of ``tokenizer_dir`` if given.

    Dense kind: a Hugging Face LLaMA checkpoint (``config.json`` + ``model.safetensors``, q/k rows in
    HF's half-split RoPE order) for ``LlamaForCausalLM.from_pretrained``. Low-rank kinds: the same
    layout with each projection's two factors, BOOST's modeling code and ``auto_map``
    (``boost.after_training.hf_folder``), for
    ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)``. ``load_hf`` reloads
    either exactly. ``densify`` turns an ``svd`` model into a dense one first if plain LLaMA is wanted.

    Example::

        >>> save_hf(model, "hf_out", tokenizer_dir="~/.cache/boost/tokenizer-stdlib-v2048-...")
        >>> AutoModelForCausalLM.from_pretrained("hf_out", trust_remote_code=True)
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--out {path} is an existing file; give a folder path")
    args = model.model_args
    sd = _standalone_state_dict(model)
    dtype = sd["tok_embeddings.weight"].dtype
    # everything that can refuse runs before the folder is made: a refused export leaves no --out behind
    tokenizer = read_tokenizer(tokenizer_dir, args.max_seq_len) if tokenizer_dir is not None else None
    bos_id, eos_id = (tokenizer.bos_id, tokenizer.eos_id) if tokenizer is not None else (None, None)
    if args.low_rank:
        weights, config = lowrank_to_hf(sd, args), lowrank_config(args, dtype, bos_id, eos_id)
    else:
        weights, config = _dense_to_hf(sd, args), llama_config(args, dtype, bos_id, eos_id)
    if tokenizer is not None:
        # transformers < 5's pipeline loads a tokenizer for a config type it knows (LLaMA's), or one naming it
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        tokenizer.write(path)
    if args.low_rank:
        write_remote_code(path)
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    with open(path / "config.json", "w") as f:
        json.dump(config, f, indent=2)
    logger.info(
        "saved %s %s model to %s", "BoostForCausalLM" if args.low_rank else "LLaMA", args.linear, path
    )


@torch.no_grad()
def densify(model: Transformer) -> Transformer:
    """The dense model computing the same function as an ``svd`` model (each W = B·A), or itself if dense.

    ``cola``/``lax`` have σ inside the bottleneck and have no dense equivalent: ``ValueError``.
    """
    args = model.model_args
    if not args.low_rank:
        return model
    if KINDS[args.linear].latent_activation or KINDS[args.linear].latent_crossing:
        raise ValueError(
            f"a {args.linear!r} model has σ inside its bottlenecks and no dense (LLaMA) equivalent"
        )
    sd = multiply_factors(_standalone_state_dict(model), args)
    if args.tie_embeddings:
        sd["output.weight"] = sd["tok_embeddings.weight"]
    return build_model(dataclasses.replace(args, linear="full"), sd)


def _standalone_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Per-projection state dict as standalone contiguous tensors (safetensors refuses shared storage)."""
    sd = to_ungrouped(model.state_dict(), model.model_args)
    if model.model_args.tie_embeddings:
        sd.pop("output.weight")
    return {k: v.detach().cpu().contiguous().clone() for k, v in sd.items()}


def _dense_to_hf(sd: dict[str, torch.Tensor], args: ModelArgs) -> dict[str, torch.Tensor]:
    """BOOST dense (per-projection) names -> HF tensor names, q/k rows in HF's half-split RoPE order."""
    hf = {"model.embed_tokens.weight": sd["tok_embeddings.weight"], "model.norm.weight": sd["norm.weight"]}
    if not args.tie_embeddings:
        hf["lm_head.weight"] = sd["output.weight"]
    for i in range(args.n_layers):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        for ours, theirs in PROJECTIONS.items():
            hf[f"{dst}{theirs}.weight"] = sd[f"{src}{ours}.weight"]
        for ours, theirs in NORMS.items():
            hf[f"{dst}{theirs}.weight"] = sd[f"{src}{ours}.weight"]
        q, k = f"{dst}self_attn.q_proj.weight", f"{dst}self_attn.k_proj.weight"
        hf[q] = to_hf_rows(hf[q], args.n_heads).contiguous()
        hf[k] = to_hf_rows(hf[k], args.kv_heads).contiguous()
    return hf

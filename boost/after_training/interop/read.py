"""A transformers folder read strictly and built into a ``boost.Transformer``.

Two layouts are read: a Hugging Face LLaMA checkpoint (``config.json`` + ``model.safetensors`` or
shards with ``model.safetensors.index.json``; safetensors only, so no pickle is ever loaded), and a
folder ``save_hf`` wrote (``config.json`` with a ``boost`` section holding the ``ModelArgs``). Every
refusal names the file, the field or tensor, and what would make it readable.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import torch
from safetensors.torch import load_file

from boost.after_training.hf_folder import MODEL_TYPE, NORMS, PROJECTIONS, from_hf_rows, lowrank_from_hf
from boost.after_training.interop.factorize import (
    Report,
    factorize_projections,
    format_report,
    initial_crossings,
)
from boost.training.model.args import ModelArgs
from boost.training.model.grouped_state import to_grouped, to_ungrouped
from boost.training.model.model import Transformer, rope_cache
from boost.training.rules import KINDS, LINEAR_KINDS, rank_problem

logger = logging.getLogger(__name__)


def load_hf(
    path: str | Path,
    linear: str | None = None,
    rank: int | None = None,
    group_linears: bool | None = None,
) -> Transformer:
    """A ``boost.Transformer`` from a Hugging Face LLaMA folder or a folder written by ``save_hf``.

    Args:
        path: folder with ``config.json`` and safetensors weights.
        linear: ``"full"`` (default for HF checkpoints: the weights as they are), ``"svd"``, ``"cola"``
            or ``"lax"`` (truncated-SVD factors; ``boost.after_training.interop.factorize`` says which are exact).
            For a BOOST-format folder the saved kind is used, and another one is refused.
        rank: bottleneck rank of the low-rank kinds; default ``hidden_size // 4``. For a BOOST-format
            folder the saved rank is used, and another one is refused.
        group_linears: group q/k/v and gate/up (BOOST's layout); default True for HF checkpoints and
            the saved layout for BOOST ones. The weights are the same either way.

    The per-layer factorisation errors are kept on ``model.import_report``.
    """
    model, report = load_hf_with_report(path, linear, rank, group_linears)
    model.import_report = report
    return model


def load_hf_with_report(
    path: str | Path,
    linear: str | None = None,
    rank: int | None = None,
    group_linears: bool | None = None,
) -> tuple[Transformer, Report]:
    """``load_hf`` that also returns ``{layer: {"wq": rel_err, ..., "w2": rel_err}}``.

    The report is empty where nothing is factored (a dense import, or a folder ``save_hf`` wrote).
    """
    path = Path(path)
    config = read_config(path)
    if "boost" in config:
        return _load_boost_folder(path, config, linear, rank, group_linears), {}
    linear = linear or "full"
    if linear not in LINEAR_KINDS:
        raise ValueError(f"linear = {linear!r} is unknown; choose one of {LINEAR_KINDS}")
    if rank is not None and not KINDS[linear].low_rank:
        # a dense import has no bottleneck: the rank would be dropped unsaid
        raise ValueError(
            f"rank {rank} applies to a low-rank import, and this one is {linear!r}: choose linear svd, cola or "
            "lax (the CLI's --linear), or leave the rank out"
        )
    grouped = True if group_linears is None else group_linears
    args = args_from_hf_config(config, linear, rank, grouped, source=str(path / "config.json"))
    hf = read_weights(path)
    expected = _expected_hf_shapes(args)
    missing = sorted(k for k in expected if k not in hf)
    if missing:
        raise KeyError(f"{path}: the checkpoint lacks {len(missing)} LLaMA tensor(s), e.g. {missing[:3]}")
    for name, shape in expected.items():
        if tuple(hf[name].shape) != shape:
            raise ValueError(
                f"{path}: tensor {name} has shape {tuple(hf[name].shape)}, config.json implies {shape}; "
                "the weights and config.json come from different models"
            )
    dense = _dense_from_hf(hf, args)
    if not args.low_rank:
        return build_model(args, dense, str(path)), {}
    sd, report = factorize_projections(dense, args)
    sd.update(initial_crossings(args, seed=args.init_seed or 0))
    logger.info(
        "rank-%d %s import of %s, relative Frobenius error:\n%s",
        args.rank,
        linear,
        path,
        format_report(report),
    )
    return build_model(args, sd), report


def args_from_hf_config(
    config: dict,
    linear: str = "full",
    rank: int | None = None,
    group_linears: bool = True,
    source: str = "config.json",
) -> ModelArgs:
    """``ModelArgs`` for a ``LlamaConfig`` dict; ``ValueError`` names a field BOOST cannot honour."""

    def unsupported(field: str, why: str) -> None:
        raise ValueError(f"{source}: {field} = {config.get(field)!r} {why}")

    if config.get("model_type") != "llama":
        unsupported("model_type", "is not supported; only LLaMA checkpoints ('llama') are read")
    for field in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
    ):
        if field not in config:
            raise ValueError(f"{source}: required field {field!r} is missing")
    if config.get("hidden_act", "silu") != "silu":
        unsupported("hidden_act", "is not supported; BOOST's MLP is SwiGLU (silu)")
    for field in ("attention_bias", "mlp_bias"):
        if config.get(field, False):
            unsupported(field, "is not supported; BOOST's projections have no bias")
    # transformers < 5 writes rope_theta + rope_scaling, >= 5 writes rope_parameters; configs older
    # than transformers 4.43 name the scaling's kind "type" (transformers still reads them so).
    rope = config.get("rope_parameters") or {}
    for field, value in (("rope_scaling", config.get("rope_scaling") or {}), ("rope_parameters", rope)):
        if value.get("rope_type", value.get("type", "default")) != "default":
            unsupported(field, "is not supported; BOOST implements plain RoPE only")
    dim, n_heads = config["hidden_size"], config["num_attention_heads"]
    if config.get("head_dim") not in (None, dim // n_heads):
        unsupported(
            "head_dim",
            f"is not supported; BOOST needs head_dim = hidden_size / num_attention_heads = {dim // n_heads}",
        )
    args = ModelArgs(
        dim=dim,
        n_layers=config["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=config.get("num_key_value_heads") or n_heads,
        vocab_size=config["vocab_size"],
        ffn_dim=config["intermediate_size"],
        norm_eps=config.get("rms_norm_eps", 1e-6),
        rope_theta=float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
        # the whole context: the RoPE table is 8·head_dim bytes a position (64 MiB at LLaMA 3's 131072)
        max_seq_len=config.get("max_position_embeddings", 2048),
        linear=linear,
        rank=dim // 4 if rank is None else rank,
        group_linears=group_linears,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
    )
    problem = (
        rank_problem(args.rank, dim, args.kv_heads * args.head_dim, args.ffn_dim) if args.low_rank else None
    )
    if problem is not None:
        said = "the default hidden_size // 4" if rank is None else "given"
        fix = "pass a positive rank" if args.rank < 1 else "pass a smaller rank"
        raise ValueError(f"{source}: rank {args.rank} ({said}) {problem}: {fix} (the CLI's --rank)")
    args.check()
    return args


def build_model(
    args: ModelArgs, state_dict: dict[str, torch.Tensor], source: str = "the checkpoint"
) -> Transformer:
    """A model holding exactly ``state_dict`` (per-projection names), without random initialisation."""
    with torch.device("meta"):
        model = Transformer(args)
    expected = {k: tuple(v.shape) for k, v in to_ungrouped(model.state_dict(), args).items()}
    for name, shape in expected.items():
        if name in state_dict and tuple(state_dict[name].shape) != shape:
            raise ValueError(
                f"{source}: tensor {name} has shape {tuple(state_dict[name].shape)}, "
                f"config.json implies {shape}; the weights and config.json come from different models"
            )
    dtype = torch.get_default_dtype()
    sd = {k: v.to(dtype).contiguous() for k, v in to_grouped(state_dict, args).items()}
    if args.tie_embeddings:
        sd["output.weight"] = sd["tok_embeddings.weight"]
    model.load_state_dict(sd, strict=True, assign=True)
    if args.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight
    model.rope = rope_cache(args.head_dim, args.max_seq_len, args.rope_theta)
    return model


def read_config(path: Path) -> dict:
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{config_path} not found: a Hugging Face checkpoint folder needs config.json"
        )
    return _read_json(config_path)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder: ``model.safetensors``, or the shards its index names."""
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        return _load_safetensors(single)
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index} has no weight_map object")
        weights: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            weights.update(_load_safetensors(path / shard))
        return weights
    hint = (
        " (pickle checkpoints are not read; re-save with safe_serialization=True)"
        if any(path.glob("*.bin"))
        else ""
    )
    raise FileNotFoundError(f"{path} has neither model.safetensors nor model.safetensors.index.json{hint}")


def _read_json(file: Path) -> dict:
    try:
        content = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{file} is not valid JSON ({e}); restore it from the exported folder") from None
    if not isinstance(content, dict):
        raise ValueError(f"{file} holds a JSON {type(content).__name__}, not an object")
    return content


def _load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found (named by the folder's safetensors index)")
    try:
        return load_file(file)
    except Exception as e:  # safetensors raises its own SafetensorError (and OSError) on bad bytes
        raise ValueError(
            f"{file} is not a readable safetensors file ({type(e).__name__}: {e}); "
            "it is truncated or corrupt: copy or export it again"
        ) from None


def _expected_hf_shapes(args: ModelArgs) -> dict[str, tuple[int, ...]]:
    d, f, q, kv = args.dim, args.ffn_dim, args.n_heads * args.head_dim, args.kv_heads * args.head_dim
    shapes = {"model.embed_tokens.weight": (args.vocab_size, d), "model.norm.weight": (d,)}
    if not args.tie_embeddings:
        shapes["lm_head.weight"] = (args.vocab_size, d)
    per_layer = {
        "self_attn.q_proj": (q, d), "self_attn.k_proj": (kv, d), "self_attn.v_proj": (kv, d),
        "self_attn.o_proj": (d, q), "mlp.gate_proj": (f, d), "mlp.up_proj": (f, d), "mlp.down_proj": (d, f),
        "input_layernorm": (d,), "post_attention_layernorm": (d,),
    }  # fmt: skip
    for i in range(args.n_layers):
        shapes.update({f"model.layers.{i}.{m}.weight": shape for m, shape in per_layer.items()})
    return shapes


def _dense_from_hf(hf: dict[str, torch.Tensor], args: ModelArgs) -> dict[str, torch.Tensor]:
    """HF tensor names -> BOOST dense (per-projection) names, q/k rows back to interleaved RoPE."""
    sd = {"tok_embeddings.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"]}
    # A tied checkpoint stores the embedding only.
    sd["output.weight"] = hf["model.embed_tokens.weight"] if args.tie_embeddings else hf["lm_head.weight"]
    for i in range(args.n_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        for ours, theirs in PROJECTIONS.items():
            sd[f"{dst}{ours}.weight"] = hf[f"{src}{theirs}.weight"]
        sd[f"{dst}attention.wq.weight"] = from_hf_rows(sd[f"{dst}attention.wq.weight"], args.n_heads)
        sd[f"{dst}attention.wk.weight"] = from_hf_rows(sd[f"{dst}attention.wk.weight"], args.kv_heads)
        for ours, theirs in NORMS.items():
            sd[f"{dst}{ours}.weight"] = hf[f"{src}{theirs}.weight"]
    return sd


def _load_boost_folder(
    path: Path, config: dict, linear: str | None, rank: int | None, group_linears: bool | None
) -> Transformer:
    """A folder ``save_hf`` wrote: the ``ModelArgs`` it saved, its kind kept."""
    saved = config["boost"]
    fields = {f.name for f in dataclasses.fields(ModelArgs)}
    unknown = set(saved) - fields
    if unknown:
        raise ValueError(f"{path / 'config.json'}: boost section has unknown field(s) {sorted(unknown)}")
    args = ModelArgs(**saved)
    if linear is not None and linear != args.linear:
        raise ValueError(
            f"{path} holds a {args.linear!r} model; it cannot be loaded as {linear!r} "
            "(import the dense checkpoint instead)"
        )
    if rank is not None and rank != args.rank:
        raise ValueError(
            f"{path} holds a rank-{args.rank} model; it cannot be loaded at rank {rank} "
            "(leave the rank out, or import the dense checkpoint at that rank)"
        )
    if group_linears is not None:
        args.group_linears = group_linears
    args.check()
    weights = read_weights(path)
    if config.get("model_type") == MODEL_TYPE:  # an exported folder: LLaMA names, half-split q/k rows
        weights = lowrank_from_hf(weights, args, str(path))
    return build_model(args, weights, str(path))

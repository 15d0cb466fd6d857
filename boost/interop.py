"""Hugging Face LLaMA checkpoints in and out of BOOST.

``load_hf`` reads a folder as ``transformers`` saves it (``config.json`` + ``model.safetensors`` or
shards with ``model.safetensors.index.json``; safetensors only, so no pickle is ever loaded) and
builds a ``boost.Transformer`` of any linear kind. ``save_hf`` writes the dense kind back as a LLaMA
checkpoint that ``LlamaForCausalLM.from_pretrained`` loads, and the low-rank kinds as a folder with
BOOST's modeling code that ``AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)``
loads (``boost.hf_folder``); ``load_hf`` reloads either bit for bit.

RoPE. BOOST (like Meta and torchtitan) rotates *interleaved* pairs ``(x[2j], x[2j+1])``; Hugging Face
rotates *halves* ``(x[j], x[j + head_dim/2])``. HF's ``convert_llama_weights_to_hf.py`` reorders the
rows of ``wq`` and ``wk`` per head so that the two conventions give the same attention scores::

    permute(w, n_heads, d1, d2) = w.view(n_heads, d1 // n_heads // 2, 2, d2).transpose(1, 2).reshape(d1, d2)

``from_hf_rows`` (``boost.hf_folder``) is its inverse (``view(n_heads, 2, d1 // n_heads // 2, d2)``), applied with the query
heads to ``q_proj`` and with the key/value heads to ``k_proj``. Both are pure row shuffles: exact.

Low-rank import: each projection ``W ≈ U_r S_r V_rᵀ`` (truncated SVD in float64) becomes
``A = √S_r V_rᵀ`` (``down``, ``[r, d_in]``) and ``B = U_r √S_r`` (``up``, ``[d_out, r]``). The relative
Frobenius error ``‖W − BA‖ / ‖W‖`` of every layer and projection is logged and returned. The ``svd``
kind computes ``B·A·x`` and keeps SwiGLU, so it reproduces the dense model wherever the weights have
rank ≤ r. The ``cola`` and ``lax`` kinds put σ between A and B and drop the gate's SiLU (``lax`` also
adds the previous block's latent): their import is an approximation and a starting point for
training, not the same function.

CLI::

    python -m boost.interop import HF_DIR --linear cola --rank 64 --out OUT_DIR
    python -m boost.interop export --config train_configs/debug.toml --out HF_DIR   # a run's newest checkpoint
    python -m boost.interop export BOOST_DIR --out HF_DIR [--densify]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from boost.hf_folder import (
    MODEL_TYPE, NORMS, PROJECTIONS, from_hf_rows, llama_config, lowrank_config, lowrank_from_hf, lowrank_to_hf,
    to_hf_rows, write_remote_code, write_tokenizer,
)  # fmt: skip
from boost.model.args import ModelArgs
from boost.rules import KINDS, LINEAR_KINDS
from boost.model.model import Transformer, rope_cache
from boost.model.grouped_state import to_grouped, to_ungrouped

logger = logging.getLogger(__name__)

__all__ = ["load_hf", "load_hf_with_report", "save_hf", "densify", "args_from_hf_config"]

# The RoPE table is materialised up to max_seq_len; LLaMA 3's 131072 positions would cost ~64 MB
# per model for lengths nobody here trains on.
MAX_ROPE_POSITIONS = 4096



# ---------------------------------------------------------------------------------------------
# Reading


def _read_config(path: Path) -> dict:
    config_path = path / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: a Hugging Face checkpoint folder needs config.json")
    return _read_json(config_path)


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
            f"{file} is not a readable safetensors file ({type(e).__name__}: {e}); it is truncated or corrupt: "
            "copy or export it again"
        ) from None


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
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
    hint = " (pickle checkpoints are not read; re-save with safe_serialization=True)" if any(path.glob("*.bin")) else ""
    raise FileNotFoundError(f"{path} has neither model.safetensors nor model.safetensors.index.json{hint}")


def args_from_hf_config(
    config: dict, linear: str = "full", rank: int | None = None, group_linears: bool = True, source: str = "config.json"
) -> ModelArgs:
    """``ModelArgs`` for a Hugging Face ``LlamaConfig`` dict; ``ValueError`` naming the field it cannot honour."""

    def refuse(field: str, why: str):
        raise ValueError(f"{source}: {field} = {config.get(field)!r} {why}")

    if config.get("model_type") != "llama":
        refuse("model_type", "is not supported; only LLaMA checkpoints ('llama') are read")
    for field in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        if field not in config:
            raise ValueError(f"{source}: required field {field!r} is missing")
    if config.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "is not supported; BOOST's MLP is SwiGLU (silu)")
    for field in ("attention_bias", "mlp_bias"):
        if config.get(field, False):
            refuse(field, "is not supported; BOOST's projections have no bias")
    # transformers < 5 writes rope_theta + rope_scaling, >= 5 writes rope_parameters.
    rope = config.get("rope_parameters") or {}
    if config.get("rope_scaling") and config["rope_scaling"].get("rope_type", "default") != "default":
        refuse("rope_scaling", "is not supported; BOOST implements plain RoPE only")
    if rope.get("rope_type", "default") != "default":
        refuse("rope_parameters", "is not supported; BOOST implements plain RoPE only")
    dim, n_heads = config["hidden_size"], config["num_attention_heads"]
    if config.get("head_dim") not in (None, dim // n_heads):
        refuse("head_dim", f"is not supported; BOOST needs head_dim = hidden_size / num_attention_heads = {dim // n_heads}")
    args = ModelArgs(
        dim=dim,
        n_layers=config["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=config.get("num_key_value_heads") or n_heads,
        vocab_size=config["vocab_size"],
        ffn_dim=config["intermediate_size"],
        norm_eps=config.get("rms_norm_eps", 1e-6),
        rope_theta=float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
        max_seq_len=min(config.get("max_position_embeddings", 2048), MAX_ROPE_POSITIONS),
        linear=linear,
        rank=dim // 4 if rank is None else rank,
        group_linears=group_linears,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
    )
    args.check()
    return args


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


def factorize(w: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(A [rank, d_in], B [d_out, rank], ‖W − BA‖_F / ‖W‖_F)`` from a truncated SVD in float64.

    A rank above ``min(d_out, d_in)`` pads A and B with zeros (BA is then W itself).
    """
    u, s, vh = torch.linalg.svd(w.double(), full_matrices=False)
    k = min(rank, s.numel())
    root = s[:k].sqrt()
    a = w.new_zeros((rank, w.shape[1]), dtype=torch.float64)
    b = w.new_zeros((w.shape[0], rank), dtype=torch.float64)
    a[:k] = root[:, None] * vh[:k]
    b[:, :k] = u[:, :k] * root
    total = s.square().sum()
    err = (s[k:].square().sum() / total).sqrt().item() if total > 0 else 0.0
    return a, b, err


def _build(args: ModelArgs, state_dict: dict[str, torch.Tensor], source: str = "the checkpoint") -> Transformer:
    """A model holding exactly ``state_dict`` (per-projection names), without random initialisation."""
    with torch.device("meta"):
        model = Transformer(args)
    expected = {k: tuple(v.shape) for k, v in to_ungrouped(model.state_dict(), args).items()}
    for name, shape in expected.items():
        if name in state_dict and tuple(state_dict[name].shape) != shape:
            raise ValueError(
                f"{source}: tensor {name} has shape {tuple(state_dict[name].shape)}, config.json implies {shape}; "
                "the weights and config.json come from different models"
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


def load_hf_with_report(
    path: str | Path,
    linear: str | None = None,
    rank: int | None = None,
    group_linears: bool | None = None,
) -> tuple[Transformer, dict[int, dict[str, float]]]:
    """``load_hf`` that also returns ``{layer: {"wq": rel_err, ..., "w2": rel_err}}`` (empty if nothing was factored)."""
    path = Path(path)
    config = _read_config(path)
    if "boost" in config:
        return _load_boost(path, config, linear, group_linears), {}
    linear = linear or "full"
    if linear not in LINEAR_KINDS:
        raise ValueError(f"linear = {linear!r} is unknown; choose one of {LINEAR_KINDS}")
    args = args_from_hf_config(
        config, linear, rank, True if group_linears is None else group_linears, source=str(path / "config.json")
    )
    hf = _read_weights(path)
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
        return _build(args, dense, str(path)), {}

    report: dict[int, dict[str, float]] = {}
    sd = {k: v for k, v in dense.items() if not k.endswith(tuple(f"{p}.weight" for p in PROJECTIONS))}
    for i in range(args.n_layers):
        report[i] = {}
        for name in PROJECTIONS:
            a, b, err = factorize(dense[f"layers.{i}.{name}.weight"], args.rank)
            sd[f"layers.{i}.{name}.down.weight"], sd[f"layers.{i}.{name}.up.0.weight"] = a, b
            report[i][name.split(".")[1]] = err
    logger.info("rank-%d %s import of %s, relative Frobenius error:\n%s", args.rank, linear, path, format_report(report))
    return _build(args, sd), report


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
            or ``"lax"`` (truncated-SVD factors; see the module docstring for which are exact).
            For a BOOST-format folder the saved kind is used, and another one is refused.
        rank: bottleneck rank of the low-rank kinds; default ``hidden_size // 4``.
        group_linears: group q/k/v and gate/up (BOOST's layout); default True for HF checkpoints and
            the saved layout for BOOST ones. The weights are the same either way.

    The per-layer factorisation errors are kept on ``model.import_report``.
    """
    model, report = load_hf_with_report(path, linear, rank, group_linears)
    model.import_report = report
    return model


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


def _load_boost(path: Path, config: dict, linear: str | None, group_linears: bool | None) -> Transformer:
    saved = config["boost"]
    fields = {f.name for f in dataclasses.fields(ModelArgs)}
    unknown = set(saved) - fields
    if unknown:
        raise ValueError(f"{path / 'config.json'}: boost section has unknown field(s) {sorted(unknown)}")
    args = ModelArgs(**saved)
    if linear is not None and linear != args.linear:
        raise ValueError(
            f"{path} holds a {args.linear!r} model; it cannot be loaded as {linear!r} (import the dense checkpoint instead)"
        )
    if group_linears is not None:
        args.group_linears = group_linears
    args.check()
    weights = _read_weights(path)
    if config.get("model_type") == MODEL_TYPE:  # an exported folder: LLaMA names, half-split q/k rows
        weights = lowrank_from_hf(weights, args, str(path))
    return _build(args, weights, str(path))


# ---------------------------------------------------------------------------------------------
# Writing


def _plain(model: Transformer) -> dict[str, torch.Tensor]:
    """Per-projection state dict as standalone contiguous tensors (safetensors refuses shared storage)."""
    sd = to_ungrouped(model.state_dict(), model.model_args)
    if model.model_args.tie_embeddings:
        sd.pop("output.weight")
    return {k: v.detach().cpu().contiguous().clone() for k, v in sd.items()}


def save_hf(model: Transformer, path: str | Path, tokenizer_dir: str | Path | None = None) -> None:
    """Write ``model`` to folder ``path`` for transformers, with the tokenizer of ``tokenizer_dir`` if given.

    Dense kind: a Hugging Face LLaMA checkpoint (``config.json`` + ``model.safetensors``, q/k rows in
    HF's half-split RoPE order) for ``LlamaForCausalLM.from_pretrained``. Low-rank kinds: the same
    layout with each projection's two factors, BOOST's modeling code and ``auto_map`` (``boost.hf_folder``),
    for ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)``. ``load_hf`` reloads
    either exactly. ``densify`` turns an ``svd`` model into a dense one first if plain LLaMA is wanted.

    Example::

        >>> save_hf(model, "hf_out", tokenizer_dir="~/.cache/boost/tokenizer-stdlib-v2048-...")
        >>> AutoModelForCausalLM.from_pretrained("hf_out", trust_remote_code=True)
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--out {path} is an existing file; give a folder path")
    path.mkdir(parents=True, exist_ok=True)
    args = model.model_args
    sd = _plain(model)
    dtype = sd["tok_embeddings.weight"].dtype
    bos_id = eos_id = None
    if tokenizer_dir is not None:
        bos_id, eos_id = write_tokenizer(tokenizer_dir, path, args.max_seq_len)
    if args.low_rank:
        sd, config = lowrank_to_hf(sd, args), lowrank_config(args, dtype, bos_id, eos_id)
        write_remote_code(path)
    else:
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
        sd, config = hf, llama_config(args, dtype, bos_id, eos_id)
    save_file(sd, path / "model.safetensors", metadata={"format": "pt"})
    with open(path / "config.json", "w") as f:
        json.dump(config, f, indent=2)
    logger.info("saved %s %s model to %s", "BoostForCausalLM" if args.low_rank else "LLaMA", args.linear, path)


@torch.no_grad()
def densify(model: Transformer) -> Transformer:
    """The dense model computing the same function as an ``svd`` model (each W = B·A), or itself if dense.

    ``cola``/``lax`` have σ inside the bottleneck and have no dense equivalent: ``ValueError``.
    """
    args = model.model_args
    if not args.low_rank:
        return model
    if KINDS[args.linear].latent_activation or KINDS[args.linear].latent_crossing:
        raise ValueError(f"a {args.linear!r} model has σ inside its bottlenecks and no dense (LLaMA) equivalent")
    sd = _plain(model)
    for i in range(args.n_layers):
        for name in PROJECTIONS:
            a = sd.pop(f"layers.{i}.{name}.down.weight")
            b = sd.pop(f"layers.{i}.{name}.up.0.weight")
            sd[f"layers.{i}.{name}.weight"] = (b.double() @ a.double()).to(a.dtype)
    if args.tie_embeddings:
        sd["output.weight"] = sd["tok_embeddings.weight"]
    return _build(dataclasses.replace(args, linear="full"), sd)


def format_report(report: dict[int, dict[str, float]]) -> str:
    """The per-layer, per-projection relative errors as a text table."""
    if not report:
        return "(no projection was factored)"
    names = list(next(iter(report.values())))
    lines = ["layer " + " ".join(f"{n:>8}" for n in names)]
    lines += [f"{i:>5} " + " ".join(f"{row[n]:8.4f}" for n in names) for i, row in report.items()]
    mean = sum(sum(row.values()) for row in report.values()) / (len(report) * len(names))
    lines.append(f"mean {mean:.4f}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# CLI


def _export_source(ns) -> tuple[Transformer, Path | None]:
    """The model to export and its tokenizer folder: a run's DCP checkpoint (``--config``) or a folder."""
    if ns.config is not None:
        from boost.trained_run import load_run

        run = load_run(ns.config, ns.source, ns.tokenizer)
        return run.model, run.tokenizer.folder
    if ns.source is None:
        raise ValueError("export needs a source folder, or --config TOML for a run's newest checkpoint")
    source = Path(ns.source)
    if (source / ".metadata").is_file():
        raise ValueError(f"{source} is a DCP checkpoint: add --config with the TOML of the run that wrote it")
    tokenizer = ns.tokenizer or (source if (source / "tokenizer.json").is_file() else None)
    return load_hf(source), tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m boost.interop", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="Hugging Face LLaMA folder -> BOOST folder (prints the factorisation errors)")
    imp.add_argument("hf_dir")
    imp.add_argument("--linear", choices=LINEAR_KINDS, default="full")
    imp.add_argument("--rank", type=int, default=None, help="bottleneck rank (default hidden_size // 4)")
    imp.add_argument("--out", required=True)
    exp = sub.add_parser(
        "export", help="a run's DCP checkpoint or a BOOST folder -> transformers folder (any kind, with tokenizer)"
    )
    exp.add_argument("source", nargs="?", help="folder (BOOST/transformers), or with --config a step-N folder or step")
    exp.add_argument("--config", default=None, help="the run's TOML: export its newest (or the given) checkpoint")
    exp.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the run's / the source folder's)")
    exp.add_argument("--densify", action="store_true", help="svd only: write plain LlamaForCausalLM (W = B·A)")
    exp.add_argument("--out", required=True)
    ns = parser.parse_args(argv)
    from boost.trained_run import RunError

    try:
        if Path(ns.out).exists() and not Path(ns.out).is_dir():  # refused before any work
            raise FileExistsError(f"--out {ns.out} is an existing file; give a folder path")
        if ns.command == "import":
            model, report = load_hf_with_report(ns.hf_dir, ns.linear, ns.rank)
            if model.model_args.low_rank:
                print(f"rank-{model.model_args.rank} {ns.linear} import, relative Frobenius error ‖W − BA‖/‖W‖:")
                print(format_report(report))
            save_hf(model, ns.out)
        else:
            model, tokenizer = _export_source(ns)
            save_hf(densify(model) if ns.densify else model, ns.out, tokenizer)
    except (FileNotFoundError, FileExistsError, KeyError, ValueError, RunError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())

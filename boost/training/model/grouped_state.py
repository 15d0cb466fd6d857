"""Map state dicts between grouped and per-projection (ungrouped) BOOST models.

Per-projection names are those of a model built with ``group_linears = False``:
``layers.{i}.attention.wq.down.weight``, ``...wq.up.0.weight``, ``layers.{i}.attention_norm.weight``.
The grouped model stores ``attention.wqkv`` (q/k/v) and ``feed_forward.w13`` (gate/up): one down
factor ``[Σ r, d]`` with the members' rows stacked, up factors batched ``[G, d_out, r]`` where the
members' shapes are equal, and the pre-norm inside (``wqkv.norm.weight``). A LaX crossing's norm and gate
hold one entry per member along dim 0 (``wqkv.latent.norm_weight [3, r]``, ``wq.latent.norm_weight [1, r]``).

Example::

    >>> import dataclasses
    >>> from boost.training.model import ModelArgs, Transformer
    >>> grouped = Transformer(ModelArgs.from_flavor("debug", vocab_size=512))
    >>> flat = to_ungrouped(grouped.state_dict(), grouped.model_args)
    >>> Transformer(dataclasses.replace(grouped.model_args, group_linears=False)).load_state_dict(flat)
    <All keys matched successfully>
"""

from __future__ import annotations

import torch

from boost.training.model.args import ModelArgs
from boost.training.model.linears import BatchedUp, make_grouped

# grouped module -> (per-projection module names in member order, the pre-norm it absorbed)
GROUPS = {
    "attention.wqkv": (("attention.wq", "attention.wk", "attention.wv"), "attention_norm"),
    "feed_forward.w13": (("feed_forward.w1", "feed_forward.w3"), "ffn_norm"),
}


def _layouts(args: ModelArgs) -> dict:
    q_dim, kv_dim = args.n_heads * args.head_dim, args.kv_heads * args.head_dim
    outs = {
        "attention.wqkv": [("q", q_dim), ("k", kv_dim), ("v", kv_dim)],
        "feed_forward.w13": [("gate", args.ffn_dim), ("up", args.ffn_dim)],
    }
    with torch.device("meta"):
        return {name: make_grouped(args, args.dim, o) for name, o in outs.items()}


def to_ungrouped(state_dict: dict[str, torch.Tensor], args: ModelArgs) -> dict[str, torch.Tensor]:
    """Grouped names -> per-projection names (tensors are split views; nothing is copied)."""
    if not args.grouped:
        return dict(state_dict)
    out = dict(state_dict)
    for i in range(args.n_layers):
        for gname, module in _layouts(args).items():
            targets, norm = GROUPS[gname]
            g = f"layers.{i}.{gname}"
            downs = out.pop(f"{g}.down.weight").split(module.ranks, dim=0)
            for target, a in zip(targets, downs):
                out[f"layers.{i}.{target}.down.weight"] = a
            for j, (unit, group) in enumerate(zip(module.up, module.up_groups)):
                w = out.pop(f"{g}.up.{j}.weight")
                for k, m in enumerate(group):
                    out[f"layers.{i}.{targets[m]}.up.0.weight"] = w[k] if isinstance(unit, BatchedUp) else w
            out[f"layers.{i}.{norm}.weight"] = out.pop(f"{g}.norm.weight")
            for name in _crossing_names(out, g):  # LaX: each member's norm and gate, along dim 0
                for target, part in zip(targets, out.pop(f"{g}.latent.{name}").split(1, dim=0)):
                    out[f"layers.{i}.{target}.latent.{name}"] = part
    return out


def _crossing_names(state_dict: dict[str, torch.Tensor], module: str) -> list[str]:
    """The LaX crossing's parameter names under ``module`` (none for other kinds and LaX's block 0)."""
    prefix = f"{module}.latent."
    return [k.removeprefix(prefix) for k in state_dict if k.startswith(prefix)]


def to_grouped(state_dict: dict[str, torch.Tensor], args: ModelArgs) -> dict[str, torch.Tensor]:
    """Per-projection names -> grouped names (the inverse of ``to_ungrouped``)."""
    if not args.grouped:
        return dict(state_dict)
    out = dict(state_dict)
    for i in range(args.n_layers):
        for gname, module in _layouts(args).items():
            targets, norm = GROUPS[gname]
            g = f"layers.{i}.{gname}"
            out[f"{g}.down.weight"] = torch.cat([out.pop(f"layers.{i}.{t}.down.weight") for t in targets])
            ups = {m: out.pop(f"layers.{i}.{t}.up.0.weight") for m, t in enumerate(targets)}
            for j, (unit, group) in enumerate(zip(module.up, module.up_groups)):
                out[f"{g}.up.{j}.weight"] = (
                    torch.stack([ups[m] for m in group]) if isinstance(unit, BatchedUp) else ups[group[0]]
                )
            out[f"{g}.norm.weight"] = out.pop(f"layers.{i}.{norm}.weight")
            for name in _crossing_names(out, f"layers.{i}.{targets[0]}"):
                out[f"{g}.latent.{name}"] = torch.cat(
                    [out.pop(f"layers.{i}.{t}.latent.{name}") for t in targets]
                )
    return out

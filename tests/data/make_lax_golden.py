"""Make tests/data/lax_golden.pt: chains of LaX projections computed by the LaX authors' own module, in
float64, forward and gradients, for each gate (tensorized, linear, none). Nothing of BOOST is imported here.

The authors' code is a ViT (github K1seki221/Latent_Crossing, commit c892d2c): each projection is a
``TensorizedLinear`` (``vits_pretraining/timm/models/lax_vit.py``) that takes the previous block's latent of
the same projection (``res_former``) and returns its own. With two cores and their CoLA+LaX switches
(``config/Lax_CoLA_vit_base_16_224.yaml``: InterRes, InterResGate, TenserizedGate, LatentAct; the first
block with all crossing switches off, as their ``Block(first=True)`` does), a chain of such projections is
what one LaX projection (q, k, v, o, gate, up or down) sees over depth. Here: 4 projections d → d, each
one's output added to its input (a residual stream), the latent carried from each to the next.

Run once, with the authors' repository checked out:

    git clone https://github.com/K1seki221/Latent_Crossing /tmp/Latent_Crossing   # commit c892d2c
    python tests/data/make_lax_golden.py /tmp/Latent_Crossing

Their ``TensorizedLinear``, ``most_balanced_factor_pair`` and ``validate_tt_rank`` are read from their files
and executed as written; the files' other imports (timm, yaml, tensorly), which these three do not use,
are not loaded. The output records the commit, the command and the shapes (``meta``).
"""

from __future__ import annotations

import ast
import datetime
import sys
import warnings
from pathlib import Path

import numpy as np
import sympy
import torch
import torch.nn.functional as F
from torch import nn

COMMIT = "c892d2c"
SHAPE = dict(dim=24, rank=8, depth=4, tokens=(2, 5))  # rank 8 = 2 × 4: the tensorized gate's factors differ
GATES = {  # BOOST's boost.lax_gate -> the authors' switches on blocks ≥ 1
    "tensorized": dict(InterResGate=True, TenserizedGate=True),
    "linear": dict(InterResGate=True, TenserizedGate=False),
    "none": dict(InterResGate=False, TenserizedGate=False),
}


def _load(path: Path, names: set[str], namespace: dict) -> None:
    """Execute the top-level definitions ``names`` of the file at ``path`` in ``namespace``."""
    tree = ast.parse(path.read_text())
    picked = [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign)) and _name(n) in names
    ]
    missing = names - {_name(n) for n in picked}
    if missing:
        raise SystemExit(f"{path}: no {sorted(missing)}")
    exec(compile(ast.Module(body=picked, type_ignores=[]), str(path), "exec"), namespace)


def _name(node) -> str:
    return node.targets[0].id if isinstance(node, ast.Assign) else node.name


def authors_module(checkout: Path):
    models = checkout / "vits_pretraining" / "timm" / "models"
    namespace = {"torch": torch, "nn": nn, "F": F, "np": np, "sympy": sympy, "warnings": warnings,
                 "contract": torch.einsum, "Tuple": tuple, "List": list, "Union": object}  # fmt: skip
    _load(models / "tensor_decomp.py", {"validate_tt_rank"}, namespace)
    _load(models / "lax_vit.py", {"einsum_patterns_4cores", "einsum_patterns_6cores", "most_balanced_factor_pair",
                                  "TensorizedLinear"}, namespace)  # fmt: skip
    return namespace["TensorizedLinear"]


def chain(tensorized_linear, gate: str) -> list[nn.Module]:
    d, r = SHAPE["dim"], SHAPE["rank"]
    blocks = []
    for layer in range(SHAPE["depth"]):
        switches = GATES[gate] if layer else dict(InterResGate=False, TenserizedGate=False)
        blocks.append(tensorized_linear(indim=d, outdim=d, middim=[d, d], rank=r, InputShape=[d], activation="SiLU",
                                        InterRes=layer > 0, IntraRes=False, IntraResGate=False, LatentAct=True,
                                        bn=False, fact=False, bias=False, **switches).double())  # fmt: skip
    with torch.no_grad():  # the norms start at one and zero: give them a draw of their own, so they matter
        for block in blocks:
            if hasattr(block, "res_layernorm"):
                block.res_layernorm.weight.add_(0.1 * torch.randn_like(block.res_layernorm.weight))
                block.res_layernorm.bias.add_(0.1 * torch.randn_like(block.res_layernorm.bias))
    return blocks


def main() -> None:
    checkout = Path(sys.argv[1])
    tensorized_linear = authors_module(checkout)
    out = {}
    for i, gate in enumerate(GATES):
        torch.manual_seed(i)
        blocks = chain(tensorized_linear, gate)
        b, s = SHAPE["tokens"]
        x0 = torch.randn(b * s, SHAPE["dim"], dtype=torch.float64, requires_grad=True)
        probe = torch.randn(b * s, SHAPE["dim"], dtype=torch.float64)
        x, carry, outputs, latents = x0, None, [], []
        for block in blocks:
            y, carry = block(x, carry)
            outputs.append(y.detach().clone())
            latents.append(carry.detach().clone())
            x = x + y
        (x * probe).sum().backward()
        params = [{k: v.detach().clone() for k, v in block.named_parameters()} for block in blocks]
        grads = [{k: v.grad.clone() for k, v in block.named_parameters()} for block in blocks]
        out[gate] = dict(x0=x0.detach().clone(), probe=probe, params=params, outputs=outputs, latents=latents,
                         final=x.detach().clone(), grad_x0=x0.grad.clone(), grads=grads)  # fmt: skip
    meta = {
        "source": f"github K1seki221/Latent_Crossing at {COMMIT}, vits_pretraining/timm/models/lax_vit.py "
        "TensorizedLinear (2 cores, SiLU, no bias), float64",
        "torch": str(torch.__version__),
        "command": "python tests/data/make_lax_golden.py /tmp/Latent_Crossing",
        "date": str(datetime.date.today()),
        "shape": SHAPE,
    }
    path = Path(__file__).with_name("lax_golden.pt")
    torch.save({"meta": meta, "gates": out}, path)
    print(f"wrote {path} ({path.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()

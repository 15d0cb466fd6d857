"""Make tests/data/loro_golden.pt: a tiny SVD-style model trained for 8 steps by the LORO authors' own
optimizer (github mzf666/LORO-main: ``loro_torch/loro_optim.py`` ``LOROAdamW`` + ``_loro_step`` +
``refresh_states``, ``loro_torch/lowrank_module.py`` ``LowRankLinear`` + ``get_lowrank_param``,
``peft_pretraining/training_utils.py`` ``get_scheduler("cosine_restart")``), driven as their ``run_c4.py``
drives it; float64. Recorded: the initial weights, each step's batch, loss, learning rate and factors.

The model is BOOST's ``Transformer`` (``linear = "svd"``, ungrouped) with each projection replaced by the
authors' ``LowRankLinear`` holding the same factors (``weight_in = Aᵀ``, ``weight_out = B``): the loss is
then a float64 function end to end (transformers' LLaMA builds its RoPE tables in fp32), and the test
compares optimizers, not two models' rounding. Their code is imported from a path outside this repo and
run as it is, with one change, said here: their exact step casts the factors to fp32 (``M.float()``);
for a float64 golden, ``Tensor.float`` returns ``promote(dtype, float32)`` while their optimizer steps
(float64 stays float64; fp32 and bf16 still become fp32, so the patch changes nothing in their runs).

Run once, with their repository at COMMIT on the path (only ``loro_torch/`` and ``peft_pretraining/
training_utils.py`` are read; transformers is the installed one, for their ``require_version``):

    git clone https://github.com/mzf666/LORO-main /tmp/LORO-main && git -C /tmp/LORO-main checkout 4da57b6
    PYTHONPATH=/tmp/LORO-main .venv/bin/python tests/data/make_loro_golden.py
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from loro_torch.loro_optim import LOROAdamW
from loro_torch.lowrank_module import LowRankLinear, get_lowrank_param
from peft_pretraining.training_utils import get_scheduler
from torch import nn

from boost import ModelArgs, Transformer
from boost.training.model.linears import Bottleneck

COMMIT = "4da57b6a58217906f1750f0c8e5e892df66e260d"
SHAPE = dict(dim=16, n_layers=2, n_heads=2, n_kv_heads=1, vocab_size=32, ffn_dim=32, rank=4, max_seq_len=16)
# their run_c4.py flags, scaled down: exact step and refresh every 3 steps (their recipes: both every 500)
RUN = dict(
    steps=8,
    lr=0.01,
    weight_decay=0.1,
    loro_freq=3,
    loro_refresh="all",
    loro_refresh_freq=3,
    loro_lr_scaler="-1",
    scheduler="cosine_restart",
    num_training_steps=10,
    warmup_steps=2,
    min_lr_ratio=0.1,
    cosine_restart_freq=3,
    cosine_restart_warmup=1,
    lr_adjust_steps=-2,
    batch=2,
    seq_len=16,
)


def _their_model(model: Transformer) -> dict[str, LowRankLinear]:
    """Replace every projection of ``model`` by their ``LowRankLinear`` with the same factors."""
    replaced = {}
    for block in model.layers.values():
        for sub in (block.attention, block.feed_forward):
            for name, module in list(sub.named_children()):
                if not isinstance(module, Bottleneck):
                    continue
                ((_, rank, d_out),) = module.members
                layer = LowRankLinear(nn.Linear(module.d_in, d_out, bias=False), rank, "xavier").double()
                with torch.no_grad():
                    layer.weight_in.copy_(module.down.weight.t())
                    layer.weight_out.copy_(module.up[0].weight)
                setattr(sub, name, layer)
    for name, module in model.named_modules():
        if isinstance(module, LowRankLinear):
            replaced[name] = module
    return replaced


def main() -> None:
    torch.manual_seed(0)
    args = ModelArgs(**SHAPE, linear="svd", group_linears=False)
    model = Transformer(args).double()
    with torch.no_grad():  # the norms start at 1: a draw of their own, so that their weights matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    layers = _their_model(model)

    # get_lowrank_param asserts each low-rank module's name holds "self_attn" or "mlp" (HF LLaMA's)
    named = nn.ModuleDict({"mlp": model})
    config = SimpleNamespace(hidden_size=args.dim, intermediate_size=args.ffn_dim, initializer_range=0.02)
    groups = get_lowrank_param(named, config, RUN["loro_lr_scaler"])
    optimizer = LOROAdamW(
        groups,
        lr=RUN["lr"],
        weight_decay=RUN["weight_decay"],
        loro_type="loro",
        model=model,
        no_deprecation_warning=True,
    )
    scheduler = get_scheduler(
        optimizer,
        scheduler_type=RUN["scheduler"],
        num_training_steps=RUN["num_training_steps"],
        warmup_steps=RUN["warmup_steps"],
        min_lr_ratio=RUN["min_lr_ratio"],
        cycle_length=RUN["cosine_restart_freq"],
        restart_warmup_steps=RUN["cosine_restart_warmup"],
        lr_adjust_steps=RUN["lr_adjust_steps"],
        lr_jag_after_warmup=False,
    )

    gen = torch.Generator().manual_seed(1)
    batches, losses, lrs, exact, factors = [], [], [], [], []
    float_of = torch.Tensor.float
    for update_step in range(RUN["steps"]):  # run_c4.py's loop, gradient accumulation 1, no clipping
        tokens = torch.randint(0, args.vocab_size, (RUN["batch"], RUN["seq_len"] + 1), generator=gen)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        lr = optimizer.param_groups[0]["lr"]
        if lr == 0.0:
            scheduler.step()
        use_exact_loro = (update_step + 1) % RUN["loro_freq"] == 0
        torch.Tensor.float = lambda t, *a, **k: t.to(torch.promote_types(t.dtype, torch.float32))
        try:
            optimizer.step(use_exact_loro=use_exact_loro)
        finally:
            torch.Tensor.float = float_of
        if RUN["loro_refresh"] is not None and (update_step + 1) % RUN["loro_refresh_freq"] == 0:
            optimizer.refresh_states(RUN["loro_refresh"])
        scheduler.step()
        optimizer.zero_grad()
        batches.append(tokens)
        losses.append(loss.item())
        lrs.append(lr)
        exact.append(use_exact_loro)
        # BOOST's names: A = weight_inᵀ ([r, d_in]), B = weight_out ([d_out, r])
        factors.append(
            {f"{name}.A": m.weight_in.detach().t().clone() for name, m in layers.items()}
            | {f"{name}.B": m.weight_out.detach().clone() for name, m in layers.items()}
        )
    meta = {
        "source": f"github mzf666/LORO-main at {COMMIT}: LOROAdamW (loro_type 'loro'), LowRankLinear, "
        "get_lowrank_param, get_scheduler('cosine_restart'); run_c4.py's update loop; float64",
        "torch": str(torch.__version__),
        "command": "PYTHONPATH=/tmp/LORO-main .venv/bin/python tests/data/make_loro_golden.py",
        "date": str(datetime.date.today()),
        "shape": SHAPE,
        "run": RUN,
    }
    out = Path(__file__).with_name("loro_golden.pt")
    torch.save(
        {
            "meta": meta,
            "weights": weights,
            "batches": batches,
            "losses": losses,
            "lrs": lrs,
            "exact": exact,
            "factors": factors,
        },
        out,
    )
    print(f"wrote {out} ({out.stat().st_size} bytes); losses {losses}", file=sys.stderr)


if __name__ == "__main__":
    main()

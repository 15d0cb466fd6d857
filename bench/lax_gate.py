"""LaX's latent crossing alone, at a flavor's widths: what it costs a step beside CoLA's σ, in each gate form.

    python -m bench.lax_gate --flavor 7B --tokens 16384 4096   # the 7B@16 rank: BTP's whole latent, and SP's tp-th
    python -m bench.lax_gate --flavor 1B --tokens 16384        # the 1B trainer (micro-batch 4 × 4096)
    python -m bench.lax_gate --device cpu --flavor debug --tokens 256 --dtype float32 --backend eager  # on a CPU

Issue 40 asks a LaX step for at most 1.05× a CoLA step; on the 2026-11-28 H200 it took 1.38× (1B) and 1.65×
(7B@16), and the 1B step's kernel split put 51 ms in the factored gate's two thin GEMMs. This times the
crossing by itself, so a lent GPU can say in a minute how much of the extra is the crossing and which
``boost.lax_gate_form`` is cheaper where: ``kron`` does r² multiply-adds a token and member in one GEMM,
``factored`` r·(a + b) in two thin ones (at the 7B's r = 1024 under BTP, where every TP rank crosses every
token, kron's GEMMs are ~37% of the bottlenecks' own GEMM work a rank; a tp-th of that under sequence
parallelism; ~9% at the 1B's r = 512 on one GPU).

Per bottleneck of a block as BTP groups them (q/k/v: 3 members, o: 1, gate/up: 2, down: 1, each of rank r),
a latent ``pre`` and a carry ``[tokens, members·r]`` that take gradients: CoLA's ``σ(pre)``
(``LatentActivation``) and LaX's ``σ(LN(pre + G(carry)))`` (``LatentCrossing``, the tensorized gate) in each
form, each compiled as the trainer compiles a block (``--backend eager``: not compiled). One forward and
backward, timed between device syncs: the median of ``--repeats`` after ``--warmup``, each repetition running
every variant in turn (interleaved: a burst of load falls on all alike). A step's worth is the flavor's
blocks: block 0 runs σ, the others cross. The forms compute one function, checked before any timing (their
outputs and gradients agree). Not in it: the GEMMs around the latent, the carry's memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from boost import FLAVORS, ModelArgs
from boost.runtime.cli_types import positive_int
from boost.training.model.latent_crossing import LatentActivation, LatentCrossing
from boost.training.rules import LAX_GATE_FORMS

# a block's bottlenecks and their members, as BTP's grouped down-projections hold them
BOTTLENECKS = (("qkv", 3), ("o", 1), ("gate_up", 2), ("down", 1))
COLA = "CoLA σ"


def variants(members: int, rank: int) -> dict[str, nn.Module]:
    """CoLA's latent and LaX's crossing in each gate form, for one bottleneck (float32, on the CPU)."""
    out: dict[str, nn.Module] = {COLA: LatentActivation("silu")}
    for form in LAX_GATE_FORMS:
        crossing = LatentCrossing(members, rank, "tensorized", form)
        crossing.reset_parameters(seed=0, keys=[f"layers.1.member{i}" for i in range(members)])
        out[f"LaX {form}"] = crossing
    return out


def _forward_backward(
    module: nn.Module, pre: torch.Tensor, carry: torch.Tensor, grad: torch.Tensor
) -> torch.Tensor:
    """One forward and backward from cleared gradients; the latent it computed."""
    for t in (pre, carry, *module.parameters()):
        t.grad = None
    out = module(pre, carry)
    out.backward(grad)
    return out


def _results(module: nn.Module, pre, carry, grad) -> list[torch.Tensor]:
    """What one forward and backward computes: the latent and every gradient (the forms share parameters'
    names and shapes: the gate's factors are the same either way)."""
    out = _forward_backward(module, pre, carry, grad)
    return [
        out.detach(),
        pre.grad.clone(),
        carry.grad.clone(),
        *(p.grad.clone() for p in module.parameters()),
    ]


def check_forms_agree(modules: dict[str, nn.Module], pre, carry, grad) -> None:
    """LaX's forms compute one function: their outputs and gradients agree to the dtype's rounding."""
    forms = [m for name, m in modules.items() if name != COLA]
    want = _results(forms[0], pre, carry, grad)
    # relative to each tensor's largest value: the gate's gradients sum over every token, in either order
    tol = 1e-5 if pre.dtype == torch.float32 else 3e-2
    for other in forms[1:]:
        got = _results(other, pre, carry, grad)
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want)):
            error = ((a - b).abs().max() / b.abs().max()).item()
            assert error <= tol, f"the gate forms disagree on result {i}: {error:.2e} of its largest value"


def _sync(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def schedule(names: list[str], warmup: int, repeats: int) -> list[tuple[str, bool]]:
    """The order the variants run in: each repetition runs every variant once, in turn, so a burst of load on
    the machine falls on all of them alike rather than on whichever was being timed; ``(name, timed)``, the
    first ``warmup`` repetitions untimed."""
    return [(name, i >= warmup) for i in range(warmup + repeats) for name in names]


def time_ms(modules: dict[str, nn.Module], pre, carry, grad, warmup: int, repeats: int) -> dict[str, float]:
    """Each module's median wall time of one forward and backward, between device syncs, interleaved
    (``schedule``)."""
    times: dict[str, list[float]] = {name: [] for name in modules}
    for name, timed in schedule(list(modules), warmup, repeats):
        _sync(pre.device)
        start = time.perf_counter()
        _forward_backward(modules[name], pre, carry, grad)
        _sync(pre.device)
        if timed:
            times[name].append(1e3 * (time.perf_counter() - start))
    return {name: statistics.median(ts) for name, ts in times.items()}


def measure(
    flavor: str,
    tokens: int,
    dtype: torch.dtype,
    device: torch.device,
    backend: str,
    warmup: int,
    repeats: int,
) -> dict:
    """Each bottleneck's time per variant, a block's and a step's, and LaX's extra over CoLA a step (ms)."""
    args = ModelArgs.from_flavor(flavor, linear="lax")
    rank, layers = args.rank, args.n_layers
    rows: dict[str, dict[str, float]] = {}
    for name, members in BOTTLENECKS:
        modules = {k: m.to(device=device, dtype=dtype) for k, m in variants(members, rank).items()}
        g = torch.Generator(device=device).manual_seed(0)
        pre, carry, grad = (
            torch.randn(tokens, members * rank, generator=g, device=device, dtype=dtype) for _ in range(3)
        )
        pre.requires_grad_()
        carry.requires_grad_()
        check_forms_agree(modules, pre, carry, grad)
        if backend != "eager":
            modules = {k: torch.compile(m, backend=backend, fullgraph=True) for k, m in modules.items()}
        rows[name] = time_ms(modules, pre, carry, grad, warmup, repeats)
    names = list(next(iter(rows.values())))
    block = {k: sum(r[k] for r in rows.values()) for k in names}
    step = {k: block[COLA] + (layers - 1) * block[k] for k in names}
    return {
        "flavor": flavor,
        "rank": rank,
        "layers": layers,
        "tokens": tokens,
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(device),
        "backend": backend,
        "bottleneck_ms": rows,
        "block_ms": block,
        "step_ms": step,
        "lax_extra_step_ms": {k: step[k] - step[COLA] for k in names if k != COLA},
    }


def device_problem(device: torch.device) -> str | None:
    """``None`` where torch sees ``device``, else what to pass instead: asked before anything is built, where
    the first tensor on an absent device would stop in a traceback."""
    if device.type == "cpu":
        return None
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is not None and accelerator.type == device.type:
        return None
    return (
        f"--device {device.type}: torch {torch.__version__} sees no {device.type} device here; "
        "on this machine pass --device cpu (with --dtype float32 --backend eager, the docstring's CPU line)"
    )


def table(result: dict) -> str:
    """``measure``'s result as a markdown table."""
    names = list(result["block_ms"])
    lines = [
        f"{result['flavor']}, r {result['rank']}, {result['tokens']} tokens, {result['dtype']}, "
        f"{result['device']}, backend {result['backend']}: forward + backward, ms",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    lines += [
        f"| {b} ({m} × r) | " + " | ".join(f"{result['bottleneck_ms'][b][k]:.3f}" for k in names) + " |"
        for b, m in BOTTLENECKS
    ]
    lines.append("| block | " + " | ".join(f"{result['block_ms'][k]:.3f}" for k in names) + " |")
    lines.append(
        f"| step ({result['layers']} blocks, block 0 σ) | "
        + " | ".join(f"{result['step_ms'][k]:.2f}" for k in names)
        + " |"
    )
    extra = result["lax_extra_step_ms"]
    lines.append("| LaX's extra a step | | " + " | ".join(f"{extra[k]:.2f}" for k in names[1:]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m bench.lax_gate", description=__doc__.split("\n")[0])
    parser.add_argument("--flavor", default="7B", choices=list(FLAVORS))
    parser.add_argument("--tokens", type=positive_int, nargs="+", default=[16384])
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend; eager: not compiled")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=positive_int, default=10)
    parser.add_argument("--json", type=Path, help="also write the results here")
    opts = parser.parse_args(argv)
    device, dtype = torch.device(opts.device), getattr(torch, opts.dtype)
    problem = device_problem(device)
    if problem is not None:
        raise SystemExit(f"bench.lax_gate: {problem}")
    results = []
    for tokens in opts.tokens:
        torch._dynamo.reset()  # each width compiled afresh, static as the trainer's
        result = measure(opts.flavor, tokens, dtype, device, opts.backend, opts.warmup, opts.repeats)
        print(table(result) + "\n", flush=True)
        results.append(result)
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()

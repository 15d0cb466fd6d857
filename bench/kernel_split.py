"""One device's time per training step split by kernel kind: GEMM, attention, fused elementwise, optimizer, other.

    python -m bench.kernel_split --linear cola --json out.json     # on a GPU (bench.gpu_report runs it)
    python -m bench.kernel_split --linear cola --device cpu --flavor debug --seq 64 --batch 1   # the command on a CPU

The step is the standalone one of the 2026-11-26 H100 measurements: a ``boost.Transformer`` of
``ModelArgs.from_flavor(flavor, linear=…, vocab_size=32000, max_seq_len=seq)`` built on meta, each block
``torch.compile(fullgraph=True)``, fused AdamW, bf16 autocast, no activation checkpointing, the trainer's
seeded init (drawn on the device). ``--warmup`` steps (compilation), ``--timed``
steps timed between device syncs (the step's wall time, median), then torch.profiler over
``--profiled`` steps: every GPU kernel's device time, classified by name (:func:`classify`). On a CPU
the profiler's ops stand in for kernels (each op's self time; inductor's C++ kernels recorded by
name), to check the command, not to time anything.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

# First match wins. Inductor names a generated kernel after the aten ops fused into it, which may
# include an attention or matmul op's name: its own kernels are classified before the library's.
KIND_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    # torch's fused/foreach optimizers launch multi_tensor_apply kernels (...FusedAdamMathFunctor...)
    ("optimizer", re.compile(r"adam|multi_tensor_apply|_foreach_", re.I)),
    # inductor's matmul templates (max-autotune) are GEMMs
    ("GEMM", re.compile(r"^triton_tem_")),
    # inductor's generated kernels: Triton (triton_poi_/triton_red_/triton_per_), C++ on a CPU (cpp_fused_*)
    ("fused elementwise", re.compile(r"^triton_|cpp_fused")),
    # cuDNN SDPA (cudnn_generated_fort_native_sdpa_*), FlashAttention, mem-efficient (fmha_cutlass*), aten's sdpa
    ("attention", re.compile(r"sdpa|flash|fmha|attention", re.I)),
    # cuBLAS (nvjet_*, sm90_xmma_gemm_*, *gemm*, splitKreduce_kernel), CUTLASS, aten's matmuls on a CPU
    ("GEMM", re.compile(r"gemm|nvjet|xmma|cutlass|cublas|splitkreduce|^aten::(mm|addmm|bmm|baddbmm)$", re.I)),
)
KINDS = ("GEMM", "attention", "fused elementwise", "optimizer", "other")


def classify(name: str) -> str:
    """The kind of one kernel, by its name; ``other`` for the rest (copies, memsets, eager elementwise)."""
    return next((kind for kind, pattern in KIND_PATTERNS if pattern.search(name)), "other")


def split(times: list[tuple[str, float]]) -> dict[str, float]:
    """The total time of each kind in ``times`` (kernel name, time), every kind present."""
    out = dict.fromkeys(KINDS, 0.0)
    for name, t in times:
        out[classify(name)] += t
    return out


def top(times: list[tuple[str, float]], n: int) -> list[tuple[str, float]]:
    """The ``n`` kernel names with the most total time."""
    total: dict[str, float] = defaultdict(float)
    for name, t in times:
        total[name] += t
    return sorted(total.items(), key=lambda kv: -kv[1])[:n]


def profile_step(
    linear: str,
    flavor: str,
    seq: int,
    batch: int,
    device: str,
    warmup: int,
    timed: int,
    profiled: int,
    backend: str,
    autocast: bool,
    lax_gate_form: str = "factored",
) -> dict:
    """Build, compile and run the step; its wall time and the profiled kernels' times (µs per step)."""
    import torch
    import torch.nn.functional as F
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from boost import ModelArgs, Transformer

    if device == "cpu":
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True  # inductor's C++ kernels as named profiler events
    args = ModelArgs.from_flavor(
        flavor, linear=linear, vocab_size=32000, max_seq_len=seq, lax_gate_form=lax_gate_form
    )
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device=device)
    model.init_weights(buffer_device=torch.device(device), seed=0)
    for layer_id, block in model.layers.named_children():
        model.layers.register_module(layer_id, torch.compile(block, backend=backend, fullgraph=True))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, 32000, (batch, seq), device=device)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(tokens).flatten(0, 1).float(), tokens.flatten())
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    seconds = []
    for _ in range(timed):
        sync()
        start = time.perf_counter()
        step()
        sync()
        seconds.append(time.perf_counter() - start)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(profiled):
            step()
        sync()
    if device == "cuda":
        kernels = [
            (e.name, e.time_range.elapsed_us()) for e in prof.events() if e.device_type == DeviceType.CUDA
        ]
    else:
        kernels = [(e.name, e.self_cpu_time_total) for e in prof.events() if e.device_type == DeviceType.CPU]
    step_s = statistics.median(seconds) if seconds else float("nan")
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    return dict(
        linear=linear,
        lax_gate_form=lax_gate_form,
        step_s=step_s,
        tokens_per_s=batch * seq / step_s,
        peak_gib=peak,
        profiled_steps=profiled,
        kernel_us_per_step={k: v / profiled for k, v in split(kernels).items()},
        top=[(name, us / profiled) for name, us in top(kernels, 8)],
        by_name={name: us / profiled for name, us in top(kernels, len(kernels))},
        # launches a step: a kernel's time per launch, for one whose shapes are known (LaX's thin gate GEMMs)
        calls_by_name={name: n / profiled for name, n in Counter(name for name, _ in kernels).items()},
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--linear", default="cola", help="boost.linear: cola, full, svd, lax")
    p.add_argument("--lax-gate-form", default="factored", help="boost.lax_gate_form: factored, kron")
    p.add_argument("--flavor", default="1B")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    p.add_argument("--timed", type=int, default=5)
    p.add_argument("--profiled", type=int, default=2)
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--no-autocast", action="store_true", help="fp32 (bf16 GEMMs are slow on a CPU)")
    p.add_argument("--json", type=Path, help="write the result here")
    a = p.parse_args()
    result = profile_step(
        a.linear,
        a.flavor,
        a.seq,
        a.batch,
        a.device,
        a.warmup,
        a.timed,
        a.profiled,
        a.compile_backend,
        not a.no_autocast,
        a.lax_gate_form,
    )
    text = json.dumps(result, indent=1)
    if a.json:
        a.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()

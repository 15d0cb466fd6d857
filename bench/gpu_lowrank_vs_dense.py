"""One GPU: dense vs low-rank (CoLA) tokens/s, MFU and peak memory for the 1B flavor, bf16.

    python -m bench.gpu_lowrank_vs_dense --flavor 1B --seq 4096 --batch 4 --steps 20 [--compile]

Needs a CUDA device (exits with a message otherwise). MFU uses BOOST's factor-shape FLOP count
(``boost.flops_per_token``), so the low-rank MFU is not comparable with the dense one: compare
tokens/s; the FLOP ratio is the ceiling of the speed-up. Falls back to smaller seq if OOM.
"""

from __future__ import annotations

import argparse
import datetime
import time

import torch
import torch.nn.functional as F

from boost import ModelArgs, Transformer, flops_per_token

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def run(kind: str, flavor: str, seq: int, batch: int, steps: int, compile_blocks: bool):
    args = ModelArgs.from_flavor(flavor, linear=kind, vocab_size=32000, max_seq_len=seq)
    # built on meta, then initialised on the GPU: the seeded init draws each tile on the CPU
    # (boost.model.seeded_init) and copies it to the parameter's device, as a trainer rank does
    with torch.device("meta"):
        model = Transformer(args)
    model.to_empty(device="cuda")
    model.init_weights(buffer_device=torch.device("cuda"), seed=0)
    if compile_blocks:
        for layer_id, block in model.layers.named_children():
            model.layers.register_module(layer_id, torch.compile(block, fullgraph=True))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, 32000, (batch, seq), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(tokens).flatten(0, 1).float(), tokens.flatten())
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step_s = sorted(times[steps // 2 :])[len(times[steps // 2 :]) // 2]
    tps = batch * seq / step_s
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16.items() if k in name), 989e12)
    return dict(
        step_s=step_s,
        tps=tps,
        mfu=100 * flops_per_token(args, seq) * tps / peak,
        mem_gib=torch.cuda.max_memory_allocated() / 2**30,
        flops=flops_per_token(args, seq),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--flavor", default="1B")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench.gpu_lowrank_vs_dense needs a CUDA GPU")
    res = {}
    for kind in ("full", "cola"):
        seq = a.seq
        while True:
            try:
                res[kind] = run(kind, a.flavor, seq, a.batch, a.steps, a.compile)
                break
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                seq //= 2
                if seq < 256:
                    raise
        res[kind]["seq"] = seq
    print(
        f"# {a.flavor} on one {torch.cuda.get_device_name()}, bf16 autocast, batch {a.batch}, "
        f"compile={a.compile}, {datetime.date.today()}, torch {torch.__version__}"
    )
    print(
        f"command: python -m bench.gpu_lowrank_vs_dense --flavor {a.flavor} --seq {a.seq} --batch {a.batch}"
        f"{' --compile' if a.compile else ''}\n"
    )
    print("| kind | seq | step s | tokens/s | MFU % (own FLOPs) | peak GiB |")
    print("|---|---|---|---|---|---|")
    for kind, r in res.items():
        print(
            f"| {kind} | {r['seq']} | {r['step_s']:.3f} | {r['tps']:,.0f} | {r['mfu']:.1f} | {r['mem_gib']:.1f} |"
        )
    print(
        f"\nlow-rank / dense tokens/s: {res['cola']['tps'] / res['full']['tps']:.2f}× "
        f"(FLOP-ratio ceiling {res['full']['flops'] / res['cola']['flops']:.2f}×)"
    )


if __name__ == "__main__":
    main()

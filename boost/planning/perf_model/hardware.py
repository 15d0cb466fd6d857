"""The machines the step-time model knows: vendor peaks, and efficiencies fitted or measured once.

``A100`` is fitted to the reference paper's table (``boost.planning.perf_model.fit``), ``CPU_GLOO`` measured on
this machine (``boost.planning.perf_model.cpu_calibration``); ``H100`` and ``H200`` carry the A100 fit over to
their peaks.

Example::

    >>> round(get_hardware("h100").peak_flops / get_hardware("a100").peak_flops, 2)
    3.17
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    """Peak numbers from the vendor, efficiencies fitted once to the paper table (``fit_a100``).

    ``peak_flops`` dense bf16 (A100 SXM 312 TFLOP/s, H100 SXM 989 TFLOP/s); ``mem_bw`` HBM
    (A100-80GB 2.04 TB/s, H100 3.35 TB/s); ``bus_bw`` achieved NCCL bus bandwidth inside a node
    (NVLink3 nominal 300 GB/s per direction, NVLink4 450 GB/s); ``latency`` per collective;
    ``inter_bw`` per-GPU bandwidth across nodes (FSDP/PP beyond one node, 200 Gb/s IB per GPU).
    """

    name: str
    peak_flops: float
    mem_bw: float
    bus_bw: float
    latency: float
    inter_bw: float
    gpus_per_node: int = 8
    memory_bytes: float = 80 * 2**30  # an "80 GB" A100 or H100: 81,920 MiB nominal
    eta_gemm: float = 0.80  # achieved fraction of peak of a GEMM of infinite arithmetic intensity
    ai_half: float = 120.0  # FLOP/byte at which a GEMM reaches half of eta_gemm
    eta_attn: float = 0.45  # flash-attention fraction of peak (fwd + bwd)
    eta_mem: float = 0.80  # achieved fraction of HBM bandwidth of the eager elementwise ops (fitted)
    eta_hbm: float = 0.80  # fraction of HBM bandwidth of streaming kernels: memory-bound GEMMs, fused Adam
    t_kernel: float = 10e-6  # fixed cost per GEMM kernel (launch, wave tail)
    t_layer: float = 0.0  # fixed cost per block per micro-batch (launches of the small kernels, host gaps)
    # LORO's exact step (boost.planning.perf_model.loro_cost) runs in float64
    peak_flops_fp64: float = 19.5e12  # A100 FP64 tensor core; H100 SXM 67 TFLOP/s
    eta_svd: float = 0.05  # the 2r × 2r SVD's rate, as a fraction of peak_flops_fp64, counting 22·n³ flops

    def group_bw(self, span: int) -> float:
        """The bandwidth of a group whose ranks lie within ``span`` consecutive ranks of torchtitan's mesh
        (``(pp, dp_replicate, dp_shard, cp, tp)``, tp innermost, a node ``gpus_per_node`` consecutive ranks):
        NVLink's ``bus_bw`` while the span fits a node, else ``inter_bw`` (some of its traffic leaves the node,
        and the group runs at that pace)."""
        return self.bus_bw if span <= self.gpus_per_node else self.inter_bw


# Fitted 2026-11-22 on the paper's 15 step times (GEMM/attention/memory efficiencies, t_kernel)
# and its 3-cell per-layer communication row (bus_bw, latency); see docs/perf_model.md.
A100 = Hardware(
    name="a100",
    peak_flops=312e12,
    mem_bw=2.039e12,
    bus_bw=222.4e9,
    latency=69.9e-6,
    inter_bw=25e9,
    eta_gemm=0.749,
    ai_half=38.2,
    eta_attn=0.303,
    eta_mem=0.484,
    eta_hbm=0.80,
    t_kernel=56e-6,
    t_layer=0.0,
)
# H100: vendor peaks; efficiencies and the NVLink fraction (222.4/300) carried over from the A100 fit.
H100 = dataclasses.replace(
    A100,
    name="h100",
    peak_flops=989e12,
    mem_bw=3.35e12,
    bus_bw=450e9 * 222.4 / 300,
    latency=30e-6,
    inter_bw=50e9,
    peak_flops_fp64=67e12,
)
# H200 SXM: the H100's compute and NVLink, HBM3e at 4.8 TB/s, and the memory torch sees on one (the 2026-11-28
# lease: "about 139 GiB"), against which the one-GPU 1B rows of bench/results/gpu.md are checked.
H200 = dataclasses.replace(H100, name="h200", mem_bw=4.8e12, memory_bytes=139 * 2**30)
# This 2-core CPU + gloo loopback, measured by calibrate_cpu() on 2026-11-22: fp32 1024² matmul
# 23.2 GFLOP/s, 32 MiB clone 1.26 GB/s (read + write), gloo all-reduce between 2 processes 101 µs
# for one element and 1.04 GB/s bus bandwidth at 32 MiB. Efficiencies are folded into the measured
# numbers (eta = 1, ai_half ≈ 0); attention runs at the GEMM rate; dtype_bytes=4 for fp32 runs.
CPU_GLOO = Hardware(
    name="cpu_gloo",
    peak_flops=23.2e9,
    mem_bw=1.26e9,
    bus_bw=1.04e9,
    latency=101e-6,
    inter_bw=1.04e9,
    gpus_per_node=2,
    memory_bytes=8e9,
    eta_gemm=1.0,
    ai_half=1e-6,
    eta_attn=1.0,
    eta_mem=1.0,
    eta_hbm=1.0,
    t_kernel=20e-6,
    # fp64 at 0.54× fp32 and the SVD (LAPACK gesdd, 1024 × 1024) at 2.0× the fp64 GEMM rate in 22·n³-flop
    # terms, both measured side by side on 2026-11-25 (a loaded machine: only the ratios are kept)
    peak_flops_fp64=23.2e9 * 0.54,
    eta_svd=2.0,
)
HARDWARE: dict[str, Hardware] = {"a100": A100, "h100": H100, "h200": H200, "cpu_gloo": CPU_GLOO}


def get_hardware(hardware: str | Hardware) -> Hardware:
    """A ``Hardware`` as is, or the one named in ``HARDWARE``; ``ValueError`` naming the choices otherwise."""
    if isinstance(hardware, Hardware):
        return hardware
    if hardware not in HARDWARE:
        raise ValueError(f"unknown hardware {hardware!r}; choose one of {sorted(HARDWARE)}")
    return HARDWARE[hardware]

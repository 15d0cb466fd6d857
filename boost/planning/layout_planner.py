"""Layout planner: enumerate (scheme, TP, sequence parallelism, PP, CP, DP, AC), drop what does not fit in
memory, rank by ``boost.planning.perf_model`` step time, print the best layouts and the TOML overrides of the
first; or, for the layout a training TOML fixes, name the largest micro-batch that fits a GPU's memory.

    python -m boost.planning.layout_planner --flavor 7B --gpus 16 --hardware a100 [--seq-len 4096 --micro-batch 4
                         --memory-gb 80 | --memory-gib 80 --linear cola --num-microbatches M --top 10]
    python -m boost.planning.layout_planner --config train_configs/7B.toml --gpus 16 [--memory-gib 80]
    python -m boost.planning.layout_planner --config train_configs/7B.toml --gpus 16 --seq-len 32768  # long windows

Context parallelism (``cp``, the sequence over ``cp`` ranks) is enumerated beside data parallelism: it reads
fewer windows at once for the same GPUs and adds the attention's collectives, so it ranks below DP at the
usual windows (4k), and first at long ones, where splitting the attention's quadratic work pays or nothing
else fits.

Sequence parallelism (``sp``, ``boost.sequence_parallel``) is enumerated for the schemes with a plan (btp:
each latent on a rank's tokens; megatron: the residual stream), at TP > 1, where the sequence splits over
the TP ranks: it moves the same bytes, and the performance model weighs the work and memory it splits.

FSDP's reshard policy (``parallelism.fsdp_reshard_after_forward``) is "default" and, without PP where FSDP
shards, also "never" where its saved all-gathers show in the step time; the overrides print it, the policy
the layout was sized and timed at (the shipped TOMLs differ).

Memory per GPU is ``boost.planning.perf_model.memory_per_gpu`` (the formulas, and the measurement that calibrates
them, are in ``boost/planning/perf_model/peak_memory.py``). A layout fits a GPU when that peak, 1 GiB outside the
caching allocator included (CUDA context, NCCL buffers), is at most ``1 - HEADROOM`` of the GPU's memory.
The micro-batch is what one forward takes: ``training.local_batch_size`` without PP; under PP
``parallelism.pipeline_parallel_microbatch_size``, the number of micro-batches
(``local_batch_size / microbatch_size``) kept as the TOML has it, since 1F1B holds ``min(m, pp)`` of them
whatever ``m`` is. ``--num-microbatches`` is the pipeline's: a layout without PP runs one micro-batch a step
(no gradient accumulation), timed and printed so.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass

from boost.planning.perf_model import get_hardware, memory_per_gpu, predict_step_time
from boost.planning.perf_model.micro_batch_advice import advise_long_sequence, advise_micro_batch
from boost.planning.perf_model.peak_memory import GIB, WORKSPACE_BYTES, usable_bytes
from boost.runtime.cli_types import positive_int
from boost.training import rules
from boost.training.model.args import FLAVORS, flavor_rank
from boost.training.rules import AC_MODES, SCHEMES

# memory_per_gpu and WORKSPACE_BYTES stay importable from here (bench.dry_run reads them so)
__all__ = [
    "WORKSPACE_BYTES",
    "Layout",
    "enumerate_layouts",
    "main",
    "memory_per_gpu",
    "usable_bytes",
]


@dataclass
class Layout:
    scheme: str
    tp: int
    pp: int
    dp: int
    ac: str
    memory_bytes: float
    step_time: float
    tokens_per_s: float
    cp: int = 1
    sp: bool = False  # boost.sequence_parallel
    num_microbatches: int = 1  # per step: the pipeline's, 1 without PP
    reshard: str = "default"  # parallelism.fsdp_reshard_after_forward, as sized and timed

    def overrides(self, linear: str, micro_batch: int, seq_len: int) -> str:
        """The ``run_train.sh`` / torchtitan command-line overrides of this layout."""
        parts = [
            f"--parallelism.tensor_parallel_degree {self.tp}",
            f"--parallelism.pipeline_parallel_degree {self.pp}",
            f"--parallelism.data_parallel_shard_degree {self.dp}",
            *([f"--parallelism.context_parallel_degree {self.cp}"] if self.cp > 1 else []),
            f"--boost.linear {SCHEMES[self.scheme].kind_for(linear)}",
            f"--boost.tp_scheme {self.scheme}",
            f"--boost.activation_checkpoint {self.ac}",
        ]
        if self.sp:
            parts.append("--boost.sequence_parallel")
        if not rules.groups_linears(self.scheme):
            parts.append("--boost.no-group-linears")  # tyro's flag form of a boolean
        # torchtitan splits local_batch_size into micro-batches of pipeline_parallel_microbatch_size
        local_batch = micro_batch * self.num_microbatches
        parts.append(f"--training.local_batch_size {local_batch}")
        parts.append(f"--training.seq_len {seq_len}")
        # the TOMLs differ (1B/3B/7B's "never" holds every block's weights gathered): the policy sized and timed
        parts.append(f"--parallelism.fsdp_reshard_after_forward {self.reshard}")
        if self.pp > 1:
            parts.append(f"--parallelism.pipeline_parallel_microbatch_size {micro_batch}")
            parts.append(f"--parallelism.pipeline_parallel_schedule {PIPELINE_SCHEDULE}")
            # validation splits into the training's micro-batches (the preflight's rule): the same batch
            # keeps it a multiple of them whatever the TOML's validation.local_batch_size
            parts.append(f"--validation.local_batch_size {local_batch}")
        return " ".join(parts)


# The schedule the planner times (1F1B's bubble) and prints under PP: the shipped TOMLs' and torchtitan's default.
PIPELINE_SCHEDULE = "1F1B"


def _pipeline_problem(pp: int, n_layers: int, micro_batch: int, num_microbatches: int) -> str | None:
    """The preflight's pipeline rules on a planned layout (one stage a rank under ``PIPELINE_SCHEDULE``), or
    ``None``: 1F1B needs a micro-batch per stage, so ``--num-microbatches`` below ``pp`` rules that PP out."""
    if pp == 1:
        return None
    stages = rules.pipeline_stage_count(False, pp, n_layers, None, 0, 0)
    return rules.pipeline_stages_problem(
        PIPELINE_SCHEDULE, False, pp, stages
    ) or rules.pipeline_microbatch_problem(
        PIPELINE_SCHEDULE, micro_batch * num_microbatches, micro_batch, pp, stages
    )


def _reshard_policies(pp: int, fsdp_degree: int) -> tuple[str, ...]:
    """``parallelism.fsdp_reshard_after_forward`` to plan: "default" (reshards after each forward, except under
    PP) and, where FSDP shards the weights without PP, "never" (one all-gather a block a step instead of two,
    for every block's weights held gathered from its forward to its backward)."""
    return ("default", "never") if pp == 1 and fsdp_degree > 1 else ("default",)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _sequence_parallel_choices(scheme: str, tp: int, seq_len: int) -> tuple[bool, ...]:
    """``boost.sequence_parallel`` off, and on where the scheme has a plan that splits something at this TP
    degree and the preflight takes it (``rules.sequence_parallel_problem``)."""
    if tp == 1 or SCHEMES[scheme].sequence_parallel is None:
        return (False,)
    return (False,) if rules.sequence_parallel_problem(True, scheme, seq_len, tp) else (False, True)


def enumerate_layouts(
    flavor: str,
    gpus: int,
    hardware: str,
    *,
    seq_len: int = 4096,
    micro_batch: int = 4,
    memory_bytes: float | None = None,
    linear: str = "cola",
    num_microbatches: int | None = None,
    vocab_size: int = 32000,
    attn_mask_type: str = "causal",
) -> list[Layout]:
    """All layouts that fit (``usable_bytes`` of ``memory_bytes``, the GPU's memory; default the
    hardware's), fastest (highest tokens/s per step) first. Raises ``ValueError`` on bad input or when
    nothing fits."""
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; choose one of {sorted(FLAVORS)}")
    hw = get_hardware(hardware)
    if gpus < 1:
        raise ValueError(f"--gpus must be positive, got {gpus}")
    gpu_memory = memory_bytes or hw.memory_bytes
    budget = usable_bytes(gpu_memory)
    kind = rules.linear_kind(linear)
    # the schemes this kind runs under tensor parallelism (the preflight's rule, at any TP > 1)
    schemes = [scheme.name for scheme in SCHEMES.values() if scheme.takes(kind)]
    f = FLAVORS[flavor]
    n_layers, rank = f.n_layers, flavor_rank(flavor)
    layouts = []
    for scheme in schemes:
        sharded = {
            **rules.tp_sharded_dims(scheme, f.n_heads, f.n_kv_heads, f.dim, f.ffn_dim),
            "vocab_size": vocab_size,
        }
        for tp in _divisors(gpus):
            # TP stays inside a node (the planner's choice); the rest are the preflight's rules
            if (
                tp > hw.gpus_per_node
                or rules.tp_shape_problem(sharded, tp)
                or rules.vanilla_rank_problem(scheme, rank, tp)
            ):
                continue
            for pp in _divisors(gpus // tp):
                # at least 2 layers per stage (the planner's choice)
                if rules.pipeline_problem(linear, pp, n_layers) or (pp > 1 and n_layers / pp < 2):
                    continue
                # 1F1B with m = pp: bubble (p-1)/(2p-1); without PP one micro-batch a step
                m = (num_microbatches or pp) if pp > 1 else 1
                if _pipeline_problem(pp, n_layers, micro_batch, m):
                    continue
                sp_choices = _sequence_parallel_choices(scheme, tp, seq_len)
                for cp, sp, ac in itertools.product(_divisors(gpus // (tp * pp)), sp_choices, AC_MODES):
                    # the sequence splits into the load balancer's 2·cp chunks (the preflight's rule)
                    if rules.context_parallel_problem(
                        cp, seq_len, "sdpa", "headtail", tp, sp
                    ) or rules.activation_checkpoint_problem(ac, scheme, tp):
                        continue
                    dp = gpus // (tp * pp * cp)
                    timed: dict[str, float] = {}
                    run = dict(
                        micro_batch=micro_batch,
                        seq_len=seq_len,
                        num_microbatches=m,
                        vocab_size=vocab_size,
                        linear=linear,
                        compiled=True,  # BOOST ships compiled
                        cp=cp,
                        attn_mask_type=attn_mask_type,
                        sequence_parallel=sp,
                    )
                    for reshard in _reshard_policies(pp, dp * cp):
                        reshards = rules.reshards_after_forward(reshard, pp > 1)
                        mem = memory_per_gpu(
                            flavor, scheme, tp, pp, dp, ac, reshard_after_forward=reshards, **run
                        )
                        if mem > budget:
                            continue
                        timed[reshard] = t = predict_step_time(
                            flavor,
                            scheme,
                            tp,
                            pp,
                            hardware=hw,
                            dp=dp,
                            activation_checkpoint=ac,
                            fsdp_reshard_after_forward=reshard,
                            **run,
                        )
                        # "never" only where its saved all-gathers show: else it is "default" holding more
                        if reshard == "never" and round(t, 6) >= round(timed.get("default", float("inf")), 6):
                            continue
                        tokens = m * dp * micro_batch * seq_len
                        layouts.append(Layout(scheme, tp, pp, dp, ac, mem, t, tokens / t, cp, sp, m, reshard))
    if not layouts:
        raise ValueError(
            f"no layout of {flavor} on {gpus} {hw.name} GPU(s) fits in {budget / GIB:.1f} GiB (of "
            f"{gpu_memory / GIB:.1f}) at micro-batch {micro_batch} × seq {seq_len}; add GPUs, lower "
            "--micro-batch or --seq-len, or raise --memory-gib"
        )
    return sorted(layouts, key=lambda l: (-round(l.tokens_per_s, 6), l.memory_bytes))


def _positive_gib(text: str) -> float:
    """argparse type: a memory size > 0 (a GPU of 0 GiB holds nothing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


# The options of a flavor's search; a training TOML fixes all of them.
SEARCH_DEFAULTS = {
    "seq_len": 4096,
    "micro_batch": 4,
    "linear": "cola",
    "num_microbatches": None,
    "top": 10,
    "attn_mask_type": "causal",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m boost.planning.layout_planner", description=__doc__.split("\n\n")[0]
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--flavor", help="rank every layout of this flavor")
    what.add_argument("--config", help="a training TOML: the largest micro-batch its layout fits")
    parser.add_argument("--gpus", type=positive_int, required=True)
    parser.add_argument("--hardware", default="a100", help="a100 | h100 | h200 (its memory is the default)")
    memory = parser.add_mutually_exclusive_group()
    memory.add_argument("--memory-gib", type=_positive_gib, default=None, help="per-GPU memory in GiB")
    memory.add_argument("--memory-gb", type=_positive_gib, default=None, help="per-GPU memory in GB (10^9 B)")
    parser.add_argument("--seq-len", type=positive_int, default=None)
    parser.add_argument("--micro-batch", type=positive_int, default=None)
    parser.add_argument("--linear", default=None, help="cola | svd | lax (btp, vanilla) or full (megatron)")
    parser.add_argument(
        "--num-microbatches",
        type=positive_int,
        default=None,
        help="per step under PP (default: pp; 1F1B needs at least pp, so it rules out larger pp); without PP one",
    )
    parser.add_argument("--top", type=positive_int, default=None)
    parser.add_argument(
        "--attn-mask-type",
        choices=rules.MASK_TYPES,
        default=None,
        help="causal (default) | block_causal (SDPA's boolean mask: every score, and the mask's memory)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    opts = parser.parse_args(argv)
    search = {key: getattr(opts, key) for key in SEARCH_DEFAULTS}
    if opts.config:
        # --seq-len stretches the TOML's windows: the smallest CP degree that fits them
        given = [key for key, value in search.items() if value is not None and key != "seq_len"]
        if given:
            parser.error(f"argument --{given[0].replace('_', '-')}: not with --config (the TOML sets it)")
    long_windows = opts.config and opts.seq_len is not None
    for key, value in SEARCH_DEFAULTS.items():
        search[key] = value if search[key] is None else search[key]
    try:
        hw = get_hardware(opts.hardware)
        memory_bytes = (
            opts.memory_gib * GIB
            if opts.memory_gib
            else opts.memory_gb * 1e9
            if opts.memory_gb
            else hw.memory_bytes
        )
        if long_windows:
            print(advise_long_sequence(opts.config, opts.gpus, memory_bytes, opts.seq_len).report())
            return 0
        if opts.config:
            print(advise_micro_batch(opts.config, opts.gpus, memory_bytes).report())
            return 0
        layouts = enumerate_layouts(
            opts.flavor,
            opts.gpus,
            opts.hardware,
            seq_len=search["seq_len"],
            micro_batch=search["micro_batch"],
            memory_bytes=memory_bytes,
            linear=search["linear"],
            num_microbatches=search["num_microbatches"],
            attn_mask_type=search["attn_mask_type"],
        )
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"{opts.flavor} on {opts.gpus} × {opts.hardware} ({memory_bytes / GIB:.1f} GiB, "
        f"{usable_bytes(memory_bytes) / GIB:.1f} usable), seq {search['seq_len']}, "
        f"micro-batch {search['micro_batch']}, linear {search['linear']}: "
        f"{len(layouts)} feasible layouts"
    )
    print(
        f"{'#':>3} {'scheme':<9}{'tp':>3}{'sp':>4}{'pp':>3}{'cp':>3}{'dp':>4} {'ac':<8}{'reshard':<8}{'mem GiB':>8}"
        f"{'step s':>9}{'tokens/s':>11}"
    )
    for i, l in enumerate(layouts[: search["top"]], 1):
        print(
            f"{i:>3} {l.scheme:<9}{l.tp:>3}{'yes' if l.sp else 'no':>4}{l.pp:>3}{l.cp:>3}{l.dp:>4} {l.ac:<8}"
            f"{l.reshard:<8}{l.memory_bytes / GIB:>8.1f}"
            f"{l.step_time:>9.3f}{l.tokens_per_s:>11,.0f}"
        )
    best = layouts[0]
    print(
        "\nbest layout overrides:\n"
        + best.overrides(search["linear"], search["micro_batch"], search["seq_len"])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The rows ``bench.gpu_report`` measures: a table of name → command, run in this order; the schemes
of a rank dry run (``bench.rank_dry_run`` builds its runs here too).

A row measured two ways (a configuration switch on and off) is one more entry with its override.
The order is the order of need when the time budget runs out: issue 33's goal rows (7B@16 btp and
megatron, the trainer's 1B CoLA and dense) first, then issue 40's (LaX against CoLA, each form of its
gate, and the 1B step's kernels), the pipeline rows last.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from boost.training.rules import pipeline_loss_rank
from torchtitan_ext.config import linear_kind_overrides

ROOT = Path(__file__).resolve().parents[1]

FULL_AC = ("--boost.activation_checkpoint", "full")  # recompute whole blocks in backward

# A rank dry run's schemes, each as overrides of a shipped TOML: the TOML as shipped (CoLA, btp);
# vanilla low-rank TP on the same model (ungrouped, sync norm, full AC: what vanilla takes); the
# dense baseline with Megatron TP and full AC (the TOML header's override).
SCHEMES = {
    "btp": lambda toml: [],
    "vanilla": lambda toml: [
        "--boost.tp_scheme",
        "vanilla",
        "--boost.no-group-linears",
        "--boost.norm",
        "sync",
        *FULL_AC,
    ],
    "megatron": lambda toml: linear_kind_overrides("full", toml),
}
DENSE = ("--boost.linear", "full", "--boost.tp_scheme", "megatron")  # train_configs/1B.toml's header
RESHARD_DEFAULT = ("--parallelism.fsdp_reshard_after_forward", "default")
# FSDP's gathers and reductions traced into the compiled blocks (torchtitan's SimpleFSDP; no reshard policy)
SIMPLE_FSDP = ("--boost.fsdp", "simple_fsdp", *RESHARD_DEFAULT)
CUDAGRAPHS = "--boost.cudagraphs"  # the compiled blocks replayed as CUDA graphs (inert on a CPU)
LAX = ("--boost.linear", "lax")  # the TOMLs' CoLA with LaX's crossing (each TOML header's lax line)
LAX_KRON = (*LAX, "--boost.lax_gate_form", "kron")  # its tensorized gate as one [r, r] GEMM a projection
# btp's sequence parallelism: each latent (σ, LaX's crossing) on a rank's b·s/t tokens, not whole on every rank
SEQUENCE_PARALLEL = "--boost.sequence_parallel"
FLEX = (
    "--boost.attn_type",
    "flex",
    "--boost.no-log-comm",
)  # FlexAttention (the preflight refuses it where torch trains it not)
BLOCK_CAUSAL = ("--boost.attn_mask_type", "block_causal")
LONG_WINDOWS = ("--training.seq_len", "32768", "--parallelism.context_parallel_degree", "4")
# Every run: one log line a step (the rows' tokens/s, memory, step times), no checkpoint or
# validation (neither is the step's work; a 7B checkpoint shard is gigabytes of disk).
COMMON = ("--metrics.log_freq", "1", "--checkpoint.no-enable", "--validation.no-enable")


@dataclass(frozen=True)
class TrainRow:
    """``./run_train.sh`` with ``NGPU=ngpu CONFIG_FILE=train_configs/{config}.toml`` (and ``DRY_RUN=1``:
    rank ``rank`` of ``ngpu`` on the fake process group, ``DRY_RUN_RANK``); steps ``steady_from``…``steps``
    are the row's figures."""

    section: str  # "trainer" or "rank dry run"
    name: str
    config: str
    ngpu: int
    args: tuple[str, ...]
    steps: int
    steady_from: int
    timeout_s: int
    dry_run: bool = False
    rank: int = 0

    def command(self, dump_folder: str) -> tuple[list[str], dict[str, str]]:
        """The argv and the environment it adds, with the row's run folder."""
        env = {"NGPU": str(self.ngpu), "CONFIG_FILE": f"train_configs/{self.config}.toml"}
        if self.dry_run:
            env["DRY_RUN"] = "1"
        if self.rank:
            env["DRY_RUN_RANK"] = str(self.rank)
        argv = [
            "./run_train.sh",
            "--training.steps",
            str(self.steps),
            *COMMON,
            "--job.dump_folder",
            dump_folder,
        ]
        return [*argv, *self.args], env


@dataclass(frozen=True)
class KernelRow:
    """``python -m bench.kernel_split`` (the standalone 1B step under torch.profiler)."""

    name: str
    args: tuple[str, ...]
    timeout_s: int
    section: str = "kernel split"
    steps: dict = field(default_factory=lambda: {"warmup": 3, "timed": 5, "profiled": 2})

    def command(self, json_path: str) -> tuple[list[str], dict[str, str]]:
        step_args = [a for k, v in self.steps.items() for a in (f"--{k}", str(v))]
        return ["-m", "bench.kernel_split", *self.args, *step_args, "--json", json_path], {}


def scheme_args(config: str, scheme: str) -> tuple[str, ...]:
    """``bench.rank_dry_run``'s overrides of ``scheme`` for ``train_configs/{config}.toml``."""
    toml = tomllib.loads((ROOT / "train_configs" / f"{config}.toml").read_text())
    return tuple(SCHEMES[scheme](toml))


def dry(
    config: str,
    ngpu: int,
    scheme: str,
    timeout_s: int,
    steps: int = 10,
    extra: tuple[str, ...] = (),
    label: str = "",
    last_stage: bool = False,
) -> TrainRow:
    """``config`` dry-run as rank 0 of ``ngpu`` under ``scheme``, the steps after the first two steady
    (compilation, the communication counter's eager step; with ``boost.cudagraphs`` after the first three:
    the third records the graphs); ``extra`` more overrides, named by ``label`` in the row's name (a switch
    measured both ways: ``dry("7B", 16, "btp", 150, extra=(...), label="switch on")``);
    ``last_stage``: as the rank holding the pipeline's last stage (the head, the loss) instead."""
    args = (*scheme_args(config, scheme), *extra)
    name = (
        f"{config}@{ngpu} {scheme}" + (f" {label}" if label else "") + (" last stage" if last_stage else "")
    )
    rank = loss_rank(config, ngpu) if last_stage else 0
    # step 2 runs eagerly (the comm/step counter's), step 3 records the CUDA graphs (the 2026-11-28 H200:
    # 1,601 and 1,621 tokens/s, then 16,298): steady from step 4, or the figures mix recording with replay
    steady_from = 4 if CUDAGRAPHS in extra else 3
    return TrainRow("rank dry run", name, config, ngpu, args, steps, steady_from, timeout_s, True, rank)


def loss_rank(config: str, ngpu: int) -> int:
    """The rank holding the last pipeline stage of ``train_configs/{config}.toml`` at ``ngpu`` (its loss)."""
    parallelism = tomllib.loads((ROOT / "train_configs" / f"{config}.toml").read_text())["parallelism"]
    return pipeline_loss_rank(
        parallelism.get("pipeline_parallel_schedule", "1F1B"), parallelism["pipeline_parallel_degree"], ngpu
    )


ROWS: tuple[TrainRow | KernelRow, ...] = (
    dry("7B", 16, "btp", 150),
    dry("7B", 16, "megatron", 150),
    # the measured procedure: 12 steps, steps 6–12 steady (the first ones compile and warm up)
    TrainRow("trainer", "1B CoLA", "1B", 1, (), 12, 6, 180),
    TrainRow("trainer", "1B dense", "1B", 1, DENSE, 12, 6, 180),
    # LaX (the authors' gated, normalised crossing) against CoLA: the trainer's 1B and the 7B@16 rank
    TrainRow("trainer", "1B LaX", "1B", 1, LAX, 12, 6, 180),
    dry("7B", 16, "btp", 150, extra=LAX, label="lax"),
    # the gate's kron form: on the 2026-11-27 H100 the factored gate's small GEMMs took 50 of the 1B LaX
    # step's extra 81 ms (the kernel split below)
    TrainRow("trainer", "1B LaX kron", "1B", 1, LAX_KRON, 12, 6, 180),
    dry("7B", 16, "btp", 150, extra=LAX_KRON, label="lax kron"),
    # where the kron form's time goes: the 1B step split by kernel kind (the factored form's on the
    # 2026-11-28 H200: 51 of 270 ms in the gate's two small GEMMs)
    KernelRow("1B LaX kron", ("--linear", "lax", "--lax-gate-form", "kron"), 150),
    # the host's work taken off by SimpleFSDP + CUDA graphs: on the 2026-11-28 H200 the CoLA rank's replayed
    # steps ran 16,273 tokens/s against FSDP2's 12,350 (1.83× megatron as shipped); LaX and megatron the same way
    dry("7B", 16, "btp", 150, extra=(*SIMPLE_FSDP, CUDAGRAPHS), label="simple_fsdp cudagraphs"),
    dry("7B", 16, "btp", 150, extra=(*LAX, *SIMPLE_FSDP, CUDAGRAPHS), label="lax simple_fsdp cudagraphs"),
    dry("7B", 16, "megatron", 150, extra=(*SIMPLE_FSDP, CUDAGRAPHS), label="simple_fsdp cudagraphs"),
    # where a LaX step's extra time goes (GEMM, fused elementwise, ...): the 1B step split by kernel kind,
    # LaX beside CoLA on the same warm machine
    KernelRow("1B CoLA", ("--linear", "cola"), 150),
    KernelRow("1B LaX", ("--linear", "lax"), 150),
    # the 1B TOML's activation checkpointing before 2026-11-28 ("full"; now "none", which the planner ranks
    # first and the CoLA kernel split above runs): what the change bought, and dense at its other setting
    TrainRow("trainer", "1B CoLA full AC", "1B", 1, FULL_AC, 12, 6, 180),
    TrainRow("trainer", "1B dense full AC", "1B", 1, (*DENSE, *FULL_AC), 12, 6, 180),
    # the crossing on a rank's tokens (bench.compiled_cost: 1.17× CoLA's block, against 1.85×; the
    # 2026-11-27 H100: 0.92× the LaX rank's tokens/s, the rank host-bound)
    dry("7B", 16, "btp", 150, extra=(*LAX, SEQUENCE_PARALLEL), label="lax sp"),
    # the pair with the host's work taken off by CUDA graphs (SimpleFSDP's; LaX alone above): on the 2026-11-27
    # H100 SP took device time off the LaX rank (2.02× → 1.66× a CoLA step's, tokens/s × busy) that the host
    # did not let show
    dry(
        "7B",
        16,
        "btp",
        150,
        extra=(*LAX, SEQUENCE_PARALLEL, *SIMPLE_FSDP, CUDAGRAPHS),
        label="lax sp simple_fsdp cudagraphs",
    ),
    # boost.fsdp = "simple_fsdp" against the TOMLs' FSDP2 (issue 33: the host's per-parameter FSDP work;
    # measured on the 2026-11-27 leases, after the LaX rows since)
    dry("7B", 16, "btp", 150, extra=SIMPLE_FSDP, label="simple_fsdp"),
    dry("7B", 16, "megatron", 150, extra=SIMPLE_FSDP, label="simple_fsdp"),
    # the 1B rows under boost.cudagraphs (the 7B ones above), with full AC as first measured: under the graphs
    # the 1B TOML's AC none is modeled at 91.5 GiB (CoLA), the graphs' pool holding every kept activation twice
    # (boost.planning.perf_model.peak_memory)
    TrainRow("trainer", "1B CoLA cudagraphs", "1B", 1, (*FULL_AC, CUDAGRAPHS), 12, 6, 180),
    TrainRow("trainer", "1B dense cudagraphs", "1B", 1, (*DENSE, *FULL_AC, CUDAGRAPHS), 12, 6, 180),
    # the TOMLs' fsdp_reshard_after_forward = "never" measured the other way, for both schemes
    dry("7B", 16, "btp", 150, extra=RESHARD_DEFAULT, label="reshard default"),
    dry("7B", 16, "megatron", 150, extra=RESHARD_DEFAULT, label="reshard default"),
    # the planner's micro-batch for 7B@16 on 80 GB (layout_planner --config train_configs/7B.toml --gpus 16
    # --memory-gib 80): its measured peak against the model's, and its tokens/s
    dry("7B", 16, "btp", 150, extra=("--training.local_batch_size", "20"), label="b 20"),
    # the same advice under SimpleFSDP + CUDA graphs, whose pool the memory model counts as the kept
    # activations twice (fitted on three micro-batch-4 peaks): 11 (69.3 GiB modeled; tests/unit/
    # test_micro_batch_advice.py::test_advice_reads_cuda_graphs_from_the_toml's layout)
    dry(
        "7B",
        16,
        "btp",
        150,
        extra=(*SIMPLE_FSDP, CUDAGRAPHS, "--training.local_batch_size", "11"),
        label="simple_fsdp cudagraphs b 11",
    ),
    # attention kernels (issue 42): FlexAttention against SDPA on the trainer's 1B, causal and with documents
    # masked (block_causal; SDPA takes it as a boolean mask, every score computed)
    TrainRow("trainer", "1B CoLA flex", "1B", 1, FLEX, 12, 6, 240),
    TrainRow("trainer", "1B CoLA sdpa block_causal", "1B", 1, BLOCK_CAUSAL, 12, 6, 180),
    TrainRow("trainer", "1B CoLA flex block_causal", "1B", 1, (*FLEX, *BLOCK_CAUSAL), 12, 6, 240),
    # context parallelism: the 7B TOML's long-window override (its header: 32k over cp 4 at 16 GPUs, the
    # planner's peak 51.5 GiB), through torch's ring (SDPA, causal) and FlexAttention's all-gather
    dry("7B", 16, "btp", 300, extra=LONG_WINDOWS, label="32k cp 4"),
    dry(
        "7B", 16, "btp", 300, extra=(*LONG_WINDOWS, *FLEX, *BLOCK_CAUSAL), label="32k cp 4 flex block_causal"
    ),
    dry("7B", 16, "btp", 150, extra=(SEQUENCE_PARALLEL,), label="sp"),  # CoLA's σ on a rank's tokens
    dry("7B", 16, "vanilla", 150),
    dry("3B", 8, "btp", 150),
    dry("3B", 8, "vanilla", 150),
    dry("3B", 8, "megatron", 150),
    KernelRow("1B dense", ("--linear", "full"), 150),
    dry("13B", 8, "btp", 240),
    dry("30B", 16, "btp", 300),
    # the pipeline's last stage (DRY_RUN_RANK): the head, its logits and the loss, which the memory model's
    # bound counts and rank 0's stage does not hold
    dry("13B", 8, "btp", 240, last_stage=True),
    dry("30B", 16, "btp", 300, last_stage=True),
)


@dataclass
class Result:
    """What a row's run gave (``bench.gpu_report`` measures, ``bench.gpu_report_markdown`` renders)."""

    row: TrainRow | KernelRow
    status: str  # "ok", "failed", "timed out", "not run"
    seconds: float = 0.0
    error: str = ""
    values: dict = field(default_factory=dict)


def display(row: TrainRow | KernelRow) -> str:
    """The row's command as a user types it (run folder and result file left out)."""
    if isinstance(row, TrainRow):
        argv, env = row.command("DIR")
        argv = [a for a in argv if a not in ("--job.dump_folder", "DIR")]
    else:
        argv, env = row.command("OUT.json")
        argv = ["python", *argv[:-2]]
    return " ".join([*(f"{k}={v}" for k, v in env.items()), *map(shlex.quote, argv)])

"""``bench.gpu_report``'s results as ``bench/results/gpu.md``: a table per section and the GPU goals' rows."""

from __future__ import annotations

from bench.gpu_rows import Result, display
from bench.kernel_split import KINDS

# The GPU goals (issues 33 and 41; 40 for LaX): (what, row(s), how it is read, target). "ratio": the first
# row's tokens/s over the second's, at least the target; "cost": the first row's step over the second's
# (their tokens/s the other way round), at most the target.
GOALS = (
    ("7B@16 btp: GPU busy over the steady steps", "7B@16 btp", "busy", 0.90),
    ("7B@16 btp: tokens/s per device", "7B@16 btp", "tps", 15_800),
    ("7B@16: btp / megatron tokens/s", ("7B@16 btp", "7B@16 megatron"), "ratio", 1.6),
    # the same three on the opt-in path that ran fastest (SimpleFSDP + CUDA graphs; not the TOML's default,
    # docs/design.md says why), against megatron as shipped (it gained nothing from either)
    ("7B@16 btp simple_fsdp cudagraphs: GPU busy", "7B@16 btp simple_fsdp cudagraphs", "busy", 0.90),
    (
        "7B@16 btp simple_fsdp cudagraphs: tokens/s per device",
        "7B@16 btp simple_fsdp cudagraphs",
        "tps",
        15_800,
    ),
    (
        "7B@16: btp simple_fsdp cudagraphs / megatron tokens/s",
        ("7B@16 btp simple_fsdp cudagraphs", "7B@16 megatron"),
        "ratio",
        1.6,
    ),
    ("trainer: 1B CoLA / dense tokens/s", ("1B CoLA", "1B dense"), "ratio", 1.6),
    ("trainer: 1B LaX step / CoLA step", ("1B LaX", "1B CoLA"), "cost", 1.05),
    ("7B@16 btp: LaX step / CoLA step", ("7B@16 btp lax", "7B@16 btp"), "cost", 1.05),
    ("trainer: 1B LaX kron step / CoLA step", ("1B LaX kron", "1B CoLA"), "cost", 1.05),
    ("7B@16 btp: LaX kron step / CoLA step", ("7B@16 btp lax kron", "7B@16 btp"), "cost", 1.05),
    (
        "7B@16 btp simple_fsdp cudagraphs: LaX step / CoLA step",
        ("7B@16 btp lax simple_fsdp cudagraphs", "7B@16 btp simple_fsdp cudagraphs"),
        "cost",
        1.05,
    ),
)


def _cell(text: str) -> str:
    """A table cell of an error: its own bars escaped, a long one cut."""
    text = text.replace("|", "\\|")
    return text if len(text) <= 300 else text[:297] + "..."


def _failed(r: Result, columns: int) -> str:
    return f"| {r.row.name} | **{r.status}**: {_cell(r.error)} |" + " |" * (columns - 2)


def _busy(v: dict) -> str:
    if v["busy"] is None:
        return f"n/a ({v['busy_note']})"
    fraction, samples = v["busy"]
    return f"{100 * fraction:.0f}% ({samples})"


def _run_table(results: list[Result], with_layout: bool) -> list[str]:
    head = ["row", "layout", "steps (steady)", "tokens/s per device: median (min–max)", "step s", "MFU %"]
    head += ["peak GiB reserved", "GPU busy (samples)", "BOOST start-up", "wall s"]
    if not with_layout:
        head.remove("layout")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if r.status != "ok" and not r.values:
            lines.append(_failed(r, len(head)))
            continue
        v = r.values
        low, high = v["tps_range"]
        mfu = f"{v['mfu'][0]:.1f}–{v['mfu'][1]:.1f}" if v["mfu"] else "—"
        name = r.row.name if r.status == "ok" else f"{r.row.name} (**{r.status}**: {_cell(r.error)})"
        cells = [name, v["layout"], v["steps"], f"{v['tps']:,.0f} ({low:,.0f}–{high:,.0f})"]
        cells += [
            f"{v['step_s']:.3f}",
            mfu,
            f"{v['memory_gib']:.2f}",
            _busy(v),
            v["startup"],
            f"{r.seconds:.0f}",
        ]
        if not with_layout:
            del cells[1]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _kernel_table(results: list[Result]) -> list[str]:
    head = ["row", "steps", "step ms", "tokens/s", "kernel ms/step", *(f"{k} %" for k in KINDS)]
    head += ["peak GiB allocated", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    tops = []
    for r in results:
        if r.status != "ok":
            lines.append(_failed(r, len(head)))
            continue
        v = r.values
        total = sum(v["kernel_us_per_step"].values())
        shares = [f"{100 * v['kernel_us_per_step'][k] / total:.1f}" for k in KINDS]
        peak = f"{v['peak_gib']:.2f}" if v.get("peak_gib") is not None else "—"
        steps = ", ".join(f"{n} {kind}" for kind, n in r.row.steps.items())
        cells = [
            r.row.name,
            steps,
            f"{1000 * v['step_s']:.1f}",
            f"{v['tokens_per_s']:,.0f}",
            f"{total / 1000:.1f}",
        ]
        lines.append("| " + " | ".join([*cells, *shares, peak, f"{r.seconds:.0f}"]) + " |")
        tops.append(
            f"- {r.row.name}: "
            + "; ".join(f"`{name[:90]}` {100 * us / total:.1f}%" for name, us in v["top"][:6])
        )
    return [*lines, "", "Top kernels (share of the profiled device time):", *tops]


def _goal_rows(results: list[Result]) -> list[str]:
    measured_rows = {r.row.name: r.values for r in results if r.values and r.row.section != "kernel split"}
    partial = {r.row.name for r in results if r.values and r.status != "ok"}
    lines = ["| goal | target | measured |", "|---|---|---|"]
    for what, rows, how, target in GOALS:
        names = rows if isinstance(rows, tuple) else (rows,)
        if not all(n in measured_rows for n in names):
            measured = "row not measured"
        elif how == "busy":
            busy = measured_rows[names[0]]["busy"]
            measured = f"{100 * busy[0]:.0f}%" if busy else "n/a"
        elif how == "tps":
            measured = f"{measured_rows[names[0]]['tps']:,.0f}"
        elif how == "ratio":
            measured = f"{measured_rows[names[0]]['tps'] / measured_rows[names[1]]['tps']:.2f}×"
        else:
            measured = f"{measured_rows[names[1]]['tps'] / measured_rows[names[0]]['tps']:.2f}×"
        shown = {"busy": f"≥ {100 * target:.0f}%", "tps": f"≥ {target:,}", "ratio": f"≥ {target}×"}.get(
            how, f"≤ {target}×"
        )
        if partial.intersection(names):
            measured += " (a row failed: from the steps it logged)"
        lines.append(f"| {what} | {shown} | {measured} |")
    return lines


def render(
    results: list[Result],
    device: str,
    torch_version: str,
    date: str,
    command: str,
    wall_s: float,
    compile_cache: str,
    checkout: str = "?",
) -> str:
    """The whole of ``bench/results/gpu.md``."""
    section = {
        s: [r for r in results if r.row.section == s] for s in ("trainer", "rank dry run", "kernel split")
    }
    lines = [
        f"# One GPU: {device}, torch {torch_version}, {date}, checkout {checkout}",
        "",
        f"`{command}` ({wall_s:.0f} s; {compile_cache}). Written by the command; each row's own command "
        "is under \"Commands\". Tokens/s is torchtitan's, per device (the rank's tokens/s over tp·pp·cp); "
        "the step time follows from it (the rank's tokens per step / (tokens/s · tp·pp·cp)); memory is "
        "torchtitan's peak reserved; GPU busy is the mean of NVML's utilization samples (what nvidia-smi's "
        "utilization.gpu reads), every 100 ms, between the log lines that bound the steady steps. Dry runs "
        "are rank 0 of N on the fake process group: compute only, every collective a no-op.",
        "",
        "## Trainer, one GPU",
        "",
        *_run_table(section["trainer"], with_layout=False),
        "",
        "## Rank dry runs (rank 0 of N)",
        "",
        *_run_table(section["rank dry run"], with_layout=True),
        "",
        "## 1B step by kernel kind (standalone: each block compiled, fused AdamW, bf16 autocast, 4 × 4096, no AC)",
        "",
        *_kernel_table(section["kernel split"]),
        "",
        "## The GPU goals",
        "",
        *_goal_rows(results),
        "",
        "## Commands",
        "",
        *(f"- {r.row.section}, {r.row.name}: `{display(r.row)}`" for r in results),
        "",
    ]
    return "\n".join(lines)

"""The reference paper's measurements and the step-time model's predictions beside them.

The paper (DESIGN §7): A100-80GB, bf16, s = 4096, micro-batch 4; seconds per iteration for the dense
model under Megatron TP, the low-rank model under vanilla TP, and BOOST (btp), plus one row of
per-layer forward communication (7B, TP4).

Paper convention (assumption, docs/perf_model.md): the table's "seconds per iteration" is read as
seconds per micro-batch of 4 × 4096 tokens, i.e. ``step time / m``, with
``m = paper_microbatches(pp) = max(1, pp - 1)``. The measured 13B/PP2 and 30B/PP4 rows both sit at
≈2× a stage's work per micro-batch, which is 1F1B's ``(m + p - 1)/m`` for m = p - 1 (bubble ½);
m = p (1.5×, 1.75×) and m = 1 (p×) fit worse. ``predict_step_time`` itself defaults to the same m.

Example::

    >>> row = paper_table()[0]
    >>> row["flavor"], row["tp"], row["scheme"], row["reported"]
    ('1B', 1, 'megatron', 0.85)
    >>> abs(row["rel_error"]) < 0.15
    True
"""

from __future__ import annotations

from boost.planning.comm_volume import per_layer
from boost.planning.perf_model.hardware import Hardware, get_hardware
from boost.planning.perf_model.step_time import collective_time, model_args, predict_step_time

# (flavor, tp, pp): seconds per iteration for megatron (full), vanilla, btp; A100-80GB, bf16, s=4096, b=4
PAPER_STEP_TIMES = {
    ("1B", 1, 1): (0.85, 0.56, 0.59),
    ("3B", 2, 1): (1.14, 1.41, 0.78),
    ("7B", 4, 1): (1.06, 1.64, 0.72),
    ("13B", 4, 2): (2.07, 2.42, 1.30),
    ("30B", 4, 4): (2.43, 2.58, 1.27),
}
PAPER_COLUMNS = ("megatron", "vanilla", "btp")  # the order of PAPER_STEP_TIMES' three numbers
# 7B, b=4, s=4096, TP4: per-layer forward communication (GiB, ms)
PAPER_COMM_7B = {"megatron": (0.25, 2.01), "vanilla": (1.32, 9.87), "btp": (0.22, 1.85)}


def paper_microbatches(pp: int) -> int:
    """Micro-batches per step assumed for the paper's PP rows (module docstring): ``max(1, pp - 1)``.

    >>> [paper_microbatches(pp) for pp in (1, 2, 4)]
    [1, 1, 3]
    """
    return max(1, pp - 1)


def forward_comm_per_layer(
    flavor: str,
    scheme: str,
    tp: int,
    *,
    hardware: str | Hardware,
    micro_batch: int,
    seq_len: int,
    vocab_size: int = 32000,
) -> tuple[float, float]:
    """(GiB, seconds) of one layer's forward TP collectives."""
    hw = get_hardware(hardware)
    args = model_args(flavor, scheme, vocab_size)
    vol = per_layer(args, scheme, micro_batch * seq_len)["forward"]
    elements = sum(e for _, e in vol.values())
    return elements * 2 / 2**30, collective_time(vol, tp, hw)


def paper_table(hardware: str | Hardware = "a100") -> list[dict]:
    """One row per paper cell: layout, scheme, predicted and reported seconds, relative error."""
    rows = []
    for (flavor, tp, pp), reported in PAPER_STEP_TIMES.items():
        for scheme, ref in zip(PAPER_COLUMNS, reported):
            m = paper_microbatches(pp)
            pred = (
                predict_step_time(
                    flavor, scheme, tp, pp, hardware=hardware, micro_batch=4, seq_len=4096, num_microbatches=m
                )
                / m
            )
            rows.append(
                dict(
                    flavor=flavor,
                    tp=tp,
                    pp=pp,
                    scheme=scheme,
                    predicted=pred,
                    reported=ref,
                    rel_error=(pred - ref) / ref,
                )
            )
    for scheme, (gib, ms) in PAPER_COMM_7B.items():
        pred_gib, pred_s = forward_comm_per_layer(
            "7B", scheme, 4, hardware=hardware, micro_batch=4, seq_len=4096
        )
        rows.append(
            dict(
                flavor="7B",
                tp=4,
                pp=1,
                scheme=f"{scheme} comm/layer fwd",
                predicted=pred_s * 1e3,
                reported=ms,
                rel_error=(pred_s * 1e3 - ms) / ms,
                gib=pred_gib,
                reported_gib=gib,
            )
        )
    return rows


def print_paper_table(hardware: str | Hardware = "a100") -> None:
    """``paper_table`` as text: one line per cell, seconds (step times) or ms (communication)."""
    print(f"{'layout':<16}{'scheme':<26}{'predicted':>10}{'paper':>8}{'error':>8}")
    for row in paper_table(hardware):
        layout = f"{row['flavor']} TP{row['tp']}" + (f"xPP{row['pp']}" if row["pp"] > 1 else "")
        unit = " ms" if "comm" in row["scheme"] else " s"
        print(
            f"{layout:<16}{row['scheme']:<26}{row['predicted']:>8.3f}{unit}{row['reported']:>7.2f}"
            f"{100 * row['rel_error']:>+7.1f}%"
        )

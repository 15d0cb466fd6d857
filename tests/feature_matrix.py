"""What is supported: every combination of tensor-parallel scheme, compile, activation checkpointing
and layout that BOOST runs, and the ones it refuses. One list, read by tests/end_to_end/test_feature_matrix.py
(each row a short run through the real trainer, its losses against a reference run of the same
model) and linked from the README.

Rows cover every pair of {btp, vanilla, megatron} × {eager, compiled} × {AC none, full, lowrank} ×
{tp, fsdp×tp, pp×tp} at least once (a pairwise design: the full product is 54 runs), and the
block-causal mask (``boost.attn_mask_type``) once with each scheme, AC mode, layout and either compile. A
row's reference is the same model with the same mask, eager and without AC, at the same data-parallel
degree — a data-parallel rank reads its own documents, so only runs with one DP degree see one set of
samples: ``1`` for tp and pp×tp rows, ``fsdp2`` (2 processes) for fsdp×tp rows. Block-causal rows read
packed short documents (``PACKED_DOCUMENTS``: several to a window), where the mask changes the loss.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from boost.training.rules import pipeline_loss_rank

# The model each scheme trains: BTP and vanilla factor the projections (vanilla shards r, so it
# cannot group them), Megatron is the dense baseline.
MODELS: dict[str, tuple[str, ...]] = {
    "btp": ("--boost.linear", "cola", "--boost.tp_scheme", "btp"),
    "vanilla": (
        "--boost.linear",
        "cola",
        "--boost.tp_scheme",
        "vanilla",
        "--boost.no-group-linears",
        "--boost.norm",
        "sync",
    ),
    "megatron": ("--boost.linear", "full", "--boost.tp_scheme", "megatron"),
}

LAYOUTS: dict[str, tuple[int, tuple[str, ...]]] = {  # name -> (processes, overrides)
    "tp": (2, ("--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1")),
    "fsdp×tp": (
        4,
        ("--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "2"),
    ),
    "pp×tp": (
        4,
        (
            "--parallelism.tensor_parallel_degree",
            "2",
            "--parallelism.pipeline_parallel_degree",
            "2",
            "--parallelism.data_parallel_shard_degree",
            "1",
        ),
    ),
}

_CP = ("--parallelism.context_parallel_degree", "2")
# Context parallelism: the sequence over the cp ranks (the load balancer's head-tail chunks), alone, with TP,
# over FSDP's dp_shard × cp and under PP; a row's reference is one process (fsdp×cp: fsdp2, the data-parallel
# degree: CP ranks read the same samples).
LAYOUTS.update(
    {
        "cp4": (
            4,
            ("--parallelism.context_parallel_degree", "4", "--parallelism.data_parallel_shard_degree", "1"),
        ),
        "cp×tp": (
            4,
            (
                *_CP,
                "--parallelism.tensor_parallel_degree",
                "2",
                "--parallelism.data_parallel_shard_degree",
                "1",
            ),
        ),
        "fsdp×cp": (4, (*_CP, "--parallelism.data_parallel_shard_degree", "2")),
        "pp×cp": (
            4,
            (
                *_CP,
                "--parallelism.pipeline_parallel_degree",
                "2",
                "--parallelism.data_parallel_shard_degree",
                "1",
            ),
        ),
    }
)

REFERENCES: dict[str, tuple[int, tuple[str, ...]]] = {  # data-parallel degree -> (processes, overrides)
    "1": (1, ()),
    "fsdp2": (2, ("--parallelism.data_parallel_shard_degree", "2")),
}


def model(scheme: str, lax: bool = False) -> tuple[str, ...]:
    """The overrides of the model ``scheme`` trains: its ``MODELS`` entry, or LaX for it (``lax``: the
    low-rank schemes' CoLA model with the authors' latent crossing, the default gate)."""
    if not lax:
        return MODELS[scheme]
    args = list(MODELS[scheme])
    args[args.index("cola")] = "lax"
    return tuple(args)


@dataclass(frozen=True)
class Row:
    scheme: str
    compiled: bool
    ac: str
    layout: str
    precision: str = "float32"  # training.mixed_precision_param; the reference is always float32
    fsdp: str = "fully_shard"  # boost.fsdp, where FSDP wraps
    mask: str = "causal"  # boost.attn_mask_type; block_causal rows read PACKED_DOCUMENTS
    lax: bool = False  # LaX instead of CoLA (btp and vanilla rows)
    sp: bool = False  # boost.sequence_parallel (btp: each latent on a rank's tokens)
    schedule: str = "1F1B"  # parallelism.pipeline_parallel_schedule (pp× layouts)

    @property
    def name(self) -> str:
        name = f"{self.scheme}-{'compiled' if self.compiled else 'eager'}-ac_{self.ac}-{self.layout}"
        name = name if self.precision == "float32" else f"{name}-{self.precision}"
        name = name if self.mask == "causal" else f"{name}-{self.mask}"
        name = name if self.fsdp == "fully_shard" else f"{name}-{self.fsdp}"
        name = f"{name}-sp" if self.sp else name
        name = name if self.schedule == "1F1B" else f"{name}-{self.schedule}"
        return f"lax-{name}" if self.lax else name

    @property
    def reference(self) -> str:
        return "fsdp2" if self.layout.startswith("fsdp×") else "1"

    def overrides(self) -> list[str]:
        args = [
            *model(self.scheme, self.lax),
            *LAYOUTS[self.layout][1],
            "--boost.activation_checkpoint",
            self.ac,
        ]
        if self.compiled:
            args += ["--compile.enable", "--compile.backend", "aot_eager"]
        if self.precision != "float32":
            args += ["--training.mixed_precision_param", self.precision]
        if self.fsdp != "fully_shard":
            args += ["--boost.fsdp", self.fsdp]
        if self.sp:
            args += ["--boost.sequence_parallel"]
        if self.schedule != "1F1B":
            args += ["--parallelism.pipeline_parallel_schedule", self.schedule]
        return args

    @property
    def loss_rank(self) -> int:
        """The rank that logs the loss (pp 2 × tp 2: rank 2, the last stage's first, or rank 0 where a
        V-shaped schedule puts the last stage beside the first). A wrong one logs -1 and fails the row."""
        pp = 2 if self.layout.startswith("pp×") else 1
        return pipeline_loss_rank(self.schedule, pp, LAYOUTS[self.layout][0])


def mask_overrides(mask: str, documents: Path) -> list[str]:
    """The mask of a row or reference: causal on the default corpus, block_causal on ``documents``
    (``packed_documents``)."""
    if mask == "causal":
        return []
    return [
        "--boost.attn_mask_type",
        mask,
        "--training.dataset",
        "local",
        "--training.dataset_path",
        str(documents),
    ]


def packed_documents(folder: Path, count: int = 1500) -> Path:
    """``folder/documents.jsonl``: short documents (the standard library's paragraphs of 40-400 characters,
    ~10-100 tokens), so a 64-token window packs several of them and cuts some."""
    from boost.training.data.stdlib_corpus import stdlib_paragraphs

    path = folder / "documents.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in stdlib_paragraphs("train", count)))
    return path


SUPPORTED: list[Row] = [
    Row("btp", False, "none", "tp"),
    Row("btp", True, "lowrank", "tp"),  # compiled low-rank AC over FSDP2: the block-causal row below
    Row("btp", True, "full", "pp×tp", schedule="Interleaved1F1B"),  # two stages a rank, compiled
    Row("btp", False, "lowrank", "pp×tp"),
    Row("vanilla", True, "full", "tp"),
    Row("vanilla", True, "none", "fsdp×tp"),
    Row("vanilla", False, "full", "pp×tp"),
    Row("megatron", True, "none", "pp×tp"),
    Row("megatron", False, "full", "fsdp×tp"),
    # bf16 as the shipped configs train (FSDP2's mixed precision, at a shard degree of 1 under plain TP)
    Row("btp", False, "none", "fsdp×tp", "bfloat16"),
    Row("megatron", False, "none", "tp", "bfloat16"),
    Row("vanilla", False, "none", "tp", "bfloat16"),
    Row("btp", False, "none", "pp×tp", "bfloat16"),  # stages exchange bf16 activations (13B, 30B as shipped)
    # FSDP's gathers and reductions traced into the compiled blocks (SimpleFSDP); btp with low-rank AC in
    # fp32 is held to FSDP2 under inductor, the shipped backend (test_feature_matrix.py's GPU rows' layout)
    Row("megatron", True, "full", "fsdp×tp", "bfloat16", fsdp="simple_fsdp"),
    # documents packed into windows, each attending within itself (SDPA's boolean mask on this CPU)
    Row("btp", True, "lowrank", "fsdp×tp", mask="block_causal"),
    Row("vanilla", False, "full", "pp×tp", mask="block_causal"),  # masks split into pipeline micro-batches
    Row("megatron", True, "none", "tp", mask="block_causal"),
    # context parallelism: torch's ring over the CPU's SDPA kernel (causal), all-gathered keys and values
    # under the block-causal mask; every TP scheme at cp 2 × tp 2, cp 4, FSDP over dp_shard × cp, PP
    Row("btp", True, "lowrank", "cp×tp", lax=True, sp=True),  # LaX, each latent on a rank's tokens (below)
    Row("vanilla", False, "full", "cp×tp", mask="block_causal"),
    Row("megatron", True, "none", "cp×tp"),
    Row("btp", False, "none", "cp4", mask="block_causal"),
    Row("btp", True, "full", "fsdp×cp", mask="block_causal"),
    Row("btp", False, "none", "pp×cp"),
    # ... and LaX on each of them (its crossing on a rank's tokens of the window, the carry across stages)
    Row("btp", False, "full", "cp4", mask="block_causal", lax=True),
    Row("btp", False, "none", "fsdp×cp", lax=True),
    Row("btp", False, "full", "pp×cp", lax=True),
    # LaX (the authors' gated, normalised crossing) on each scheme and layout CoLA runs: its carry crosses
    # pipeline stages, its norm and gate are recomputed by low-rank AC, FSDP shards them, compile traces them
    Row("btp", False, "lowrank", "fsdp×tp", lax=True),  # the eager replay of each latent, FSDP2's shards
    Row("vanilla", True, "full", "tp", lax=True),
    Row("vanilla", False, "none", "fsdp×tp", lax=True),
    # a zero-bubble schedule's split backward over LaX's carries (views of the DTensors' local tensors); with
    # full AC it recomputed each block per parameter group (104 s against 1F1B's 16 s: job_warnings)
    Row("vanilla", False, "none", "pp×tp", lax=True, schedule="InterleavedZeroBubble"),
    # btp's sequence parallelism (each latent on a rank's tokens between a reduce-scatter and an all-gather):
    # compiled low-rank AC keeping both halves, on a context-parallel rank's share of the window (the cp×tp
    # row above); the eager replay of them (twice a block under a V-shaped zero-bubble schedule's split
    # backward) and the carry's rows across stages; SimpleFSDP's gathered norm and gate read on a rank's rows
    # spelt as torch also reads it: torchtitan's own TensorBoard rank knows "ZBVZeroBubble" alone
    Row("btp", False, "lowrank", "pp×tp", lax=True, sp=True, schedule="zbvzerobubble"),
    Row("btp", True, "none", "fsdp×tp", "bfloat16", fsdp="simple_fsdp", lax=True, sp=True),
    # DualPipeV: the V-shaped stages of ZBV, each forward paired with a backward (torch's OVERLAP_F_B, run
    # in order: infra/pipeline.py's without_expert_overlap), the dense model's TP collectives inside both
    Row("megatron", False, "none", "pp×tp", schedule="DualPipeV"),
]

# Refused before any process starts: (processes, overrides, a phrase the refusal must contain).
REFUSED: list[tuple[int, tuple[str, ...], str]] = [
    (
        2,
        (*MODELS["vanilla"], *LAYOUTS["tp"][1], "--boost.activation_checkpoint", "lowrank"),
        "boost.activation_checkpoint",
    ),
    (
        2,
        (*MODELS["megatron"], *LAYOUTS["tp"][1], "--boost.activation_checkpoint", "lowrank"),
        "boost.activation_checkpoint",
    ),
    (
        1,
        ("--boost.activation_checkpoint", "lowrank"),
        "boost.activation_checkpoint",
    ),  # TP = 1: nothing r-wide
    # no context-parallel varlen (torch's nor torchtitan's); a window that does not split into the cp ranks'
    # head and tail chunks
    (2, (*_CP, "--boost.attn_type", "varlen", "--boost.attn_mask_type", "block_causal"), "boost.attn_type"),
    (2, (*_CP, "--training.seq_len", "66"), "training.seq_len"),
    (1, ("--activation_checkpoint.mode", "full"), "activation_checkpoint.mode"),  # one AC switch
    (2, (*LAYOUTS["tp"][1], "--boost.no-group-linears"), "boost.norm"),  # online needs one reader per norm
    (2, (*LAYOUTS["tp"][1], "--boost.tp_scheme", "vanilla", "--boost.norm", "sync"), "boost.group_linears"),
    (4, (*LAYOUTS["fsdp×tp"][1], "--boost.fsdp", "simple_fsdp"), "boost.fsdp"),  # not compiled
    # torch runs a zero-bubble schedule's split backward on eager stages only
    (
        4,
        (
            *LAYOUTS["pp×tp"][1],
            "--compile.enable",
            "--parallelism.pipeline_parallel_schedule",
            "ZBVZeroBubble",
        ),
        "parallelism.pipeline_parallel_schedule",
    ),
    # torch's V-shaped schedules run no forward-only pass ("can't steal_bwd_input")
    (
        4,
        (*LAYOUTS["pp×tp"][1], "--parallelism.pipeline_parallel_schedule", "ZBVZeroBubble"),
        "validation.enable",
    ),
    # CUDA graphs replay fixed addresses: FSDP2 gathers into new memory outside the graphs
    (4, (*LAYOUTS["fsdp×tp"][1], "--compile.enable", "--boost.cudagraphs"), "boost.cudagraphs"),
    # a CSV's actions would overrule the schedule's name, by which the rules above check it
    (
        4,
        (*LAYOUTS["pp×tp"][1], "--parallelism.pipeline_parallel_schedule_csv", "interleaved.csv"),
        "parallelism.pipeline_parallel_schedule_csv",
    ),
]

"""The largest micro-batch a training TOML's layout fits on a GPU of a given memory; and the smallest
context-parallel degree that fits its windows stretched to a longer sequence.

The layout is the TOML's (flavor, linear kind, TP scheme, AC mode, tp, pp, FSDP over the rest of the
GPUs, sequence length, compute dtype, compile); only the micro-batch moves. The micro-batch is what one
forward takes: ``training.local_batch_size`` without PP; under PP
``parallelism.pipeline_parallel_microbatch_size``, with the TOML's number of micro-batches ``m`` kept
(``local_batch_size = m × micro-batch``), since 1F1B holds ``min(m, pp)`` of them whatever ``m`` is.
Peaks are ``memory_per_gpu`` (``boost.planning.perf_model.peak_memory``: its formulas, its calibration, and what
it does not model); a micro-batch fits when its peak is at most ``usable_bytes`` of the GPU's memory.

Example::

    >>> toml = Path(__file__).resolve().parents[3] / "train_configs" / "7B.toml"
    >>> advice = advise_micro_batch(toml, gpus=16, gpu_memory_bytes=80 * 2**30)
    >>> advice.micro_batch, advice.overrides()
    (20, '--training.local_batch_size 20')
    >>> advise_long_sequence(toml, gpus=16, gpu_memory_bytes=80 * 2**30, seq_len=32768).overrides()
    '--training.seq_len 32768 --parallelism.context_parallel_degree 4'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from boost.planning.perf_model.peak_memory import (
    ACTIVATION_CALIBRATION,
    GIB,
    HEADROOM,
    WORKSPACE_BYTES,
    memory_per_gpu,
    usable_bytes,
)
from boost.training.model.args import FLAVORS
from boost.training.options import BoostOptions
from boost.training.rules import (
    AC_BY_MEMORY_KEPT,
    AC_MODES,
    ATTENTION_TYPES,
    KINDS,
    LAX_GATES,
    LINEAR_KINDS,
    RESHARD_POLICIES,
    SCHEMES,
    TP_SCHEMES,
    activation_checkpoint_problem,
    attention_layout_problem,
    attention_mask_problem,
    compiles_model,
    context_parallel_problem,
    data_parallel_degree,
    grouping_problem,
    lax_gate_form_problem,
    load_balancer_problem,
    microbatch_size_problem,
    pipeline_problem,
    reshards_after_forward,
    resolve_rank,
    sequence_parallel_length_problem,
    sequence_parallel_problem,
    tp_scheme_problem,
    tp_shape_problem,
    tp_sharded_dims,
    vanilla_rank_problem,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

# No GPU holds this many sequences of one micro-batch of any flavor: the search stops here.
LARGEST_MICRO_BATCH = 4096
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class TrainingLayout:
    """What a training TOML fixes of one GPU's memory: ``memory_per_gpu``'s inputs but the micro-batch."""

    path: str
    flavor: str
    rank: int
    linear: str
    scheme: str
    ac: str
    tp: int
    pp: int
    dp_shard: int  # -1: the GPUs that tp·pp·dp_replicate leave
    dp_replicate: int
    seq_len: int
    local_batch_size: int
    pp_microbatch_size: int
    dtype_bytes: int
    compiled: bool
    vocab_size: int
    reshard_policy: str  # parallelism.fsdp_reshard_after_forward
    cp: int = 1  # parallelism.context_parallel_degree
    attn_type: str = "sdpa"
    attn_mask_type: str = "causal"
    sequence_parallel: bool = False  # boost.sequence_parallel
    cudagraphs: bool = False  # boost.cudagraphs
    cp_load_balancer: str | None = "headtail"  # parallelism.context_parallel_load_balancer
    lax_gate: str = "tensorized"  # boost.lax_gate
    lax_gate_form: str = "factored"  # boost.lax_gate_form
    group_linears: bool = True  # boost.group_linears

    @classmethod
    def from_toml(cls, path: str | Path) -> TrainingLayout:
        """Read ``path``; ``ValueError`` naming the key when it lacks one the memory model needs or sets
        one it does not model (an optimizer other than Adam's)."""
        with open(path, "rb") as f:
            toml = tomllib.load(f)
        boost, training, par = toml.get("boost", {}), toml.get("training", {}), toml.get("parallelism", {})
        defaults = BoostOptions()

        def need(section: dict, name: str, key: str):
            if key not in section:
                raise ValueError(f"{path}: [{name}] {key} is not set; the planner reads it from the TOML")
            return section[key]

        optimizer = toml.get("optimizer", {}).get("name", "AdamW")
        if optimizer not in ("AdamW", "Adam"):
            raise ValueError(
                f"{path}: [optimizer] name = {optimizer!r}: the memory model counts Adam's states"
            )
        flavor = need(toml.get("model", {}), "model", "flavor")
        if flavor not in FLAVORS:
            raise ValueError(f"{path}: [model] flavor = {flavor!r} is not one of {sorted(FLAVORS)}")
        precision = training.get("mixed_precision_param", "bfloat16")
        if precision not in DTYPE_BYTES:
            raise ValueError(
                f"{path}: [training] mixed_precision_param = {precision!r} is not one of {list(DTYPE_BYTES)}"
            )
        reshard = par.get("fsdp_reshard_after_forward", "default")
        if reshard not in RESHARD_POLICIES:
            raise ValueError(
                f"{path}: [parallelism] fsdp_reshard_after_forward = {reshard!r} is not one of {RESHARD_POLICIES}"
            )
        compile_ = toml.get("compile", {})
        sections = {"training": training, "parallelism": par, "boost": boost}

        def whole(name: str, key: str, default: int | None, least: int, minus_one: bool = False) -> int:
            """``[name] key``, a whole number ≥ ``least`` (or -1 where ``minus_one``); ``default`` where unset
            (``None``: it must be set)."""
            value = need(sections[name], name, key) if default is None else sections[name].get(key, default)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not (value >= least or minus_one and value == -1)
            ):
                wanted = f"a whole number ≥ {least}" + (
                    ", or -1 (the GPUs the other degrees leave)" if minus_one else ""
                )
                raise ValueError(f"{path}: [{name}] {key} = {value!r}: must be {wanted}")
            return value

        def flag(key: str) -> bool:
            value = boost.get(key, getattr(defaults, key))
            if not isinstance(value, bool):
                raise ValueError(f"{path}: [boost] {key} = {value!r}: must be true or false")
            return value

        def known(key: str, choices: tuple[str, ...]) -> str:
            value = boost.get(key, getattr(defaults, key))
            if value not in choices:
                raise ValueError(f"{path}: [boost] {key} = {value!r} is unknown; choose one of {choices}")
            return value

        layout = cls(
            path=str(path),
            flavor=flavor,
            # the trainer's rule (torchtitan_ext.model), not the flavor's published rank
            rank=resolve_rank(
                FLAVORS[flavor].dim,
                whole("boost", "rank", defaults.rank, 0),
                boost.get("rank_ratio", defaults.rank_ratio),
            ),
            linear=known("linear", LINEAR_KINDS),
            scheme=known("tp_scheme", TP_SCHEMES),
            ac=known("activation_checkpoint", AC_MODES),
            tp=whole("parallelism", "tensor_parallel_degree", 1, 1),
            pp=whole("parallelism", "pipeline_parallel_degree", 1, 1),
            dp_shard=whole("parallelism", "data_parallel_shard_degree", -1, 1, minus_one=True),
            dp_replicate=whole("parallelism", "data_parallel_replicate_degree", 1, 1),
            # a window predicts each next token: 2 at least (the preflight's rule)
            seq_len=whole("training", "seq_len", None, 2),
            local_batch_size=whole("training", "local_batch_size", None, 1),
            pp_microbatch_size=whole(
                "parallelism", "pipeline_parallel_microbatch_size", 1, 1
            ),  # torchtitan's
            dtype_bytes=DTYPE_BYTES[precision],
            compiled=compiles_model(compile_.get("enable", False), compile_.get("components", ["model"])),
            vocab_size=whole("boost", "tokenizer_vocab_size", defaults.tokenizer_vocab_size, 1),
            reshard_policy=reshard,
            cp=whole("parallelism", "context_parallel_degree", 1, 1),
            attn_type=known("attn_type", ATTENTION_TYPES),
            attn_mask_type=boost.get("attn_mask_type", defaults.attn_mask_type),
            sequence_parallel=flag("sequence_parallel"),
            cudagraphs=flag("cudagraphs"),
            cp_load_balancer=par.get("context_parallel_load_balancer", "headtail"),
            lax_gate=known("lax_gate", LAX_GATES),
            # checked against the gate in problem() (rules.lax_gate_form_problem: its choices first)
            lax_gate_form=boost.get("lax_gate_form", defaults.lax_gate_form),
            group_linears=flag("group_linears"),
        )
        problem = layout.problem()
        if problem:
            raise ValueError(f"{path}: {problem}")
        if layout.tp == 1 and not SCHEMES[layout.scheme].takes(KINDS[layout.linear]):
            # no TP plan runs at one rank: the model is the kind's, as the trainer builds it whatever the scheme
            layout = dataclasses.replace(layout, scheme=KINDS[layout.linear].tp_scheme)
        return layout

    def problem(self) -> str | None:
        """The first of the preflight's layout rules (``boost.training.rules``) this layout breaks, as
        ``[section] key = value: what to change``; ``None`` where it keeps them all."""
        f = FLAVORS[self.flavor]
        sharded = tp_sharded_dims(self.scheme, f.n_heads, f.n_kv_heads, f.dim, f.ffn_dim)
        sharded["tokenizer_vocab_size"] = self.vocab_size
        checks = [
            (
                "boost",
                "attn_mask_type",
                self.attn_mask_type,
                attention_mask_problem(self.attn_type, self.attn_mask_type),
            ),
            ("boost", "tp_scheme", self.scheme, tp_scheme_problem(self.linear, self.scheme, self.tp)),
            (
                "boost",
                "lax_gate_form",
                self.lax_gate_form,
                lax_gate_form_problem(self.lax_gate, self.lax_gate_form),
            ),
            (
                "boost",
                "group_linears",
                self.group_linears,
                grouping_problem(self.scheme, self.group_linears, self.tp),
            ),
            ("parallelism", "tensor_parallel_degree", self.tp, tp_shape_problem(sharded, self.tp)),
            ("boost", "rank", self.rank, vanilla_rank_problem(self.scheme, self.rank, self.tp)),
            (
                "boost",
                "activation_checkpoint",
                self.ac,
                activation_checkpoint_problem(self.ac, self.scheme, self.tp),
            ),
            (
                "boost",
                "sequence_parallel",
                self.sequence_parallel,
                sequence_parallel_problem(self.sequence_parallel, self.scheme, self.seq_len, self.tp),
            ),
            (
                "boost",
                "attn_type",
                self.attn_type,
                attention_layout_problem(self.attn_type, self.cp, self.pp),
            ),
            (
                "parallelism",
                "context_parallel_load_balancer",
                self.cp_load_balancer,
                load_balancer_problem(self.cp_load_balancer, self.attn_type, self.cp),
            ),
            ("training", "seq_len", self.seq_len, self.sequence_problem(self.seq_len, self.cp)),
            (
                "parallelism",
                "pipeline_parallel_degree",
                self.pp,
                pipeline_problem(self.linear, self.pp, FLAVORS[self.flavor].n_layers),
            ),
            (
                "parallelism",
                "pipeline_parallel_microbatch_size",
                self.pp_microbatch_size,
                microbatch_size_problem(self.pp, self.local_batch_size, self.pp_microbatch_size),
            ),
        ]
        return next((f"[{s}] {k} = {v!r}: {why}" for s, k, v, why in checks if why), None)

    def sequence_problem(self, seq_len: int, cp: int) -> str | None:
        """What a window of ``seq_len`` needs to split over ``cp`` ranks and, under sequence parallelism,
        over the TP ranks (the preflight's rules), or ``None``."""
        return context_parallel_problem(
            cp, seq_len, self.attn_type, self.cp_load_balancer, self.tp, self.sequence_parallel
        ) or sequence_parallel_length_problem(self.sequence_parallel, self.scheme, seq_len, self.tp)

    @property
    def micro_batch(self) -> int:
        """Sequences per forward as the TOML has it."""
        return self.pp_microbatch_size if self.pp > 1 else self.local_batch_size

    @property
    def num_microbatches(self) -> int:
        return self.local_batch_size // self.pp_microbatch_size if self.pp > 1 else 1

    def fsdp_degree(self, gpus: int) -> int:
        """FSDP's data-parallel shard degree at ``gpus`` GPUs (its mesh is that × ``cp``); ``ValueError``
        where the layout does not divide them."""
        model_parallel = self.tp * self.pp * self.dp_replicate * self.cp
        if gpus % model_parallel:
            raise ValueError(
                f"{self.path} needs a multiple of tp × pp × dp_replicate × cp = {model_parallel} GPUs, not {gpus}"
            )
        dp = data_parallel_degree(
            gpus, tp=self.tp, pp=self.pp, cp=self.cp, dp_replicate=self.dp_replicate, dp_shard=self.dp_shard
        )
        if dp * self.tp * self.pp * self.cp != gpus:
            raise ValueError(f"{self.path}: its parallel degrees do not multiply to {gpus} GPUs")
        return dp // self.dp_replicate

    def peak(self, gpus: int, micro_batch: int, breakdown: bool = False) -> float | dict[str, float]:
        """``memory_per_gpu`` of this layout at ``gpus`` GPUs and ``micro_batch`` sequences per forward."""
        return memory_per_gpu(
            self.flavor,
            self.scheme,
            self.tp,
            self.pp,
            self.fsdp_degree(gpus),
            self.ac,
            micro_batch=micro_batch,
            seq_len=self.seq_len,
            num_microbatches=self.num_microbatches,
            vocab_size=self.vocab_size,
            linear=self.linear,
            dtype_bytes=self.dtype_bytes,
            compiled=self.compiled,
            rank=self.rank,
            reshard_after_forward=reshards_after_forward(self.reshard_policy, self.pp > 1),
            cp=self.cp,
            attn_type=self.attn_type,
            attn_mask_type=self.attn_mask_type,
            sequence_parallel=self.sequence_parallel,
            cudagraphs=self.cudagraphs,
            dp_replicate=self.dp_replicate,
            lax_gate=self.lax_gate,
            lax_gate_form=self.lax_gate_form,
            group_linears=self.group_linears,
            breakdown=breakdown,
        )

    def overrides(self, micro_batch: int) -> str:
        """The ``run_train.sh`` overrides that set ``micro_batch`` sequences per forward."""
        if self.pp == 1:
            return f"--training.local_batch_size {micro_batch}"
        return (
            f"--training.local_batch_size {self.num_microbatches * micro_batch} "
            f"--parallelism.pipeline_parallel_microbatch_size {micro_batch}"
        )


@dataclass(frozen=True)
class MicroBatchAdvice:
    """The largest micro-batch that fits, with the peaks that decide it."""

    layout: TrainingLayout
    gpus: int
    gpu_memory_bytes: float
    micro_batch: int
    peak: dict[str, float]  # memory_per_gpu's breakdown at micro_batch
    next_peak: float  # at micro_batch + 1: over usable_bytes (unless capped)
    shipped_peak: float  # at the TOML's micro-batch
    capped: bool = False  # micro_batch is LARGEST_MICRO_BATCH, where the search stops, not the memory

    @property
    def usable_bytes(self) -> float:
        return usable_bytes(self.gpu_memory_bytes)

    def overrides(self) -> str:
        return self.layout.overrides(self.micro_batch)

    def report(self) -> str:
        """What the CLI prints: the layout, the margin, the peaks and the override."""
        l, p = self.layout, self.peak
        terms = ", ".join(f"{k} {p[k] / GIB:.2f}" for k in ("states", "unsharded", "activations", "logits"))
        return "\n".join(
            [
                f"{l.path} on {self.gpus} GPUs of {self.gpu_memory_bytes / GIB:.1f} GiB: {l.flavor} {l.linear}, "
                f"{l.scheme}, tp {l.tp}, pp {l.pp}, FSDP {l.fsdp_degree(self.gpus)}, AC {l.ac}, seq {l.seq_len}, "
                f"{8 * l.dtype_bytes}-bit, {'compiled' if l.compiled else 'eager'}"
                + (f", cp {l.cp}" if l.cp > 1 else "")
                + (", sequence parallel" if l.sequence_parallel else "")
                + (", CUDA graphs (their pool: the kept activations twice)" if l.cudagraphs else "")
                + (f", {l.num_microbatches} micro-batches per step" if l.pp > 1 else ""),
                f"usable: {self.usable_bytes / GIB:.1f} GiB ({HEADROOM:.0%} of the GPU left for allocator "
                f"fragmentation over a long run, compile workspace and the driver); each peak counts "
                f"{WORKSPACE_BYTES / GIB:.0f} GiB outside the allocator (CUDA context, NCCL)",
                f"modelled: fp32 weights, grads and Adam m, v over FSDP; FSDP2's gathered weights and unsharded "
                f"grads; the activations AC {l.ac} keeps, × {min(l.num_microbatches, l.pp)} micro-batch(es) in "
                f"flight, + one layer live; fp32 logits; activations × {ACTIVATION_CALIBRATION} as measured on an "
                "H100 (docs/perf_model.md). Not: validation's forward at its own batch",
                f"micro-batch {l.micro_batch} (the TOML's): peak {self.shipped_peak / GIB:.1f} GiB",
                f"micro-batch {self.micro_batch} (largest that fits): peak {p['total'] / GIB:.1f} GiB ({terms}, "
                f"workspace {p['workspace'] / GIB:.2f})",
                (
                    f"micro-batch {self.micro_batch + 1} and above: not tried (the search stops at "
                    f"LARGEST_MICRO_BATCH = {LARGEST_MICRO_BATCH}, which fits)"
                    if self.capped
                    else f"micro-batch {self.micro_batch + 1}: peak {self.next_peak / GIB:.1f} GiB, over"
                ),
                f"set it with: {self.overrides()}",
            ]
        )


def advise_micro_batch(config: str | Path, gpus: int, gpu_memory_bytes: float) -> MicroBatchAdvice:
    """The largest micro-batch of ``config``'s layout at ``gpus`` GPUs whose peak fits a GPU of
    ``gpu_memory_bytes``; ``ValueError`` for memory ≤ 0, a GPU count the layout does not divide, or a
    layout that does not fit at micro-batch 1 (the message says by how much and what to change)."""
    if not gpu_memory_bytes > 0:
        raise ValueError(f"the GPU's memory must be positive, got {gpu_memory_bytes / GIB:g} GiB")
    layout = TrainingLayout.from_toml(config)
    budget = usable_bytes(gpu_memory_bytes)
    # the peak grows with the micro-batch (activations and logits are linear in it, nothing falls)
    peaks = [layout.peak(gpus, 1)]
    if peaks[0] > budget:
        raise ValueError(
            f"{config} on {gpus} GPUs does not fit at micro-batch 1: it peaks at {peaks[0] / GIB:.1f} GiB, "
            f"over the {budget / GIB:.1f} GiB usable of {gpu_memory_bytes / GIB:.1f}; use more GPUs (FSDP "
            "shards the states), a larger tp or pp, activation checkpointing, or a shorter seq_len"
        )
    while len(peaks) < LARGEST_MICRO_BATCH and peaks[-1] <= budget:
        peaks.append(layout.peak(gpus, len(peaks) + 1))
    capped = peaks[-1] <= budget  # every micro-batch up to the cap fits
    best = len(peaks) if capped else len(peaks) - 1
    return MicroBatchAdvice(
        layout=layout,
        gpus=gpus,
        gpu_memory_bytes=gpu_memory_bytes,
        micro_batch=best,
        peak=layout.peak(gpus, best, breakdown=True),
        next_peak=layout.peak(gpus, best + 1),
        shipped_peak=layout.peak(gpus, layout.micro_batch),
        capped=capped,
    )


@dataclass(frozen=True)
class LongSequenceAdvice:
    """The smallest context-parallel degree whose peak fits the TOML's layout and micro-batch at a longer
    sequence (the rest of the GPUs FSDP, as the TOML's ``data_parallel_shard_degree = -1`` gives them),
    under the TOML's activation checkpointing or, where no degree fits under it, the first mode that
    keeps less that fits."""

    layout: TrainingLayout  # the TOML's, at the long sequence, the chosen cp and AC mode
    gpus: int
    gpu_memory_bytes: float
    peaks: dict[int, float]  # cp -> peak at the TOML's micro-batch under the chosen AC, every degree tried
    # the TOML's AC mode where no degree fitted under it ("": the chosen mode is the TOML's), and its peaks
    toml_ac: str = ""
    toml_ac_peaks: dict[int, float] = dataclasses.field(default_factory=dict)  # cp -> peak, each over

    def overrides(self) -> str:
        cp = f" --parallelism.context_parallel_degree {self.layout.cp}" if self.layout.cp > 1 else ""
        ac = f" --boost.activation_checkpoint {self.layout.ac}" if self.toml_ac else ""
        return f"--training.seq_len {self.layout.seq_len}{cp}{ac}"

    @property
    def peak(self) -> float:
        return self.peaks[self.layout.cp]

    def report(self) -> str:
        l = self.layout
        tried = ", ".join(f"cp {cp}: {peak / GIB:.1f} GiB" for cp, peak in self.peaks.items())
        refused = (
            [
                f"AC {self.toml_ac} (the TOML's) fits at no cp: at cp {max(self.toml_ac_peaks)} it peaks at "
                f"{self.toml_ac_peaks[max(self.toml_ac_peaks)] / GIB:.1f} GiB; AC {l.ac} keeps less"
            ]
            if self.toml_ac
            else []
        )
        return "\n".join(
            [
                f"{l.path} on {self.gpus} GPUs of {self.gpu_memory_bytes / GIB:.1f} GiB at seq {l.seq_len}, "
                f"micro-batch {l.micro_batch} (the TOML's): {l.flavor} {l.linear}, {l.scheme}, tp {l.tp}, "
                f"pp {l.pp}, AC {l.ac}, {l.attn_type} {l.attn_mask_type}",
                f"usable: {usable_bytes(self.gpu_memory_bytes) / GIB:.1f} GiB; each rank holds seq/cp of every "
                f"window (docs/design.md §13), FSDP shards over the rest of the GPUs × cp",
                *refused,
                f"peaks: {tried}",
                (
                    f"cp {l.cp} (smallest that fits): FSDP {l.fsdp_degree(self.gpus)}, {l.seq_len // l.cp} tokens "
                    "of each window per rank"
                    if l.cp > 1
                    else f"no context parallelism needed: the whole window fits (FSDP {l.fsdp_degree(self.gpus)})"
                ),
                f"set it with: {self.overrides()}",
            ]
        )


def advise_long_sequence(
    config: str | Path, gpus: int, gpu_memory_bytes: float, seq_len: int
) -> LongSequenceAdvice:
    """``config``'s layout and micro-batch at ``seq_len``, over the smallest context-parallel degree (a
    divisor of what tp × pp × dp_replicate leave of ``gpus``, splitting the window as the preflight asks)
    whose peak fits a GPU of ``gpu_memory_bytes``. Under the TOML's activation checkpointing first; where
    no degree fits under it, under each mode that keeps less in turn (a TOML that keeps every activation
    at its own window, as the 1B does, recomputes at a long one); ``ValueError`` where none does (the
    message says what the largest degree peaks at and what to change)."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2 (a window predicts each next token), got {seq_len}")
    base = TrainingLayout.from_toml(config)
    budget = usable_bytes(gpu_memory_bytes)
    model_parallel = base.tp * base.pp * base.dp_replicate
    if gpus % model_parallel:
        raise ValueError(
            f"{config} needs a multiple of tp × pp × dp_replicate = {model_parallel} GPUs, not {gpus}"
        )
    room = gpus // model_parallel
    # the degrees the preflight takes: the window splits (under the TOML's balancer and sequence parallelism)
    # and the attention has a context-parallel path
    degrees = [
        cp
        for cp in range(1, room + 1)
        if room % cp == 0
        and not base.sequence_problem(seq_len, cp)
        and not attention_layout_problem(base.attn_type, cp, base.pp)
    ]
    if (
        not degrees
    ):  # cp 1 is refused only where the sequence itself is (sequence parallelism cannot split it)
        raise ValueError(f"{config}: seq {seq_len} {base.sequence_problem(seq_len, 1)}")
    keeping_less = AC_BY_MEMORY_KEPT[AC_BY_MEMORY_KEPT.index(base.ac) :]  # the TOML's first
    modes = [ac for ac in keeping_less if not activation_checkpoint_problem(ac, base.scheme, base.tp)]
    toml_ac_peaks: dict[int, float] = {}
    for ac in modes:
        peaks: dict[int, float] = {}
        for cp in degrees:
            layout = dataclasses.replace(base, seq_len=seq_len, cp=cp, dp_shard=-1, ac=ac)
            peaks[cp] = layout.peak(gpus, base.micro_batch)
            if peaks[cp] <= budget:
                toml_ac = "" if ac == base.ac else base.ac
                return LongSequenceAdvice(layout, gpus, gpu_memory_bytes, peaks, toml_ac, toml_ac_peaks)
        if ac == base.ac:
            toml_ac_peaks = peaks
    largest = max(degrees) if degrees else 1
    raise ValueError(
        f"{config} at seq {seq_len} does not fit {gpus} GPUs of {gpu_memory_bytes / GIB:.1f} GiB at its micro-batch "
        f"{base.micro_batch}: at cp {largest} under AC {modes[-1]} it peaks at "
        f"{peaks.get(largest, float('nan')) / GIB:.1f} GiB, over the {budget / GIB:.1f} GiB usable; use more GPUs, "
        "or a smaller --training.local_batch_size"
    )

"""The tensor-parallel schemes (btp, vanilla, megatron) as records of what each shards, the pre-norm and
activation-checkpoint modes they run, and the checks of a TP layout: the kind a scheme takes, the dims its
degree divides, grouping, the online norm, low-rank AC, sequence parallelism.

Example::

    >>> SCHEMES["btp"].residual_width(4096, tp=4), SCHEMES["vanilla"].residual_width(4096, tp=4)
    (1024, 4096)
    >>> tp_scheme_problem("full", "btp", tp=4)
    'the dense model (boost.linear = "full") uses tp_scheme = "megatron"'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from boost.training.rules.kinds import DENSE_KIND, KINDS, LinearKind


@dataclass(frozen=True)
class TPScheme:
    """What a tensor-parallel scheme shards and what it leaves whole, as every part of BOOST needs to
    know it: the TP plans, the pipeline's stage boundaries, the layout planner, the performance model
    and the communication volumes read these fields rather than compare scheme names.

    Per rank at TP degree ``t`` (``d`` hidden, ``f`` FFN hidden, ``r`` rank)::

        scheme    residual  heads, f    rank   collectives   linears   kinds
        btp       d/t       local (/t)  r      r wide        grouped   low-rank
        vanilla   d         whole       r/t    d wide        ungrouped low-rank
        megatron  d (s/t)   local (/t)  —      d wide        —         dense
    """

    name: str
    shards_residual: bool
    """The residual stream is sharded on its hidden dim (``d/t``); the pre-norms then read a sharded dim."""
    shards_heads: bool
    """Attention runs on the rank's ``n_heads/t`` heads and the MLP on its ``f/t`` columns (else whole)."""
    shards_rank: bool
    """The bottleneck rank dim is split ``t`` ways, so every latent is ``r/t`` wide on a rank."""
    low_rank: bool
    """It runs the low-rank kinds (``B·A``); else the dense baseline (``boost.linear = "full"``)."""
    sequence_parallel: str | None
    """What its sequence-parallel plan (``boost.sequence_parallel``) shards on the sequence: ``"residual"``
    (the residual stream between blocks, megatron's), ``"latent"`` (each bottleneck's r-wide latent
    between its reduce-scatter and all-gather, btp's), or ``None``: it has none."""

    @property
    def groups_linears(self) -> bool:
        """The grouped down-projections (one GEMM for q/k/v, one for gate/up) stay whole on a rank
        unless the rank dim is split, which would cut a grouped ``[r_q+r_k+r_v, d]`` factor across members."""
        return not self.shards_rank

    @property
    def rank_wide_collectives(self) -> bool:
        """Its collectives carry the r-wide latents (what low-rank AC keeps, and what the online norm
        rides in): the low-rank schemes that keep the rank dim whole."""
        return self.low_rank and not self.shards_rank

    def takes(self, kind: LinearKind) -> bool:
        """Whether it runs models of ``kind``: the dense plan the dense kind, the others the low-rank kinds."""
        return kind.low_rank == self.low_rank

    def kind_for(self, linear: str) -> str:
        """The linear kind a layout of this scheme runs where ``linear`` is asked for: the dense plan runs
        the dense model, whatever low-rank kind the other schemes run."""
        return linear if self.low_rank else DENSE_KIND

    def residual_width(self, dim: int, tp: int) -> int:
        """The hidden width of the residual stream on one rank."""
        return dim // tp if self.shards_residual else dim

    def local(self, size: int, tp: int) -> int:
        """A head count or the FFN width on one rank."""
        return size // tp if self.shards_heads else size

    def latent_width(self, rank: int, tp: int) -> int:
        """The width of one bottleneck latent on one rank."""
        return rank // tp if self.shards_rank else rank

    def residual_shape(
        self, batch: int, seq_len: int, dim: int, tp: int, sequence_parallel: bool
    ) -> tuple[int, int, int]:
        """The ``[b, s, d]`` residual stream on one rank, as it crosses a pipeline stage boundary."""
        if self.splits(sequence_parallel, tp, "residual"):
            return (batch, seq_len // tp, dim)
        return (batch, seq_len, self.residual_width(dim, tp))

    def splits(self, sequence_parallel: bool, tp: int, what: str) -> bool:
        """Whether a run with ``boost.sequence_parallel`` at TP degree ``tp`` splits ``what`` ("residual" or
        "latent") over the sequence."""
        return tp > 1 and sequence_parallel and self.sequence_parallel == what

    def latent_tokens(self, tokens: int, tp: int, sequence_parallel: bool) -> int:
        """The tokens of a micro-batch whose latents (σ, LaX's crossing) one rank computes: all of them,
        or its ``b·s/t`` rows under btp's sequence parallelism."""
        return tokens // tp if self.splits(sequence_parallel, tp, "latent") else tokens

    def carry_shape(
        self, batch: int, seq_len: int, width: int, tp: int, sequence_parallel: bool
    ) -> tuple[int, ...]:
        """A LaX latent of ``width`` columns on one rank, as it crosses a pipeline stage boundary: whole
        ``[b, s, width]``, or this rank's rows ``[b·s/t, width]`` of the flat latent under btp's plan."""
        if self.splits(sequence_parallel, tp, "latent"):
            return (batch * seq_len // tp, width)
        return (batch, seq_len, width)


SCHEMES: dict[str, TPScheme] = {
    scheme.name: scheme
    for scheme in (
        # bottleneck-aware: full dims sharded, the bottleneck whole, r-wide collectives
        TPScheme(
            "btp",
            shards_residual=True,
            shards_heads=True,
            shards_rank=False,
            low_rank=True,
            sequence_parallel="latent",
        ),
        # Megatron's plan transposed onto the factors: A column-parallel on r, B row-parallel, d-wide all-reduces
        TPScheme(
            "vanilla",
            shards_residual=False,
            shards_heads=False,
            shards_rank=True,
            low_rank=True,
            sequence_parallel=None,
        ),
        # the dense baseline: ColwiseParallel / RowwiseParallel, optional sequence parallel
        TPScheme(
            "megatron",
            shards_residual=False,
            shards_heads=True,
            shards_rank=False,
            low_rank=False,
            sequence_parallel="residual",
        ),
    )
}

TP_SCHEMES = tuple(SCHEMES)


def tp_scheme(name: str) -> TPScheme:
    """The scheme called ``name``; ``ValueError`` naming the choices otherwise."""
    if name not in SCHEMES:
        raise ValueError(f"boost.tp_scheme = {name!r} is unknown; choose one of {TP_SCHEMES}")
    return SCHEMES[name]


def groups_linears(tp_scheme: str) -> bool:
    """Whether a scheme runs the grouped down-projections (``TPScheme.groups_linears``)."""
    return SCHEMES[tp_scheme].groups_linears


NORM_MODES = ("online", "sync", "local")
"""Pre-norm over a sharded hidden dim: online (statistic rides in the next all-reduce), sync (its own
all-reduce), local (shard-local statistics: NOT the dense model)."""

SHARD_LOCAL_NORM_WARNING = (
    'boost.norm = "local": each rank normalises its shard of the hidden dim alone; the '
    "model is NOT the dense model and changes with the TP degree"
)


def norm_is_shard_local(norm: str, tp_scheme: str, tp: int) -> bool:
    """Whether the pre-norms normalise each TP shard by its own statistic: a different model from the dense
    one for every TP degree. Only a scheme that shards the residual's hidden dim gives the norm a shard
    to read (vanilla and megatron keep it whole), so only there does ``norm = "local"`` change the model."""
    return norm == "local" and SCHEMES[tp_scheme].shards_residual and tp > 1


def rms_norm_record(norm: str, tp_scheme: str, tp: int) -> str:
    """How a run's pre-norms normalise, as a checkpoint records it (``boost_model.json``'s ``rms_norm``):
    ``exact`` (online and sync compute the same function), or shard-local over its TP degree.

    Example::

        >>> rms_norm_record("local", "btp", 4), shard_local_degree(rms_norm_record("local", "btp", 4))
        ('shard-local over 4 tensor-parallel ranks', 4)
    """
    return (
        f"shard-local over {tp} tensor-parallel ranks"
        if norm_is_shard_local(norm, tp_scheme, tp)
        else "exact"
    )


def shard_local_degree(record: str | None) -> int | None:
    """The TP degree a ``rms_norm_record`` says the norms were shard-local over; ``None`` for exact (or none)."""
    found = re.fullmatch(r"shard-local over (\d+) tensor-parallel ranks", record or "")
    return int(found.group(1)) if found else None


AC_MODES = ("none", "full", "lowrank")
"""none; full (recompute whole blocks); lowrank (keep BTP's r-wide latents, recompute the rest)."""

AC_BY_MEMORY_KEPT = ("none", "lowrank", "full")
"""The modes from the one that keeps the most activations to the one that keeps the least."""


def lowrank_ac_applies(tp_scheme: str, tp: int) -> bool:
    """Low-rank AC keeps BTP's r-wide all-reduced latents, which exist only under BTP at TP > 1 (at TP = 1,
    and under the vanilla/megatron plans whose all-reduces are d wide, there is nothing r-wide to keep)."""
    return tp > 1 and SCHEMES[tp_scheme].rank_wide_collectives


def tp_scheme_problem(linear: str, tp_scheme: str, tp: int) -> str | None:
    """The dense kind runs Megatron's plan; the low-rank kinds BTP or vanilla."""
    if tp == 1 or SCHEMES[tp_scheme].takes(KINDS[linear]):
        return None
    if not KINDS[linear].low_rank:
        return f'the dense model (boost.linear = "full") uses tp_scheme = "{KINDS[linear].tp_scheme}"'
    low_rank = " or ".join(f'"{s.name}"' for s in SCHEMES.values() if s.takes(KINDS[linear]))
    return (
        f"{tp_scheme} is the dense baseline, but boost.linear = {linear!r}: use {low_rank} "
        'for low-rank kinds, or boost.linear = "full"'
    )


def tp_shape_problem(shapes: dict[str, int], tp: int) -> str | None:
    """Every sharded dim divides by the TP degree (``shapes``: name → size, e.g. n_heads, dim, ffn_dim)."""
    for name, size in shapes.items():
        if size % tp:
            return f"must divide {name} = {size}"
    return None


def tp_sharded_dims(tp_scheme: str, n_heads: int, kv_heads: int, dim: int, ffn_dim: int) -> dict[str, int]:
    """The model dims ``tp_scheme`` shards (``TPScheme``): the heads and the FFN width where it shards
    them, the hidden dim where it shards the residual. The vocabulary every scheme shards is checked where
    its size is known, the rank of a scheme that shards it by ``vanilla_rank_problem``.

    Example::

        >>> tp_sharded_dims("vanilla", n_heads=32, kv_heads=8, dim=4096, ffn_dim=11008)
        {}
        >>> sorted(tp_sharded_dims("megatron", 32, 8, 4096, 11008))
        ['ffn_dim', 'kv_heads', 'n_heads']
    """
    record = SCHEMES[tp_scheme]
    heads = {"n_heads": n_heads, "kv_heads": kv_heads, "ffn_dim": ffn_dim} if record.shards_heads else {}
    return {**heads, **({"dim": dim} if record.shards_residual else {})}


def grouping_problem(tp_scheme: str, group_linears: bool, tp: int) -> str | None:
    """vanilla TP shards the rank dim, so its down-projections run ungrouped."""
    if tp == 1 or SCHEMES[tp_scheme].groups_linears or not group_linears:
        return None
    return (
        f"{tp_scheme} TP shards the rank dim, which would split a grouped [r_q+r_k+r_v, d] factor across members: "
        "add --boost.no-group-linears (boost.group_linears = false)"
    )


def vanilla_rank_problem(tp_scheme: str, rank: int, tp: int) -> str | None:
    """A scheme that shards the rank dim needs a rank that divides by the TP degree."""
    if tp == 1 or not SCHEMES[tp_scheme].shards_rank or rank % tp == 0:
        return None
    return f"must be divisible by the TP degree {tp}: {tp_scheme} TP shards the rank dim"


def online_norm_problem(linear: str, tp_scheme: str, norm: str, group_linears: bool, tp: int) -> str | None:
    """Online RMSNorm rides in the one grouped down-projection that reads the norm (a sharded residual, TP > 1)."""
    if (
        tp == 1
        or not SCHEMES[tp_scheme].shards_residual
        or norm != "online"
        or group_linears
        or not KINDS[linear].low_rank
    ):
        return None
    return (
        "online RMSNorm rides in the one grouped down-projection that reads the norm; ungrouped, several "
        'read it: set boost.norm = "sync", or boost.group_linears = true'
    )


def activation_checkpoint_problem(mode: str, tp_scheme: str, tp: int) -> str | None:
    if mode != "lowrank" or lowrank_ac_applies(tp_scheme, tp):
        return None
    where = "at tensor_parallel_degree = 1" if tp == 1 else f"under tp_scheme = {tp_scheme!r}"
    return (
        f"keeps BTP's r-wide all-reduced latents, and {where} there are none: "
        'use "full" (or tp_scheme = "btp" with tensor_parallel_degree > 1)'
    )


def sequence_parallel_problem(sequence_parallel: bool, tp_scheme: str, seq_len: int, tp: int) -> str | None:
    """``boost.sequence_parallel`` on a scheme with the plan, over a training sequence it splits, with TP ranks
    to split it over (at TP 1 no plan is applied: the switch would do nothing, and is refused as low-rank AC is)."""
    if not sequence_parallel:
        return None
    if tp == 1:
        return (
            "shards the sequence over the TP ranks, and at tensor_parallel_degree = 1 there are none: "
            "set it false (or tensor_parallel_degree > 1)"
        )
    if SCHEMES[tp_scheme].sequence_parallel is None:
        planned = " and ".join(s.name for s in SCHEMES.values() if s.sequence_parallel)
        return f"only the {planned} schemes have a sequence-parallel plan: drop it, or use one of them"
    length = sequence_parallel_length_problem(sequence_parallel, tp_scheme, seq_len, tp)
    return None if length is None else f"training.seq_len = {seq_len} {length}"


def sequence_parallel_length_problem(
    sequence_parallel: bool, tp_scheme: str, seq_len: int, tp: int
) -> str | None:
    """A sequence (training's, validation's) that sequence parallelism cannot split over the TP ranks; a
    scheme without the plan is ``sequence_parallel_problem``'s to refuse."""
    if not sequence_parallel or tp == 1 or SCHEMES[tp_scheme].sequence_parallel is None or seq_len % tp == 0:
        return None
    return f"must be divisible by the TP degree {tp}: boost.sequence_parallel shards the sequence"

"""BOOST's rules, stated once: the linear kinds and the tensor-parallel schemes and what each one is, the
norm and activation-checkpoint modes, how the bottleneck rank and the data-parallel degree are resolved,
the models' name, and every check of a layout.

Everything that needs one of these imports it from here: the model (``boost.training.model``), the TP plans
(``boost.training.parallel.tp_plans``), the layout planner and performance model, and the trainer's preflight
(``torchtitan_ext.preflight``), which quotes the TOML field each check is about.

A layout check takes plain values and returns ``None`` when the layout holds, else what to change —
one sentence a user can act on. Callers decide what a broken rule means: the preflight refuses the
job naming the field, the planner skips the layout, ``apply_tp`` raises ``ValueError``.

Example::

    >>> KINDS["lax"].latent_crossing, KINDS["cola"].latent_activation, KINDS["full"].tp_scheme
    (True, True, 'megatron')
    >>> SCHEMES["btp"].residual_width(4096, tp=4), SCHEMES["vanilla"].residual_width(4096, tp=4)
    (1024, 4096)
    >>> resolve_rank(dim=4096, rank=0, rank_ratio=0.25)
    1024
    >>> tp_scheme_problem("full", "btp", tp=4)
    'the dense model (boost.linear = "full") uses tp_scheme = "megatron"'
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LinearKind:
    """What a projection kind is, as every part of BOOST needs to know it."""

    name: str
    low_rank: bool
    """``W ≈ B·A`` with a rank-r bottleneck, instead of one dense ``W``."""
    latent_activation: bool
    """σ on the r-wide latent (CoLA's ``B·σ(A·x)``); the MLP then drops SwiGLU's full-width SiLU."""
    latent_crossing: bool
    """LaX: each block's latents cross into the next block's, a carry from block to block
    (``boost.training.model.latent_crossing``: gated, layer-normalised, before σ)."""
    tp_scheme: str
    """The tensor-parallel scheme its configs use: BTP for low-rank kinds, Megatron for the dense baseline."""

    @property
    def factors_form_weight(self) -> bool:
        """``B·A`` is the layer's weight: low rank with nothing between the factors (no σ, no LaX carry),
        so the factors are a point ``W = B·A`` on the rank-r manifold, the point LORO's optimizer moves."""
        return self.low_rank and not self.latent_activation and not self.latent_crossing


KINDS: dict[str, LinearKind] = {
    kind.name: kind
    for kind in (
        LinearKind(
            "full", low_rank=False, latent_activation=False, latent_crossing=False, tp_scheme="megatron"
        ),
        LinearKind("svd", low_rank=True, latent_activation=False, latent_crossing=False, tp_scheme="btp"),
        LinearKind("cola", low_rank=True, latent_activation=True, latent_crossing=False, tp_scheme="btp"),
        LinearKind("lax", low_rank=True, latent_activation=True, latent_crossing=True, tp_scheme="btp"),
    )
}
LINEAR_KINDS = tuple(KINDS)
DENSE_KIND = next(kind.name for kind in KINDS.values() if not kind.low_rank)


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


LAX_GATES = ("tensorized", "linear", "none")
"""LaX's gate on the carried latent (``boost.lax_gate``): tensorized (a Kronecker pair of small square
factors over r = a·b, the LaX authors' default), linear (r×r with a bias), none (the carry as it is)."""


def most_balanced_factor_pair(n: int) -> tuple[int, int]:
    """``(a, b)`` with ``a·b = n``, ``a ≤ b`` and ``b - a`` least: the tensorized LaX gate's factors over the
    rank (the LaX authors' ``most_balanced_factor_pair``).

    Example::

        >>> most_balanced_factor_pair(256), most_balanced_factor_pair(128), most_balanced_factor_pair(1024)
        ((16, 16), (8, 16), (32, 32))
    """
    if n < 1:
        raise ValueError(f"most_balanced_factor_pair: {n} is not a positive integer")
    a = math.isqrt(n)
    while n % a:
        a -= 1
    return a, n // a


def lax_gate(name: str) -> str:
    """``name`` if it is one of ``LAX_GATES``; ``ValueError`` naming the choices otherwise."""
    if name not in LAX_GATES:
        raise ValueError(f"boost.lax_gate = {name!r} is unknown; choose one of {LAX_GATES}")
    return name


LAX_GATE_FORMS = ("factored", "kron")
"""How the tensorized gate is computed (``boost.lax_gate_form``), one function either way: factored (its two
small contractions, ``r·(a + b)`` multiply-adds a token, as the LaX authors compute it) or kron (one
``[r, r]`` GEMM by ``kron(D, E)``, ``r²`` a token). On an H100 the factored form's contractions, K = a and
b, ran as small-tile GEMMs that took 50 ms of the 1B LaX step's 294 (``bench/results/gpu.md``)."""


def lax_gate_form_problem(gate: str, form: str) -> str | None:
    """Why ``boost.lax_gate_form = form`` cannot compute ``boost.lax_gate = gate``, or None.

    Example::

        >>> lax_gate_form_problem("linear", "kron")
        'kron computes the tensorized gate, not boost.lax_gate = "linear": use "factored"'
    """
    if form not in LAX_GATE_FORMS:
        return f"choose one of {LAX_GATE_FORMS}"
    if form == "kron" and gate != "tensorized":
        return f'kron computes the tensorized gate, not boost.lax_gate = "{gate}": use "factored"'
    return None


def lax_gate_form(gate: str, form: str) -> str:
    """``form`` if it computes ``boost.lax_gate = gate``; ``ValueError`` naming the field and the fix otherwise."""
    if (problem := lax_gate_form_problem(gate, form)) is not None:
        raise ValueError(f"boost.lax_gate_form = {form!r}: {problem}")
    return form


NORM_MODES = ("online", "sync", "local")
"""Pre-norm over a sharded hidden dim: online (statistic rides in the next all-reduce), sync (its own
all-reduce), local (shard-local statistics: NOT the dense model)."""

AC_MODES = ("none", "full", "lowrank")
"""none; full (recompute whole blocks); lowrank (keep BTP's r-wide latents, recompute the rest)."""
AC_BY_MEMORY_KEPT = ("none", "lowrank", "full")
"""The modes from the one that keeps the most activations to the one that keeps the least."""

DEFAULT_RANK_RATIO = 0.25  # the reference paper's r = d/4

MODEL_NAME = "boost_llama"
"""The name BOOST's models go by: torchtitan's train spec (``model.name``) and the Hugging Face ``model_type``."""

# torchtitan's ``parallelism.fsdp_reshard_after_forward``: whether FSDP frees a block's gathered weights
# after its forward (and gathers them again for its backward). "never" keeps every block's weights
# gathered from forward to backward: one all-gather a block a step instead of two, and half FSDP's
# per-parameter host work, for the stage's weights held at once (``boost.planning.perf_model.peak_memory``).
RESHARD_POLICIES = ("default", "always", "never")


def reshards_after_forward(policy: str, pp_enabled: bool) -> bool:
    """Whether ``policy`` frees the blocks' gathered weights after their forward ("default": not under
    PP, whose schedule runs each stage's forward many times before its backward).

    Example::

        >>> reshards_after_forward("default", pp_enabled=False), reshards_after_forward("never", pp_enabled=False)
        (True, False)
    """
    if policy not in RESHARD_POLICIES:
        raise ValueError(f"fsdp_reshard_after_forward = {policy!r} is not one of {RESHARD_POLICIES}")
    return policy == "always" or (policy == "default" and not pp_enabled)


# ``boost.fsdp``: torch's FSDP2 (``fully_shard``) or torchtitan's SimpleFSDP, traced into compiled blocks
FSDP_IMPLS = ("fully_shard", "simple_fsdp")


def simple_fsdp_problem(
    fsdp: str,
    *,
    compiled: bool,
    pp: int,
    dp_replicate: int,
    cpu_offload: bool,
    reshard_policy: str,
    optimizer: str,
) -> str | None:
    """What ``boost.fsdp = "simple_fsdp"`` needs that the job lacks, or ``None`` (also for ``fully_shard``).

    Example::

        >>> simple_fsdp_problem("simple_fsdp", compiled=False, pp=1, dp_replicate=1, cpu_offload=False,
        ...                     reshard_policy="default", optimizer="AdamW")[:48]
        'SimpleFSDP gathers each weight where it is read:'
    """
    if fsdp != "simple_fsdp":
        return None
    if not compiled:
        return (
            "SimpleFSDP gathers each weight where it is read: uncompiled, that is one collective per "
            'weight and read; set compile.enable with "model" in compile.components, or boost.fsdp = "fully_shard"'
        )
    refused = {
        "parallelism.pipeline_parallel_degree > 1": pp > 1,
        "parallelism.data_parallel_replicate_degree > 1 (HSDP)": dp_replicate > 1,
        "training.enable_cpu_offload": cpu_offload,
        'optimizer.name = "LORO"': optimizer == "LORO",
    }
    for what, present in refused.items():
        if present:
            return f'SimpleFSDP is not built for {what} here: use boost.fsdp = "fully_shard"'
    if reshard_policy != "default":
        return (
            f"parallelism.fsdp_reshard_after_forward = {reshard_policy!r} is FSDP2's; SimpleFSDP's compiled "
            'blocks decide what they keep: set it to "default" (--parallelism.fsdp_reshard_after_forward '
            'default), or boost.fsdp = "fully_shard"'
        )
    return None


def fsdp_for_precision(*, tp: int, pp: int, mixed_precision_param: str) -> bool:
    """Whether FSDP must wrap the model at a shard degree of 1 for its mixed-precision policy.

    torchtitan trains TP/PP without FSDP in fp32 whatever ``training.mixed_precision_param`` says
    (``maybe_enable_amp``: autocast is for one device or DDP). FSDP over a group of one casts the
    parameters as it would at any degree and communicates nothing, so the precision asked for holds.

    Example::

        >>> fsdp_for_precision(tp=4, pp=1, mixed_precision_param="bfloat16")
        True
    """
    return (tp > 1 or pp > 1) and mixed_precision_param != "float32"


def fsdp_wraps(*, dp_shard: int, cp: int, tp: int, pp: int, mixed_precision_param: str) -> bool:
    """Whether FSDP wraps the model: data parallelism that shards (torchtitan's ``fsdp_enabled``: dp_shard
    or CP above 1), or the mixed precision of TP/PP at a shard degree of 1 (``fsdp_for_precision``).

    Example::

        >>> fsdp_wraps(dp_shard=1, cp=1, tp=4, pp=1, mixed_precision_param="float32")
        False
    """
    return (
        dp_shard > 1
        or cp > 1
        or fsdp_for_precision(tp=tp, pp=pp, mixed_precision_param=mixed_precision_param)
    )


def compiles_model(enable: bool, components: list[str]) -> bool:
    """Whether ``torch.compile`` compiles the model's blocks: ``compile.enable`` with "model" in
    ``compile.components`` (torchtitan compiles the loss alone otherwise)."""
    return enable and "model" in components


def cudagraphs_problem(
    cudagraphs: bool,
    *,
    compiled: bool,
    backend: str,
    fsdp: str,
    fsdp_wraps: bool,
    pp: int,
    dp_replicate: int,
    microbatches: int,
    cpu_offload: bool,
    optimizer: str,
) -> str | None:
    """What ``boost.cudagraphs`` needs that the job lacks, or ``None`` (also when it is off).

    A CUDA graph replays its kernels on the memory it was recorded with. Parameters must keep their
    addresses: FSDP2 gathers each block's weights into new memory every step, outside the graphs
    (SimpleFSDP gathers inside them). Each replay reuses its outputs' memory: a second micro-batch's
    backward would overwrite the first one's gradients, which gradient accumulation, a pipeline
    schedule or DDP's buckets still hold.

    Example::

        >>> cudagraphs_problem(True, compiled=True, backend="inductor", fsdp="fully_shard", fsdp_wraps=True,
        ...                    pp=1, dp_replicate=1, microbatches=1, cpu_offload=False, optimizer="AdamW")[:43]
        "FSDP2 gathers each block's weights into new"
    """
    if not cudagraphs:
        return None
    if not compiled or backend != "inductor":
        return (
            'CUDA graphs are inductor\'s, over the compiled blocks: set compile.enable with "model" in '
            'compile.components and compile.backend = "inductor", or boost.cudagraphs = false'
        )
    if fsdp_wraps and fsdp == "fully_shard":
        return (
            "FSDP2 gathers each block's weights into new memory every step, outside the compiled graphs, "
            'where a CUDA graph replays fixed addresses: set boost.fsdp = "simple_fsdp" (gathers inside '
            "the graphs), or boost.cudagraphs = false"
        )
    refused = {
        "parallelism.pipeline_parallel_degree > 1": pp > 1,
        "parallelism.data_parallel_replicate_degree > 1 (DDP, HSDP)": dp_replicate > 1,
        f"{microbatches} micro-batches a step (training.global_batch_size over local_batch_size × "
        "the data-parallel degree)": microbatches > 1,
        "training.enable_cpu_offload": cpu_offload,
        'optimizer.name = "LORO"': optimizer == "LORO",
    }
    for what, present in refused.items():
        if present:
            return (
                f"CUDA graphs are not built for {what} here (each replay reuses the memory of the last "
                "one's outputs): set boost.cudagraphs = false"
            )
    return None


def data_parallel_degree(
    world_size: int, *, tp: int, pp: int, cp: int, dp_replicate: int, dp_shard: int
) -> int:
    """dp_replicate × dp_shard, how many different batches a step reads; ``dp_shard = -1`` takes the
    ranks the other mesh dims leave (torchtitan's ``ParallelDims``)."""
    if dp_shard == -1:
        dp_shard = world_size // (tp * pp * cp * dp_replicate)
    return dp_replicate * dp_shard


def linear_kind(name: str) -> LinearKind:
    """The kind called ``name``; ``ValueError`` naming the choices otherwise."""
    if name not in KINDS:
        raise ValueError(f"boost.linear = {name!r} is unknown; choose one of {LINEAR_KINDS}")
    return KINDS[name]


def resolve_rank(dim: int, rank: int, rank_ratio: float) -> int:
    """The bottleneck rank: ``rank`` when set (> 0), else ``rank_ratio · dim`` rounded, at least 1."""
    return rank if rank else max(1, round(rank_ratio * dim))


SHARD_LOCAL_NORM_WARNING = (
    'boost.norm = "local": each rank normalises its shard of the hidden dim alone; the '
    "model is NOT the dense model and changes with the TP degree"
)


def norm_is_shard_local(norm: str, tp_scheme: str, tp: int) -> bool:
    """Whether the pre-norms normalise each TP shard by its own statistic: a different model from the dense
    one for every TP degree. Only a scheme that shards the residual's hidden dim gives the norm a shard
    to read (vanilla and megatron keep it whole), so only there does ``norm = "local"`` change the model."""
    return norm == "local" and SCHEMES[tp_scheme].shards_residual and tp > 1


def rank_problem(rank: int, dim: int, kv_dim: int) -> str | None:
    """The rank factors every projection, so it is positive and below the smallest dim it factors."""
    smallest = min(dim, kv_dim)
    return (
        None
        if 0 < rank < smallest
        else f"must be below the smallest dim it factors ({smallest}) and positive"
    )


def groups_linears(tp_scheme: str) -> bool:
    """Whether a scheme runs the grouped down-projections (``TPScheme.groups_linears``)."""
    return SCHEMES[tp_scheme].groups_linears


# ----------------------------------------------------------------------------- layout checks


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


def tp_sharded_dims(n_heads: int, kv_heads: int, dim: int, ffn_dim: int) -> dict[str, int]:
    """The model dims every TP scheme shards (the vocabulary too, checked where its size is known)."""
    return {"n_heads": n_heads, "kv_heads": kv_heads, "dim": dim, "ffn_dim": ffn_dim}


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


def loro_kind_problem(linear: str) -> str | None:
    """LORO (``optimizer.name = "LORO"``) moves ``W = B·A`` on the rank-r manifold: the kind's factors must
    form its weight (``LinearKind.factors_form_weight``)."""
    kind = KINDS[linear]
    if kind.factors_form_weight:
        return None
    svd = next(k.name for k in KINDS.values() if k.factors_form_weight)
    if not kind.low_rank:
        return f'LORO moves low-rank factors and the dense model has none: use boost.linear = "{svd}"'
    between = "σ and the LaX carry" if kind.latent_crossing else "σ"
    return (
        f"LORO moves W = B·A on the rank-r manifold, and under boost.linear = {linear!r} {between} between the "
        f'factors make B·A not the layer\'s weight: use boost.linear = "{svd}" (or optimizer.name = "AdamW")'
    )


def loro_rank_problem(rank: int, smallest_dim: int) -> str | None:
    """LORO's exact step adds up to r new directions to each factor's r columns (the tangent step leaves
    the column space), so every factor needs at least 2r rows: ``2·rank ≤`` the smallest factored dim."""
    if 2 * rank <= smallest_dim:
        return None
    return (
        f"LORO's exact step needs 2·rank ≤ the smallest factored dim ({smallest_dim}): "
        f"use a rank of at most {smallest_dim // 2}"
    )


def lowrank_ac_applies(tp_scheme: str, tp: int) -> bool:
    """Low-rank AC keeps BTP's r-wide all-reduced latents, which exist only under BTP at TP > 1 (at TP = 1,
    and under the vanilla/megatron plans whose all-reduces are d wide, there is nothing r-wide to keep)."""
    return tp > 1 and SCHEMES[tp_scheme].rank_wide_collectives


def activation_checkpoint_problem(mode: str, tp_scheme: str, tp: int) -> str | None:
    if mode != "lowrank" or lowrank_ac_applies(tp_scheme, tp):
        return None
    where = "at tensor_parallel_degree = 1" if tp == 1 else f"under tp_scheme = {tp_scheme!r}"
    return (
        f"keeps BTP's r-wide all-reduced latents, and {where} there are none: "
        'use "full" (or tp_scheme = "btp" with tensor_parallel_degree > 1)'
    )


def pipeline_problem(linear: str, pp: int, n_layers: int) -> str | None:
    """At most one stage per layer (LaX's carry crosses stage boundaries with the residual stream)."""
    if pp > 1 and pp > n_layers:
        return f"more stages than the {n_layers} layers"
    return None


def pipeline_stage_count(
    multi_stage: bool,
    pp: int,
    n_layers: int,
    layers_per_stage: int | None,
    first_stage_less: int,
    last_stage_less: int,
) -> int:
    """The stages torchtitan's ``pipeline_llm`` cuts the model into, over all ranks: one per rank for a
    single-stage schedule and two for a multi-stage one, unless ``layers_per_stage`` sets the count (the
    embedding and the head weigh ``first_stage_less`` and ``last_stage_less`` layers)."""
    if layers_per_stage is None:
        return pp * (2 if multi_stage else 1)
    return -(-(n_layers + first_stage_less + last_stage_less) // layers_per_stage)


# What each torch.distributed.pipelining schedule's constructor raises on (torch 2.13, schedules.py), by
# lower-case name: the schedules that need a micro-batch per stage, the interleaved ones that run their
# micro-batches in equal rounds of n // pp, and the V-shaped ones that hold exactly two stages per rank.
PIPELINE_MICROBATCH_PER_STAGE = ("1f1b", "dualpipev")
PIPELINE_MICROBATCH_ROUNDS = ("interleaved1f1b", "interleavedzerobubble")
PIPELINE_TWO_STAGES_PER_RANK = ("zbvzerobubble", "dualpipev")
# The zero-bubble schedules, which split each backward into an input- and a weight-gradient pass: torch
# refuses them over compiled stage modules (``_check_torch_compile_compatibility``, torch 2.11 to 2.14).
PIPELINE_SPLIT_BACKWARD = ("interleavedzerobubble", "zbvzerobubble", "dualpipev")
# torchtitan's DualPipeV overlaps a forward and a backward on the accelerator's streams: a CPU has none.
PIPELINE_ACCELERATOR_ONLY = ("dualpipev",)


def splits_backward(schedule: str) -> bool:
    """Whether a schedule (torch's name, any case) splits each backward in two (``PIPELINE_SPLIT_BACKWARD``)."""
    return schedule.lower() in PIPELINE_SPLIT_BACKWARD


def pipeline_loss_rank(schedule: str, pp: int, world_size: int) -> int:
    """The rank whose step lines and metrics hold the loss: the first rank of the last pipeline stage
    (torchtitan's mesh puts ``pp`` outermost, so that is ``world_size // pp * (pp - 1)``); rank 0 without
    PP, and under a V-shaped schedule (``PIPELINE_TWO_STAGES_PER_RANK``), whose last stage is rank 0's
    second. The other pipeline ranks log a loss of -1 (torchtitan's placeholder)."""
    if pp <= 1 or schedule.lower() in PIPELINE_TWO_STAGES_PER_RANK:
        return 0
    return world_size // pp * (pp - 1)


def pipeline_csv_problem(schedule_csv: str | None, pp: int) -> str | None:
    """No custom CSV schedule: what BOOST checks and builds per schedule (the split backward, the stages per
    rank, the micro-batch rounds, the rank holding the loss) goes by ``pipeline_parallel_schedule``'s name,
    which a CSV's actions would overrule unchecked."""
    if pp > 1 and schedule_csv:
        return (
            'BOOST checks a pipeline schedule by its name, not by a CSV\'s actions: set it to "" and name '
            "the schedule in parallelism.pipeline_parallel_schedule"
        )
    return None


def pipeline_schedule_problem(schedule: str, pp: int, compiled: bool) -> str | None:
    """A schedule that splits the backward (``PIPELINE_SPLIT_BACKWARD``) needs eager stages."""
    if pp > 1 and compiled and splits_backward(schedule):
        return (
            f"schedule {schedule} splits each backward into an input- and a weight-gradient pass, which torch "
            "runs on eager stages only: choose 1F1B or Interleaved1F1B to compile, or pass --compile.no-enable"
        )
    return None


def pipeline_validation_problem(schedule: str, pp: int, validation: bool) -> str | None:
    """The V-shaped schedules (``PIPELINE_TWO_STAGES_PER_RANK``) cannot run validation: torch's forward-only
    pass asserts there ("can't steal_bwd_input if this stage doesn't have backward", torch 2.13 and 2.14)."""
    if pp > 1 and validation and schedule.lower() in PIPELINE_TWO_STAGES_PER_RANK:
        return (
            f"schedule {schedule} cannot validate: torch's V-shaped schedules run no forward-only pass; choose "
            "Interleaved1F1B or InterleavedZeroBubble, or pass --validation.no-enable"
        )
    return None


def pipeline_runtime_problem(
    schedule: str, pp: int, *, on_cpu: bool, exact_split_backward: bool
) -> str | None:
    """A schedule this machine's device or torch cannot run right: ``PIPELINE_ACCELERATOR_ONLY`` without an
    accelerator, ``PIPELINE_SPLIT_BACKWARD`` on a torch whose split backward is not exact."""
    name = schedule.lower()
    if pp > 1 and on_cpu and name in PIPELINE_ACCELERATOR_ONLY:
        return (
            f"schedule {schedule} overlaps a forward and a backward on the accelerator's streams, and this "
            "machine has none: choose ZBVZeroBubble (the same V-shaped stages, not overlapped) on a CPU"
        )
    if pp > 1 and not exact_split_backward and splits_backward(schedule):
        return (
            f"schedule {schedule} splits each backward in two, which this torch's pipelining (before 2.13) "
            "computes wrong where a node has several outputs: use torch ≥ 2.13, or choose 1F1B or "
            "Interleaved1F1B"
        )
    return None


def pipeline_stages_problem(schedule: str, multi_stage: bool, pp: int, stages: int) -> str | None:
    """The stages (``pipeline_stage_count``) split evenly over the ranks, as many per rank as the schedule runs."""
    per_rank, rest = divmod(stages, pp)
    if rest:
        return (
            f"gives {stages} stages, which {pp} pipeline ranks cannot split evenly: "
            f"choose one giving a multiple of {pp}"
        )
    if not multi_stage and per_rank != 1:
        return (
            f"gives {per_rank} stages per rank; schedule {schedule} runs one: leave it unset, "
            "or choose a multi-stage schedule"
        )
    if multi_stage and per_rank < 2:
        return (
            f"gives 1 stage per rank; schedule {schedule} runs several: lower it (unset gives 2 per rank), "
            "or choose a single-stage schedule"
        )
    if schedule.lower() in PIPELINE_TWO_STAGES_PER_RANK and per_rank != 2:
        return f"gives {per_rank} stages per rank; schedule {schedule} runs exactly 2: leave it unset"
    return None


def pipeline_microbatch_problem(
    schedule: str, local_batch_size: int, microbatch_size: int, pp: int, stages: int
) -> str | None:
    """The micro-batch count (``local_batch_size / microbatch_size``) that the schedule accepts over ``stages``."""
    n = local_batch_size // microbatch_size
    split = (
        f"with parallelism.pipeline_parallel_microbatch_size = {microbatch_size} that is {n} "
        f"micro-batch{'es' if n > 1 else ''}"
    )
    name = schedule.lower()
    if name in PIPELINE_MICROBATCH_PER_STAGE and n < stages:
        smaller = " (or lower the micro-batch size)" if microbatch_size > 1 else ""
        return (
            f"{split}, fewer than the {stages} stages of schedule {schedule}, which needs one per stage: "
            f"raise training.local_batch_size to at least {stages * microbatch_size}{smaller}"
        )
    rounds = max(1, n // pp)
    if name in PIPELINE_MICROBATCH_ROUNDS and n % rounds:
        return (
            f"{split}, which schedule {schedule} cannot split into n // pp = {rounds} equal rounds: "
            f"make the micro-batch count a multiple of pp = {pp}, or below {2 * pp}"
        )
    return None


def sequence_parallel_problem(sequence_parallel: bool, tp_scheme: str, seq_len: int, tp: int) -> str | None:
    """``boost.sequence_parallel`` on a scheme with the plan, over a training sequence it splits."""
    if not sequence_parallel or tp == 1:
        return None
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


# ----------------------------------------------------------------------------- attention


@dataclass(frozen=True)
class AttentionKind:
    """An attention kernel as torchtitan's LLaMA names it (``attn_type``; BOOST's ``boost.attn_type``), and
    what it composes with. Which device trains it is torch's to say (``torchtitan_ext.infra.attention``
    asks torch, on the device); these are the rules that hold on every device."""

    name: str
    masks: tuple[str, ...]
    """The ``attn_mask_type`` values it computes: causal, and block_causal (a token attends only within its
    own document of a packed window)."""
    context_parallel: bool
    """It runs with the sequence sharded over a ``cp`` mesh dim (torch's ring SDPA, FlexAttention with
    all-gathered keys and values); torchtitan has no context-parallel varlen."""
    pipelines: bool
    """Its masks split into pipeline micro-batches along the batch dim (a ``[b, ...]`` tensor, a
    ``BlockMask``); varlen's cumulative document offsets run over the whole local batch."""
    gqa: bool
    """It reads keys and values at their own head count (GQA, FlexAttention's ``enable_gqa``); else they are
    repeated to the query heads first (what context parallelism then moves, ``boost.planning.comm_volume``)."""
    counts_collectives: bool = True
    """It runs under the Python dispatch mode that counts a step's collectives (``boost.log_comm``).
    FlexAttention's kernel is ``torch.compile``d where it is called, and torch refuses to compile under such
    a mode (on the H100, the 1B flex row stopped at the counted step: no rule for the ``flex_attention``
    operator, and with one, "non-infra torch dispatch mode present")."""


MASK_TYPES = ("causal", "block_causal")
"""causal (every window one sequence); block_causal (each document of a packed window attends only within
itself: its boundaries are the tokenizer's EOS, the token after one opens the next document)."""


ATTENTION_KINDS: dict[str, AttentionKind] = {
    kind.name: kind
    for kind in (
        # SDPA: causal through is_causal (flash kernels, torch's ring under CP); block_causal through a
        # boolean [b, 1, s, s] mask (BOOST's: torchtitan's SDPA ignores the mask type)
        AttentionKind("sdpa", masks=MASK_TYPES, context_parallel=True, pipelines=True, gqa=False),
        AttentionKind(
            "flex",
            masks=MASK_TYPES,
            context_parallel=True,
            pipelines=True,
            gqa=True,
            counts_collectives=False,
        ),
        # torch's varlen_attn over the packed documents: block_causal only, as torchtitan's
        AttentionKind("varlen", masks=("block_causal",), context_parallel=False, pipelines=False, gqa=False),
    )
}
ATTENTION_TYPES = tuple(ATTENTION_KINDS)


def context_parallel_path(attn_type: str, mask_type: str) -> str:
    """How a rank's queries reach the other ranks' keys under CP: ``"ring"`` (torch's ring attention, SDPA's
    causal kernel passing keys and values on) or ``"all_gather"`` (all of them gathered first: a mask, which
    torch's ring takes none of, or FlexAttention, whose CP torch builds so).

    Example::

        >>> context_parallel_path("sdpa", "causal"), context_parallel_path("sdpa", "block_causal")
        ('ring', 'all_gather')
    """
    return "ring" if attn_type == "sdpa" and mask_type == "causal" else "all_gather"


def attention_kind(name: str) -> AttentionKind:
    """The kind called ``name``; ``ValueError`` naming the choices otherwise."""
    if name not in ATTENTION_KINDS:
        raise ValueError(f"boost.attn_type = {name!r} is unknown; choose one of {ATTENTION_TYPES}")
    return ATTENTION_KINDS[name]


def comm_count_problem(attn_type: str, log_comm: bool) -> str | None:
    """The step's collectives are counted (``boost.log_comm``) only around kernels that run under the counter.

    Example::

        >>> comm_count_problem("flex", log_comm=True)[:43]
        "FlexAttention's kernel is compiled where it"
    """
    if not log_comm or ATTENTION_KINDS[attn_type].counts_collectives:
        return None
    return (
        "FlexAttention's kernel is compiled where it is called, which torch refuses under the dispatch mode "
        'that counts a step\'s collectives: pass --boost.no-log-comm (or boost.attn_type = "sdpa")'
    )


def attention_mask_problem(attn_type: str, mask_type: str) -> str | None:
    """The mask type is one the attention kernel computes.

    Example::

        >>> attention_mask_problem("varlen", "causal")
        'varlen attends within each document of a packed window: use "block_causal", or boost.attn_type = "sdpa"'
    """
    if mask_type not in MASK_TYPES:
        return f"choose one of {MASK_TYPES}"
    kind = ATTENTION_KINDS[attn_type]
    if mask_type in kind.masks:
        return None
    offers = next(k.name for k in ATTENTION_KINDS.values() if mask_type in k.masks)
    return (
        f'{attn_type} attends within each document of a packed window: use "{kind.masks[0]}", '
        f'or boost.attn_type = "{offers}"'
    )


def attention_layout_problem(attn_type: str, cp: int, pp: int) -> str | None:
    """The attention kernel composes with the layout's context and pipeline parallelism."""
    kind = ATTENTION_KINDS[attn_type]
    others = " or ".join(
        f'"{k.name}"' for k in ATTENTION_KINDS.values() if k.context_parallel and k.pipelines
    )
    if cp > 1 and not kind.context_parallel:
        return f"{attn_type} has no context-parallel path (torch's nor torchtitan's): use {others}"
    if pp > 1 and not kind.pipelines:
        return (
            f"{attn_type}'s document offsets run over the whole local batch, which a pipeline splits into "
            f"micro-batches: use {others}"
        )
    return None


# ----------------------------------------------------------------------------- context parallelism

CP_LOAD_BALANCERS = ("headtail", "ptrr", None)
"""torchtitan's ``parallelism.context_parallel_load_balancer``: headtail (rank ``i`` holds chunks ``i`` and
``2·cp - 1 - i`` of a window, an equal share of the causal triangle), ptrr (FlexAttention's, read from its
block mask), None (contiguous chunks)."""
FLEX_BLOCK = 128
"""FlexAttention's block of queries and keys (torch's default sparse block size): its context-parallel mask
shards whole blocks."""


def context_parallel_problem(
    cp: int, seq_len: int, attn_type: str, load_balancer: str | None, tp: int, sequence_parallel: bool
) -> str | None:
    """What a window of ``seq_len`` tokens needs to split over ``cp`` ranks: equal shares (two chunks each
    under a load balancer), each split again over TP under sequence parallelism; whole flex blocks.

    Example::

        >>> context_parallel_problem(4, 100, "sdpa", "headtail", tp=1, sequence_parallel=False)
        'must be divisible by 8 (cp 4 × 2 chunks a rank under the headtail balancer)'
    """
    if cp == 1:
        return None
    parts, why = cp, [f"cp {cp}"]
    if load_balancer is not None:
        parts, why = parts * 2, [*why, f"2 chunks a rank under the {load_balancer} balancer"]
    if sequence_parallel and tp > 1:
        parts, why = parts * tp, [*why, f"tp {tp} of the sequence parallelism"]
    if seq_len % parts:
        return f"must be divisible by {parts} ({' × '.join(why)})"
    if attn_type == "flex" and seq_len % (cp * FLEX_BLOCK):
        return f"must be divisible by cp × {FLEX_BLOCK} = {cp * FLEX_BLOCK}: FlexAttention's CP mask shards blocks"
    return None


def load_balancer_problem(load_balancer: str | None, attn_type: str, cp: int) -> str | None:
    """torchtitan's balancers: ptrr reads FlexAttention's block mask (torchtitan's ``cp_shard`` refuses it
    without one)."""
    if load_balancer not in CP_LOAD_BALANCERS:
        return f"choose one of {CP_LOAD_BALANCERS}"
    if cp > 1 and load_balancer == "ptrr" and attn_type != "flex":
        return 'ptrr balances by a FlexAttention block mask: use "headtail" (or None), or boost.attn_type = "flex"'
    return None

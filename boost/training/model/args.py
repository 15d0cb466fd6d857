"""Model arguments, the flavor table and the FLOP counter of the BOOST LLaMA family."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from boost.training.rules import (
    DEFAULT_RANK_RATIO,
    KINDS,
    lax_gate,
    lax_gate_form,
    linear_kind,
    most_balanced_factor_pair,
    rank_problem,
    resolve_rank,
)


@dataclass(frozen=True)
class Flavor:
    """One published model shape. ``rank`` ``None`` is ``d/4``; ``source`` says where the shape comes from."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    source: str
    rank: int | None = None
    only_lr_act: bool = True


_COLA = "CoLA authors' cola_configs/cola_{}.json (github alvin-zyl/CoLA)"
_BOOST = "the BOOST paper's LLaMA-style {} (no CoLA config published)"
# DESIGN §1 with the CoLA authors' released configs where they published one (60M-7B): 60M and 130M
# keep SwiGLU's full-width SiLU (only_lr_act false) and 130M's rank is 256, as there. One width
# differs on purpose: 1B's ffn is 5472 where the authors' is 5461 (= 43 * 127, which no TP degree
# divides): 5472 = 2^5 * 171 shards over TP 2, 4 and 8 (609.7M parameters against 609.3M).
FLAVORS: dict[str, Flavor] = {
    "debug": Flavor(256, 4, 8, 4, 704, "BOOST's test model"),
    "60M": Flavor(512, 8, 8, 8, 1376, _COLA.format("60m"), only_lr_act=False),
    "130M": Flavor(768, 12, 12, 12, 2048, _COLA.format("130m"), rank=256, only_lr_act=False),
    "350M": Flavor(1024, 24, 16, 16, 2736, _COLA.format("350m")),
    "1B": Flavor(2048, 24, 32, 32, 5472, _COLA.format("1b") + ", ffn 5461 -> 5472 for TP"),
    "3B": Flavor(3072, 28, 24, 24, 8192, _BOOST.format("3B")),
    "7B": Flavor(4096, 32, 32, 32, 11008, _COLA.format("7b")),
    "13B": Flavor(5120, 40, 40, 40, 13824, _BOOST.format("13B")),
    "30B": Flavor(8192, 36, 64, 64, 22016, _BOOST.format("30B")),
}


def flavor_rank(flavor: str) -> int:
    """The flavor's published rank, else ``d/4``."""
    f = FLAVORS[flavor]
    return f.rank if f.rank is not None else resolve_rank(f.dim, 0, DEFAULT_RANK_RATIO)


@dataclass
class ModelArgs:
    """Shape and kind of a BOOST decoder. Field names follow torchtitan's llama3 ``TransformerModelArgs``
    (``torchtitan_ext.model.JobModelArgs`` adds what torchtitan's trainer calls on it).

    Example::

        >>> args = ModelArgs.from_flavor("debug", linear="cola", vocab_size=2048)
        >>> (args.dim, args.rank, args.head_dim)
        (256, 64, 32)
    """

    dim: int = 256
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int | None = None
    vocab_size: int = 2048
    ffn_dim: int = 704
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048
    # The attention kernel and mask, as torchtitan's llama3 names them (boost.training.rules.ATTENTION_KINDS;
    # checked where the model builds its attention, boost.training.model.attention).
    attn_type: str = "sdpa"
    attn_mask_type: str = "causal"

    linear: str = "cola"
    rank: int = 64
    group_linears: bool = True
    # CoLA's "only low-rank activation": the MLP is down(gate(x) * up(x)) with no full-width SiLU,
    # because gate's latent already went through σ. The svd kind keeps SwiGLU's SiLU.
    only_lr_act: bool = True
    # LaX only: the gate on the carried latent (boost.training.rules.LAX_GATES; the LaX authors' default)
    lax_gate: str = "tensorized"
    # LaX only: how the tensorized gate is computed (boost.training.rules.LAX_GATE_FORMS), one function
    lax_gate_form: str = "factored"
    tie_embeddings: bool = False
    # Seed of the initial weights; None uses torch.initial_seed(). The trainer sets it from
    # debug.seed so that pipeline stages (which torchtitan seeds differently) agree.
    init_seed: int | None = None

    @classmethod
    def from_flavor(cls, flavor: str, linear: str = "cola", vocab_size: int = 2048, **overrides) -> ModelArgs:
        if flavor not in FLAVORS:
            raise ValueError(f"unknown flavor {flavor!r}; choose one of {sorted(FLAVORS)}")
        f = FLAVORS[flavor]
        fields = dict(
            dim=f.dim,
            n_layers=f.n_layers,
            n_heads=f.n_heads,
            n_kv_heads=f.n_kv_heads,
            ffn_dim=f.ffn_dim,
            rank=flavor_rank(flavor),
            only_lr_act=f.only_lr_act,
            vocab_size=vocab_size,
            linear=linear,
        )
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"ModelArgs has no field(s) {sorted(unknown)}")
        fields.update(overrides)
        args = cls(**fields)
        args.check()
        return args

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def low_rank(self) -> bool:
        return KINDS[self.linear].low_rank

    @property
    def grouped(self) -> bool:
        # Dense projections are never grouped: the Megatron baseline keeps torchtitan's wq/wk/wv.
        return self.low_rank and self.group_linears

    def check(self) -> None:
        """Raise ``ValueError`` naming the field and the fix for inconsistent shapes."""
        linear_kind(self.linear)
        lax_gate(self.lax_gate)
        lax_gate_form(self.lax_gate, self.lax_gate_form)
        for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim"):
            value = getattr(self, name)
            if value is not None and value <= 0:  # n_kv_heads None: n_heads'
                raise ValueError(f"model {name} = {value} must be positive")
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.kv_heads}")
        kv_dim = self.kv_heads * self.head_dim
        problem = rank_problem(self.rank, self.dim, kv_dim, self.ffn_dim) if self.low_rank else None
        if problem is not None:
            below = min(self.dim, kv_dim, self.ffn_dim)
            raise ValueError(
                f"boost.rank = {self.rank}: {problem}; choose boost.rank below {below} "
                f"(boost.rank_ratio below {below / self.dim:.4g})"
            )


def lax_gate_macs(rank: int, gate: str, form: str = "factored") -> int:
    """Multiply-adds a token of one LaX gate costs, as ``form`` (``boost.lax_gate_form``) computes it:
    ``r·(a + b)`` for the tensorized pair factored (``Dᵀ·R·E``, ``r = a·b``), ``r²`` for it as one
    ``kron(D, E)`` GEMM and for the linear gate, none for the identity."""
    if gate == "tensorized" and form == "factored":
        return rank * sum(most_balanced_factor_pair(rank))
    return rank * rank if gate in ("tensorized", "linear") else 0


def lax_gate_params(rank: int, gate: str) -> int:
    """Parameters of one member's LaX gate: ``a² + b²`` for the tensorized pair (``r = a·b``), ``r² + r`` for
    the linear gate, none for the identity."""
    if gate == "tensorized":
        a, b = most_balanced_factor_pair(rank)
        return a * a + b * b
    return rank * rank + rank if gate == "linear" else 0


def crossing_layers(args: ModelArgs) -> int:
    """Blocks whose seven projections cross the previous block's latents: every block but the first, under LaX."""
    return args.n_layers - 1 if KINDS[args.linear].latent_crossing else 0


def crossing_params(args: ModelArgs) -> int:
    """LaX's norms (2r) and gates (tensorized ``a² + b²``, linear ``r² + r``) over the model."""
    r = args.rank
    return crossing_layers(args) * 7 * (2 * r + lax_gate_params(r, args.lax_gate))


def matmul_params(args: ModelArgs) -> int:
    """Weights that take part in a GEMM per token: the block projections (by factor shapes) and the LM head."""
    d, f, r = args.dim, args.ffn_dim, args.rank
    kv = args.kv_heads * args.head_dim
    shapes = [(d, d), (d, kv), (d, kv), (d, d), (d, f), (d, f), (f, d)]  # q k v o gate up down
    if args.low_rank:
        per_layer = sum(d_in * r + r * d_out for d_in, d_out in shapes)
    else:
        per_layer = sum(d_in * d_out for d_in, d_out in shapes)
    return args.n_layers * per_layer + d * args.vocab_size


def flops_per_token(args: ModelArgs, seq_len: int) -> int:
    """Training FLOPs per token (forward + backward), counted from the actual factor shapes.

    6 FLOPs per GEMM weight per token (2 forward, 4 backward) — a low-rank layer costs
    ``6·(d_in·r + r·d_out)``, not ``6·d_in·d_out``, and LaX's gates 6 per multiply-add of theirs in the
    form the model computes them (``lax_gate_macs``) — plus causal-free attention scores and values,
    ``12·n_layers·dim·seq_len`` as in torchtitan and the PaLM paper (Appendix B), so that MFU is
    comparable with torchtitan's for the dense kind.

    Example::

        >>> dense = flops_per_token(ModelArgs.from_flavor("7B", linear="full", vocab_size=32000), 4096)
        >>> lowrank = flops_per_token(ModelArgs.from_flavor("7B", linear="cola", vocab_size=32000), 4096)
        >>> round(dense / lowrank, 2)
        2.04
    """
    gates = crossing_layers(args) * 7 * lax_gate_macs(args.rank, args.lax_gate, args.lax_gate_form)
    return 6 * (matmul_params(args) + gates) + 12 * args.n_layers * args.dim * seq_len

"""Model arguments, the flavour table and the FLOP counter of the BOOST LLaMA family."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from boost.rules import DEFAULT_RANK_RATIO, KINDS, linear_kind, rank_problem, resolve_rank

# DESIGN §1: (dim, n_layers, n_heads, n_kv_heads, ffn_dim); the rank defaults to dim / 4.
FLAVOURS: dict[str, tuple[int, int, int, int, int]] = {
    "debug": (256, 4, 8, 4, 704),
    "60M": (512, 8, 8, 8, 1376),
    "130M": (768, 12, 12, 12, 2048),
    "350M": (1024, 24, 16, 16, 2736),
    "1B": (2048, 24, 32, 32, 5472),
    "3B": (3072, 28, 24, 24, 8192),
    "7B": (4096, 32, 32, 32, 11008),
    "13B": (5120, 40, 40, 40, 13824),
    "30B": (8192, 36, 64, 64, 22016),
}


@dataclass
class ModelArgs:
    """Shape and kind of a BOOST decoder. Field names follow torchtitan's llama3 ``TransformerModelArgs``
    (``torchtitan_ext.model_args`` adds what torchtitan's trainer calls on it).

    Example::

        >>> args = ModelArgs.from_flavour("debug", linear="cola", vocab_size=2048)
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

    linear: str = "cola"
    rank: int = 64
    group_linears: bool = True
    # CoLA's "only low-rank activation": the MLP is down(gate(x) * up(x)) with no full-width SiLU,
    # because gate's latent already went through σ. The svd kind keeps SwiGLU's SiLU.
    only_lr_act: bool = True
    tie_embeddings: bool = False
    # Seed of the initial weights; None uses torch.initial_seed(). The trainer sets it from
    # debug.seed so that pipeline stages (which torchtitan seeds differently) agree.
    init_seed: int | None = None

    @classmethod
    def from_flavour(cls, flavour: str, linear: str = "cola", vocab_size: int = 2048, **overrides) -> ModelArgs:
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown flavour {flavour!r}; choose one of {sorted(FLAVOURS)}")
        dim, n_layers, n_heads, n_kv_heads, ffn_dim = FLAVOURS[flavour]
        fields = dict(
            dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
            ffn_dim=ffn_dim, rank=resolve_rank(dim, 0, DEFAULT_RANK_RATIO), vocab_size=vocab_size, linear=linear,
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
        for name in ("dim", "n_layers", "n_heads", "vocab_size", "ffn_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model {name} = {getattr(self, name)} must be positive")
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.kv_heads}")
        problem = rank_problem(self.rank, self.dim, self.kv_heads * self.head_dim) if self.low_rank else None
        if problem is not None:
            raise ValueError(f"boost.rank = {self.rank}: {problem}; try boost.rank_ratio = 0.25")


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
    ``6·(d_in·r + r·d_out)``, not ``6·d_in·d_out`` — plus causal-free attention scores and values,
    ``12·n_layers·dim·seq_len`` as in torchtitan and the PaLM paper (Appendix B), so that MFU is
    comparable with torchtitan's for the dense kind.

    Example::

        >>> dense = flops_per_token(ModelArgs.from_flavour("7B", linear="full", vocab_size=32000), 4096)
        >>> lowrank = flops_per_token(ModelArgs.from_flavour("7B", linear="cola", vocab_size=32000), 4096)
        >>> round(dense / lowrank, 2)
        2.04
    """
    return 6 * matmul_params(args) + 12 * args.n_layers * args.dim * seq_len

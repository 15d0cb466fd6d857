"""Single-device model: parameter counts, FLOPs, grouping equivalence, determinism of init."""

import dataclasses

import pytest
import torch

from boost import FLAVORS, ModelArgs, Transformer, flops_per_token
from boost.training.model.grouped_state import to_grouped, to_ungrouped
from boost.training.model.latent_crossing import LatentCrossing
from boost.training.model.linears import Bottleneck
from boost.training.model.model import FeedForward

KINDS = ("full", "svd", "cola", "lax")


def closed_form_params(args: ModelArgs) -> int:
    d, f, r, l, v = args.dim, args.ffn_dim, args.rank, args.n_layers, args.vocab_size
    kv = args.kv_heads * args.head_dim
    if args.n_heads == args.kv_heads:
        block = 8 * d * r + 3 * r * (d + f) if args.low_rank else 4 * d * d + 3 * d * f
    else:  # GQA: k and v project to kv < d
        block = (
            (6 * d * r + 2 * r * kv + 3 * r * (d + f))
            if args.low_rank
            else (2 * d * d + 2 * d * kv + 3 * d * f)
        )
    crossing = 0
    if args.linear == "lax":  # every block but the first: 7 members, each a LayerNorm (2r) and a gate
        a = max(x for x in range(1, int(r**0.5) + 1) if r % x == 0)  # the most balanced pair a·b = r
        gate = {"tensorized": a * a + (r // a) ** 2, "linear": r * r + r, "none": 0}[args.lax_gate]
        crossing = (l - 1) * 7 * (2 * r + gate)
    return l * (block + 2 * d) + 2 * v * d + d + crossing  # + per-layer norms, embedding, head, final norm


@pytest.mark.parametrize("flavor", list(FLAVORS))
@pytest.mark.parametrize("kind", KINDS)
def test_param_count_matches_closed_form(flavor, kind):
    args = ModelArgs.from_flavor(flavor, linear=kind, vocab_size=32000)
    with torch.device("meta"):
        model = Transformer(args)
    assert sum(p.numel() for p in model.parameters()) == closed_form_params(args)


def test_low_rank_to_dense_linear_ratio_is_about_2_53():
    # The default rank (rank_ratio 1/4: r = d/4) makes the blocks' projections ~2.5x smaller than dense
    # (norms are 1-D; the grouped up-projections 3-D).
    def block_projection_weights(flavor: str, kind: str) -> tuple[int, int]:
        args = ModelArgs.from_flavor(flavor, linear=kind, vocab_size=32000)
        with torch.device("meta"):
            model = Transformer(args)
        return args.rank, sum(p.numel() for p in model.layers.parameters() if p.ndim >= 2)

    for flavor in ("1B", "7B", "13B"):
        _, dense = block_projection_weights(flavor, "full")
        rank, low = block_projection_weights(flavor, "cola")
        assert rank == FLAVORS[flavor].dim // 4, (flavor, rank)
        assert 2.45 < dense / low < 2.6, (flavor, dense / low)


def test_flops_count_factor_shapes():
    dense = ModelArgs.from_flavor("7B", linear="full", vocab_size=32000)
    low = dataclasses.replace(dense, linear="cola")
    d, f, r, s, l, v = 4096, 11008, 1024, 4096, 32, 32000
    assert flops_per_token(dense, s) == 6 * (l * (4 * d * d + 3 * d * f) + d * v) + 12 * l * d * s
    assert flops_per_token(low, s) == 6 * (l * (8 * d * r + 3 * r * (d + f)) + d * v) + 12 * l * d * s


@pytest.mark.parametrize(
    "kind,extra",
    [
        ("full", {}),
        ("cola", {}),
        ("cola", {"group_linears": False}),
        ("lax", {}),
        ("lax", {"lax_gate_form": "kron"}),
        ("lax", {"lax_gate": "linear"}),
    ],
    ids=["full", "cola", "cola_ungrouped", "lax_factored", "lax_kron", "lax_linear"],
)
def test_flops_per_token_is_what_the_model_runs(kind, extra):
    """``flops_per_token`` less attention's ``12·n_layers·dim·seq_len`` is what torch's FlopCounterMode counts
    in one forward and backward of the model outside attention: every GEMM, LaX's gates in the form the model
    computes them (``kron``: one ``[r, r]`` GEMM, r² a token, not the factored pair's r·(a + b)). Integer
    counts of the same GEMMs: exact. Attention is held apart: torch ≤ 2.14 does not count the CPU's fused
    SDPA kernel; torch 2.15 does, its forward one third of the model's term (which counts a backward as twice
    its forward; the fused kernel's backward, which recomputes the scores, counts 2.5 times)."""
    from torch.utils.flop_counter import FlopCounterMode

    seq, vocab = 64, 512
    args = ModelArgs.from_flavor("debug", linear=kind, vocab_size=vocab, max_seq_len=seq, **extra)
    model = Transformer(args)
    model.init_weights(seed=0)
    tokens = torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with counter:
        model(tokens).float().sum().backward()
    counts = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    sdpa = {op: flops for op, flops in counts.items() if "scaled_dot_product" in op}
    attention = 12 * args.n_layers * args.dim * seq
    assert (
        counter.get_total_flops() - sum(sdpa.values())
        == (flops_per_token(args, seq) - attention) * tokens.numel()
    )
    forward = [flops for op, flops in sdpa.items() if not op.endswith("_backward")]
    assert forward in ([], [attention // 3 * tokens.numel()]), sdpa


@pytest.mark.parametrize(
    "kind,lax_gate",
    [("svd", "tensorized"), ("cola", "tensorized"), *(("lax", g) for g in ("tensorized", "linear", "none"))],
)
def test_grouped_and_ungrouped_compute_the_same_function(kind, lax_gate):
    args = ModelArgs.from_flavor(
        "debug", linear=kind, vocab_size=512, n_layers=3, max_seq_len=32, lax_gate=lax_gate
    )
    grouped = Transformer(args).double()
    with torch.no_grad():  # off the init (norms at one, LaX's at one and zero): a mapping mix-up shows
        for p in grouped.parameters():
            p.add_(
                0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype)
            )
    flat_args = dataclasses.replace(args, group_linears=False)
    with torch.device("meta"):
        flat = Transformer(flat_args)
    flat_sd = to_ungrouped(grouped.state_dict(), args)
    flat.load_state_dict(flat_sd, assign=True)
    flat.rope = grouped.rope.clone()  # a non-persistent buffer: not in the state dict
    tokens = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(flat.double()(tokens), grouped(tokens), rtol=1e-12, atol=1e-12)
    # and back: the adapter round trip is exact
    back = to_grouped(flat.state_dict(), args)
    assert back.keys() == grouped.state_dict().keys()
    for name, tensor in grouped.state_dict().items():
        assert torch.equal(back[name], tensor), name


def test_the_kron_form_computes_the_factored_gate_grouped_and_compiled():
    """``boost.lax_gate_form = "kron"`` is the tensorized gate as one ``[r, r]`` GEMM a member: a grouped
    debug LaX model (q/k/v and gate/up share a crossing, its members' columns read in place) gives the
    factored form's loss and gradients in float64; compiled (fullgraph), a three-member crossing of rank
    8 = 2·4 (its factors unequal) gives the factored crossing's output and gradients."""
    args = ModelArgs.from_flavor("debug", linear="lax", vocab_size=512, n_layers=2, max_seq_len=16)
    factored = Transformer(args).double()
    with torch.no_grad():  # off the init, as above
        for p in factored.parameters():
            p.add_(
                0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype)
            )
    kron = Transformer(dataclasses.replace(args, lax_gate_form="kron")).double()
    kron.load_state_dict(factored.state_dict())
    assert kron.layers["1"].attention.wqkv.latent.form == "kron"
    tokens = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))

    def loss_and_grads(model, *inputs):
        model.zero_grad()
        loss = model(*inputs).logsumexp(-1).mean()
        loss.backward()
        return loss.detach(), {
            n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()
        }

    def assert_same(got, want):
        torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
        for name, grad in want[1].items():
            torch.testing.assert_close(got[1][name], grad, rtol=1e-10, atol=1e-12)

    assert_same(loss_and_grads(kron, tokens), loss_and_grads(factored, tokens))
    keys = ["layers.1.attention.q", "layers.1.attention.k", "layers.1.attention.v"]
    crossings = [LatentCrossing(3, 8, "tensorized", form).double() for form in ("factored", "kron")]
    crossings[0].reset_parameters(seed=0, keys=keys)
    crossings[1].load_state_dict(crossings[0].state_dict())
    pre, carry = torch.randn(2, 2, 5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(crossings[1], backend="aot_eager", fullgraph=True)
    assert_same(loss_and_grads(compiled, pre, carry), loss_and_grads(crossings[0], pre, carry))


@pytest.mark.parametrize("gate", ["tensorized", "linear", "none"])
def test_lax_latent_leaves_in_the_autocast_dtype(gate):
    # Under autocast LayerNorm computes in float32; the latent (σ's input and output, the carry) must
    # still leave in the bf16 the pre-activation came in, with float32's value rounded.
    cross = LatentCrossing(members=2, rank=16, gate=gate)
    cross.reset_parameters(seed=0, keys=["layers.1.feed_forward.gate", "layers.1.feed_forward.up"])
    g = torch.Generator().manual_seed(0)
    pre, carry = (torch.randn(2, 4, 32, generator=g).bfloat16() for _ in range(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        latent = cross(pre, carry)
    assert latent.dtype == torch.bfloat16
    reference = cross(pre.float(), carry.float())  # float32 throughout; autocast's gate GEMM is bf16
    torch.testing.assert_close(latent.float(), reference, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("kind,lax_gate", [("cola", "tensorized"), ("lax", "tensorized"), ("lax", "linear")])
def test_grouped_and_ungrouped_initialise_identically(kind, lax_gate):
    # Init is seeded per canonical projection name, so grouping does not change the initial model.
    tokens = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    outs = []
    for grouped in (True, False):
        torch.manual_seed(3)
        args = ModelArgs.from_flavor(
            "debug", linear=kind, vocab_size=512, n_layers=2, group_linears=grouped, lax_gate=lax_gate
        )
        outs.append(Transformer(args)(tokens))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def test_seed_determines_the_model():
    args = ModelArgs.from_flavor("debug", vocab_size=512, n_layers=1)
    torch.manual_seed(7)
    a = Transformer(args).state_dict()
    torch.manual_seed(7)
    b = Transformer(args).state_dict()
    torch.manual_seed(8)
    c = Transformer(args).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["layers.0.attention.wqkv.down.weight"], c["layers.0.attention.wqkv.down.weight"])


def test_gqa_bottleneck_batches_only_equal_shapes():
    model = Transformer(ModelArgs.from_flavor("debug", vocab_size=512, n_layers=1))  # 8 heads, 4 kv heads
    wqkv = model.layers["0"].attention.wqkv
    assert [tuple(u.weight.shape) for u in wqkv.up] == [(256, 64), (2, 128, 64)]
    w13 = model.layers["0"].feed_forward.w13
    assert [tuple(u.weight.shape) for u in w13.up] == [(2, 704, 64)]


@pytest.mark.parametrize(
    "members",
    [
        [("q", 4, 16), ("k", 4, 8), ("v", 4, 8)],  # the groups are runs of members (q | k, v): views
        [("a", 4, 16), ("b", 4, 8), ("c", 4, 16)],  # a member between a group's (a, c | b): stacked slices
    ],
    ids=["runs", "interleaved"],
)
def test_batched_up_projections_compute_each_members_own_and_its_gradients(members):
    torch.manual_seed(0)
    bottleneck = Bottleneck(12, members, "silu").double()
    for p in bottleneck.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True)
    outs = bottleneck(x)
    weights = {}  # each member's B, read out of its unit (a row of a batched weight, or a Linear's)
    for unit, group in zip(bottleneck.up, bottleneck.up_groups):
        for j, i in enumerate(group):
            weights[i] = unit.weight[j] if len(group) > 1 else unit.weight
    h = torch.nn.functional.silu(x @ bottleneck.down.weight.t())
    starts = [sum(r for _, r, _ in members[:i]) for i in range(len(members))]
    reference = [h[..., s : s + r] @ weights[i].t() for i, (s, (_, r, _)) in enumerate(zip(starts, members))]
    for out, ref in zip(outs, reference):
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    cotangents = [torch.randn_like(o) for o in outs]
    leaves = [x, *bottleneck.parameters()]
    got = torch.autograd.grad(outs, leaves, cotangents)
    want = torch.autograd.grad(reference, leaves, cotangents)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_batched_up_projections_read_adjacent_members_in_place():
    # gate and up (k and v) sit side by side in the latent: their batched GEMM reads them there, a strided
    # view, rather than a stacked copy (one copy kernel fewer in each direction, per group and block)
    bottleneck = Bottleneck(12, [("q", 4, 16), ("k", 4, 8), ("v", 4, 8)], "silu")
    seen = {}
    bottleneck.up_input.register_forward_hook(lambda m, args, out: seen.update(latent=out))
    bottleneck.up[1].register_forward_pre_hook(lambda m, args: seen.update(batched=args[0]))
    bottleneck(torch.randn(2, 5, 12))
    latent, batched = seen["latent"], seen["batched"]
    assert batched.untyped_storage().data_ptr() == latent.untyped_storage().data_ptr()
    torch.testing.assert_close(batched, torch.stack([latent[..., 4:8], latent[..., 8:12]]), rtol=0, atol=0)


def test_bad_shapes_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="rank"):
        ModelArgs.from_flavor("debug", rank=300)
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelArgs.from_flavor("debug", n_kv_heads=3)
    with pytest.raises(ValueError, match="unknown"):
        ModelArgs.from_flavor("debug", linear="lora")
    with pytest.raises(ValueError, match="flavor"):
        ModelArgs.from_flavor("2B")


# The CoLA authors' released configs, github alvin-zyl/CoLA at 91ff0d1, cola_configs/cola_{60m,130m,350m,1b,7b}.json
# (only_lr_act unset there is ColaConfig's default, true): hidden, layers, heads, intermediate, rank, only_lr_act.
COLA_CONFIGS = {
    "60M": (512, 8, 8, 1376, 128, False),
    "130M": (768, 12, 12, 2048, 256, False),
    "350M": (1024, 24, 16, 2736, 256, True),
    "1B": (2048, 24, 32, 5461, 512, True),
    "7B": (4096, 32, 32, 11008, 1024, True),
}


@pytest.mark.parametrize("flavor", list(COLA_CONFIGS))
def test_flavors_follow_the_cola_authors_configs(flavor):
    args = ModelArgs.from_flavor(flavor, linear="cola", vocab_size=32000)
    ffn = 5461 if flavor == "1B" else args.ffn_dim  # BOOST's one deliberate difference (FLAVORS says why)
    assert (args.dim, args.n_layers, args.n_heads, ffn, args.rank, args.only_lr_act) == COLA_CONFIGS[flavor]
    assert "alvin-zyl/CoLA" in FLAVORS[flavor].source
    if flavor == "1B":
        assert args.ffn_dim % 8 == 0 and all(5461 % t for t in (2, 4, 8))


def test_only_lr_act_reaches_the_model_from_the_toml():
    from tests.trainer import ROOT
    from torchtitan_ext.model import JobModelArgs
    from torchtitan_ext.preflight import check_job

    small_vocab = ["--boost.tokenizer_vocab_size", "512"]  # the tokenizer is trained here: keep it quick
    for name, want_rank, want_act in (("60M", 128, False), ("130M", 256, False), ("350M", 256, True)):
        job = check_job(
            ["--job.config_file", str(ROOT / "train_configs" / f"{name}.toml"), *small_vocab], world_size=1
        )
        args = JobModelArgs.from_flavor(name)
        args.update_from_config(job)
        assert (args.rank, args.only_lr_act) == (want_rank, want_act), name
    job = check_job(
        ["--job.config_file", str(ROOT / "train_configs" / "60M.toml"), *small_vocab, "--boost.only_lr_act"],
        world_size=1,
    )
    args = JobModelArgs.from_flavor("60M")
    args.update_from_config(job)
    assert args.only_lr_act and not FeedForward(args).gate_act


def test_a_bf16_rotation_is_rounded_once():
    # RoPE rotates in the table's float32 and rounds the result, as torchtitan does; in bf16 it rounded the
    # angles and every product too: 2.6e-3 relative error against float64 at head_dim 128 over 4096
    # positions, where one rounding of the result gives 1.6e-3 (bf16's half ulp is 2e-3 at most)
    from boost.training.model.model import apply_rope, rope_cache

    torch.manual_seed(0)
    table = rope_cache(128, 4096, 5e5)
    x = torch.randn(1, 4096, 4, 128).to(torch.bfloat16)
    exact = apply_rope(x.double(), table.double())
    rotated = apply_rope(x, table)
    assert rotated.dtype == torch.bfloat16
    assert ((rotated.double() - exact).norm() / exact.norm()).item() < 1.8e-3

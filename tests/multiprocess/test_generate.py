"""Sampling with a KV cache (``boost.after_training.generate``): the cache changes nothing but the cost.

Every kind decodes the same tokens with the cache as by re-running the whole prefix, the CLI
streams what the library samples, and BTP at tp=2 samples what one process samples.
"""

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from boost.after_training.evaluate import packed_windows, score, token_byte_lengths
from boost.after_training.generate import StreamingDecoder, main, next_token_distribution, sample
from boost.after_training.trained_run import load_run, shard_for_inference
from boost.training.model import ModelArgs, Transformer
from boost.training.model.kv_cache import KVCache
from tests.distributed import run_distributed
from tests.trained_runs import make_run

ROOT = Path(__file__).resolve().parents[2]


def _tiny(linear: str, group_linears: bool = True) -> Transformer:
    torch.manual_seed(0)
    args = ModelArgs(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128, ffn_dim=176, linear=linear, rank=16,
        group_linears=group_linears, max_seq_len=64,
    )  # fmt: skip
    return Transformer(args).eval()


@pytest.mark.parametrize(
    "linear,grouped", [("full", True), ("svd", True), ("cola", True), ("lax", True), ("lax", False)]
)
def test_kv_cache_matches_full_prefix(linear, grouped):
    model = _tiny(linear, grouped)
    tokens = torch.randint(0, 128, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = KVCache(64)
        # A prefill, a multi-token chunk after a cached past (bottom-right causal mask), then single tokens.
        parts = [model(tokens[:, :7], cache=cache), model(tokens[:, 7:12], cache=cache)]
        parts += [model(tokens[:, i : i + 1], cache=cache) for i in range(12, 20)]
    assert cache.seen == 20
    # Same weights and positions; SDPA with and without a mask and shorter GEMMs: float32 rounding only.
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)
    prompt = tokens[0, :5].tolist()
    for options in (dict(temperature=0), dict(temperature=1.0, top_k=20, top_p=0.9, seed=3)):
        cached = list(sample(model, prompt, 16, **options))
        assert cached == list(sample(model, prompt, 16, use_cache=False, **options)), options
        assert len(cached) == 16


def test_sampling_options():
    model = _tiny("cola")
    greedy = list(sample(model, [1, 2, 3], 12, temperature=0))
    assert list(sample(model, [1, 2, 3], 12, temperature=1.0, top_k=1, seed=5)) == greedy
    assert list(sample(model, [1, 2, 3], 12, temperature=1.0, top_p=1e-6, seed=5)) == greedy
    assert list(sample(model, [1, 2, 3], 12, temperature=1e-45, seed=5)) == greedy  # cold: greedy, not nan
    hot = dict(temperature=2.0, seed=7)
    assert list(sample(model, [1, 2, 3], 12, **hot)) == list(sample(model, [1, 2, 3], 12, **hot))
    assert list(sample(model, [1, 2, 3], 12, **hot)) != list(
        sample(model, [1, 2, 3], 12, temperature=2.0, seed=8)
    )
    stop = greedy[3]
    assert list(sample(model, [1, 2, 3], 12, temperature=0, eos_id=stop))[-1] == stop
    probs = next_token_distribution(torch.tensor([3.0, 2.0, 1.0, 0.0]), 1.0, top_k=2, top_p=None)
    assert probs[2:].sum() == 0 and torch.isclose(probs.sum(), torch.tensor(1.0))
    probs = next_token_distribution(torch.tensor([3.0, 2.0, 1.0, 0.0]), 1.0, top_k=None, top_p=0.8)
    assert (probs > 0).tolist() == [True, True, False, False]  # 0.665 < 0.8 <= 0.91: two tokens
    for bad, match in [
        (dict(temperature=-1), "--temperature"),
        (dict(temperature=float("nan")), "--temperature nan must be a finite number"),
        (dict(temperature=float("inf")), "--temperature inf must be a finite number"),
        (dict(top_k=0), "--top-k"),
        (dict(top_p=0), "--top-p"),
    ]:
        with pytest.raises(ValueError, match=match):
            next(sample(model, [1], 2, **bad))
    with pytest.raises(ValueError, match="max_seq_len 64"):
        next(sample(model, [1] * 60, 10))


def test_a_block_causal_model_continues_the_prompts_last_document():
    # the run attended within documents (they end at EOS): the next token is the masked window's, not
    # a causal pass over every document of the prompt
    from boost.training.model.attention import block_causal_mask

    model = _tiny("lax")
    model.model_args.attn_mask_type = "block_causal"
    eos = 3
    for seed in range(20):  # a prompt whose next token the two attentions tell apart
        prompt = torch.randint(4, 128, (20,), generator=torch.Generator().manual_seed(seed)).tolist()
        prompt[6] = prompt[13] = eos
        tokens = torch.tensor([prompt])
        with torch.no_grad():
            masked = model(tokens, attention_masks=block_causal_mask(tokens, eos))[0, -1]
            causal = model(tokens)[0, -1]
        if int(masked.argmax()) != int(causal.argmax()):
            break
    assert int(masked.argmax()) != int(causal.argmax())
    with torch.no_grad():  # RoPE is relative: the last document alone gives the masked window's logits
        torch.testing.assert_close(model(torch.tensor([prompt[14:]]))[0, -1], masked, rtol=1e-5, atol=1e-5)
    assert next(sample(model, prompt, 1, temperature=0, eos_id=eos)) == int(masked.argmax())
    assert list(sample(model, prompt, 8, temperature=0, eos_id=eos)) == list(
        sample(model, prompt[14:], 8, temperature=0, eos_id=eos)
    )


@pytest.fixture(scope="module")
def cola_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("cola_run"), "cola")


@pytest.mark.slow
def test_cli_streams_the_sampled_text(cola_run):
    run = load_run(cola_run)
    ids = run.tokenizer.encode("def main(")
    expected = run.tokenizer.decode(list(sample(run.model, ids, 16, temperature=0.8, top_k=40, seed=2)))
    # One subprocess: the module entry point as a user runs it (pays torchtitan's import once), on
    # one thread as this process (tests/conftest.py): the same sums, so the same samples.
    out = subprocess.run(
        [sys.executable, "-m", "boost.after_training.generate", "--config", cola_run, "--prompt", "def main(",
         "--max-new-tokens", "16", "--temperature", "0.8", "--top-k", "40", "--seed", "2"],
        cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == "def main(" + expected + "\n"
    assert "step-3" in out.stderr


def test_cli_names_the_bad_argument(cola_run, capsys):
    # Bad input: a message naming the argument, no traceback.
    assert main(["--config", str(cola_run), "--checkpoint", "99"]) == 2
    assert "step-99" in capsys.readouterr().err
    assert main(["--config", str(cola_run), "--top-p", "1.5"]) == 2
    assert "--top-p" in capsys.readouterr().err
    assert main(["--config", str(cola_run.with_name("missing.toml"))]) == 2
    assert "missing.toml does not exist" in capsys.readouterr().err


TEXT = (
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n" * 6
)


def _tp_matches_one_process(rank, world_size, toml, expected_tokens, expected_loss):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = load_run(toml)
    assert shard_for_inference(run.model, run.config) == rank
    ids = run.tokenizer.encode("import os\n")
    for options, expected in zip(
        (dict(temperature=0), dict(temperature=0.9, top_p=0.95, seed=4)), expected_tokens
    ):
        assert list(sample(run.model, ids, 24, **options)) == expected, options
    windows = packed_windows([run.tokenizer.encode(TEXT)], 64)
    got = score(run.model, windows, token_byte_lengths(run.tokenizer), batch_size=2, progress=False)
    # Row-parallel A sums partial products across ranks: float32 reassociation, not bit-exact.
    assert abs(got.loss - expected_loss) <= 1e-5 * expected_loss, (got.loss, expected_loss)


@pytest.mark.slow
@pytest.mark.parametrize("linear", ["lax", "full"])
def test_tp2_samples_and_scores_like_one_process(tmp_path, linear):
    # LaX: the kind with the most state (grouped q/k/v, crossing latents), BTP at tp=2; full: Megatron's plan.
    toml = make_run(tmp_path, linear)
    run = load_run(toml)
    ids = run.tokenizer.encode("import os\n")
    expected = [list(sample(run.model, ids, 24, temperature=0)),
                list(sample(run.model, ids, 24, temperature=0.9, top_p=0.95, seed=4))]  # fmt: skip
    windows = packed_windows([run.tokenizer.encode(TEXT)], 64)
    loss = score(run.model, windows, token_byte_lengths(run.tokenizer), batch_size=2, progress=False).loss
    run_distributed(_tp_matches_one_process, 2, toml, expected, loss)


def test_sampling_refuses_a_negative_token_count_and_an_empty_prompt():
    model = _tiny("cola")
    # a negative count would yield nothing and say nothing: the CLI user's typo, named
    with pytest.raises(ValueError, match=re.escape("--max-new-tokens -1 must be >= 0")):
        next(sample(model, [1, 2, 3], -1))
    # no token to condition on: the first forward would run on an empty sequence
    with pytest.raises(
        ValueError,
        match=re.escape("the prompt is empty: give at least one token (the tokenizer's BOS is one)"),
    ):
        next(sample(model, [], 4))


def test_the_kv_cache_refuses_positions_beyond_the_rope_table():
    # past max_seq_len the RoPE slice would come back short and the next forward fail on a shape
    model = _tiny("cola")
    cache = KVCache(model.model_args.max_seq_len)
    with torch.no_grad():
        model(torch.zeros(1, 60, dtype=torch.long), cache=cache)
        with pytest.raises(
            ValueError,
            match=re.escape(
                "sequence of 70 positions exceeds the model's max_seq_len 64; "
                "ask for fewer new tokens or a shorter prompt"
            ),
        ):
            model(torch.zeros(1, 10, dtype=torch.long), cache=cache)
    assert cache.seen == 60  # the refused tokens left the cache as it was


def test_the_stream_keeps_the_continuations_leading_space():
    # SentencePiece decoders strip a text's leading space: decoded alone, " lazy" after "the" streamed "lazy"
    class StripsLeadingSpace:
        pieces = {0: "▁the", 1: "▁lazy", 2: "▁dog"}

        def decode(self, ids):
            return "".join(self.pieces[i] for i in ids).replace("▁", " ").lstrip(" ")

    stream = StreamingDecoder(StripsLeadingSpace(), [0])
    assert "".join(stream.push(t) for t in (1, 2)) == " lazy dog"


def test_top_p_keeps_the_smallest_set_that_reaches_it_and_renormalises():
    # Two and four equal logits: probabilities 1/2 and 1/4, exact in float32. The first token alone
    # reaches top_p = 0.5, so the nucleus is it; two quarters reach 0.5, so the nucleus is those two.
    probs = next_token_distribution(torch.zeros(2), 1.0, top_k=None, top_p=0.5)
    assert probs.tolist() == [1.0, 0.0]
    probs = next_token_distribution(torch.zeros(4), 1.0, top_k=None, top_p=0.5)
    assert probs.tolist() == [0.5, 0.5, 0.0, 0.0]
    # the kept mass is renormalised: softmax([3, 2]) of the two tokens kept at top_p = 0.8
    probs = next_token_distribution(torch.tensor([3.0, 2.0, 1.0, 0.0]), 1.0, top_k=None, top_p=0.8)
    kept = torch.softmax(torch.tensor([3.0, 2.0]), dim=0)
    assert torch.allclose(probs, torch.cat([kept, torch.zeros(2)]))


def test_the_kv_cache_takes_a_sequence_that_fills_the_rope_table_exactly():
    cache = KVCache(64)
    assert cache.begin(64) == 0  # 64 positions in a table of 64: allowed
    cache.end(60)
    assert cache.begin(4) == 60
    with pytest.raises(ValueError, match="sequence of 65 positions exceeds the model's max_seq_len 64"):
        cache.begin(5)

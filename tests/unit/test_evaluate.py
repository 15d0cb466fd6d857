"""Perplexity and bits per byte (``boost.after_training.evaluate``) against the trainer's own data path.

The windows are torchtitan's validation windows (compared with its dataset itself), the loss is
plain cross-entropy over them, the byte count is the text's own UTF-8 length, and the CLI prints
the number the library computes. The tp=2 equality is in ``test_generate.py`` (one spawn for both).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from boost.after_training.evaluate import main, packed_windows, score, token_byte_lengths
from boost.after_training.trained_run import load_run
from boost.training.data.run_tokenizer import load_tokenizer
from boost.training.model import ModelArgs, Transformer
from tests.trained_runs import make_run, offline_tokenizer_dir

DOCS = [
    "import os\n\nprint(os.getcwd())\n",
    "def área(r):\n    return 3.14159 * r * r  # π r²\n" * 5,
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n" * 4,
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(offline_tokenizer_dir())


def _documents(tokenizer):
    return [tokenizer.encode(d) + [tokenizer.eos_id] for d in DOCS]


def test_windows_are_torchtitans_validation_windows(tokenizer, tmp_path):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset

    import torchtitan_ext.data.text_datasets  # noqa: F401  registers the "local" dataset

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(f'{{"text": {__import__("json").dumps(d)}}}\n' for d in DOCS))
    theirs = HuggingFaceTextDataset(
        "local", str(data), HuggingFaceTokenizer(str(tokenizer.folder)), seq_len=16
    )
    theirs_windows = [torch.cat([x["input"], y[-1:]]).tolist() for x, y in theirs]
    ours = list(packed_windows(_documents(tokenizer), 16))
    assert len(ours) > 3 and ours == theirs_windows


def _byte_of_symbol() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's ``bytes_to_unicode``), inverted: a token's symbol -> its byte.
    Printable bytes stand for themselves; the rest are shifted past U+0100 in order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    shifted = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(shifted)}


BYTE_OF_SYMBOL = _byte_of_symbol()


def _token_bytes(tokenizer, ids: list[int]) -> bytes:
    """The bytes ``ids`` stand for, special tokens none: exact where a window cuts a character in two,
    which ``decode`` would turn into U+FFFD (3 bytes for the 1 or 2 it holds)."""
    special = {tokenizer.bos_id, tokenizer.eos_id}
    return b"".join(
        bytes(BYTE_OF_SYMBOL[c] for c in tokenizer.tokenizer.id_to_token(i)) for i in ids if i not in special
    )


def _label_bytes(tokenizer, windows: list[list[int]]) -> int:
    return sum(len(_token_bytes(tokenizer, w[1:])) for w in windows)


def test_the_byte_alphabet_spells_each_document(tokenizer):
    for doc, ids in zip(DOCS, _documents(tokenizer), strict=True):
        assert _token_bytes(tokenizer, ids) == doc.encode("utf-8")


@pytest.mark.parametrize("seq_len", [16, 32])
def test_score_is_cross_entropy_and_bytes_are_the_texts(tokenizer, seq_len):
    torch.manual_seed(0)
    model = Transformer(ModelArgs.from_flavor("debug", vocab_size=tokenizer.vocab_size, n_layers=2)).eval()
    lengths = token_byte_lengths(tokenizer)
    one_doc = tokenizer.encode(DOCS[1])
    assert int(lengths[torch.tensor(one_doc)].sum()) == len(DOCS[1].encode("utf-8"))  # BOS counts no byte
    windows = list(packed_windows(_documents(tokenizer), seq_len))
    got = score(model, windows, lengths, batch_size=3, progress=False)
    ids = torch.tensor(windows)
    with torch.no_grad():
        loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).item()
    assert got.tokens == ids[:, 1:].numel()
    assert math.isclose(got.loss, loss, rel_tol=1e-6) and math.isclose(
        got.perplexity, math.exp(loss), rel_tol=1e-6
    )
    assert got.bytes == _label_bytes(tokenizer, windows)
    assert math.isclose(got.bits_per_byte, got.loss * got.tokens / math.log(2) / got.bytes, rel_tol=1e-12)
    # Batching changes nothing beyond float rounding; a token budget stops at whole windows.
    assert math.isclose(
        score(model, windows, lengths, batch_size=1, progress=False).loss, got.loss, rel_tol=1e-5
    )
    assert score(model, windows, lengths, max_tokens=70, progress=False).tokens == 64


def test_cli_scores_a_local_file(tmp_path, capsys):
    toml = make_run(tmp_path, "svd")
    data = tmp_path / "notes.txt"
    data.write_text("".join(DOCS) * 3)
    assert main(["--config", str(toml), "--data", str(data), "--seq-len", "32", "--batch-size", "4"]) == 0
    printed = capsys.readouterr().out
    run = load_run(toml)
    eos = [run.tokenizer.eos_id]
    expected = score(
        run.model,
        packed_windows([run.tokenizer.encode(data.read_text()) + eos], 32),
        token_byte_lengths(run.tokenizer),
        batch_size=4, progress=False,
    )  # fmt: skip
    assert (
        f"perplexity {expected.perplexity:.4f}" in printed
        and f"bits/byte {expected.bits_per_byte:.6f}" in printed
    )
    # No --data: the run's held-out split (the trainer's stdlib validation files), here its first two windows.
    assert main(["--config", str(toml), "--max-tokens", "128", "--batch-size", "2"]) == 0
    printed = capsys.readouterr().out
    assert "on stdlib held-out split, seq_len 64" in printed and "(128 tokens," in printed
    assert main(["--config", str(toml), "--data", str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt" in capsys.readouterr().err
    assert main(["--config", str(toml), "--data", str(data), "--seq-len", "0"]) == 2
    assert "--seq-len 0 must be >= 1" in capsys.readouterr().err
    # a window longer than the text: refused before the model (and its RoPE table of seq_len positions) is
    # built: --seq-len 1000000000 ran the load out of memory
    assert main(["--config", str(toml), "--data", str(data), "--seq-len", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: seq_len 1000000000 (--seq-len): no window to score: {data} is at most "), (
        err
    )


def test_sentencepiece_style_tokens_count_their_spaces_and_fallback_bytes(tmp_path):
    # LLaMA 2's layout: ▁ for a space, byte-fallback tokens <0xNN>; decoded alone, "▁the" loses its space
    # and a lone byte decodes to U+FFFD (3 bytes)
    import json

    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for piece in ["▁", "t", "h", "e", "r", "▁t", "▁th", "▁the"]:
        vocab.setdefault(piece, len(vocab))
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e")]
    sp = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    sp.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    sp.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    sp.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    tokenizer = load_tokenizer(tmp_path)
    text = "the über"
    ids = sp.encode(text).ids
    assert sp.decode(ids) == text and sp.encode(text).tokens[:3] == ["▁the", "▁", "<0xC3>"]
    lengths = token_byte_lengths(tokenizer)
    # the text's bytes, and the one space the tokenizer prepends to a document's first word
    assert int(lengths[torch.tensor(ids)].sum()) == len(text.encode("utf-8")) + 1
    assert lengths[tokenizer.bos_id] == lengths[tokenizer.eos_id] == 0


def test_a_flex_attention_model_is_scored_with_its_own_masks(tokenizer):
    # score() built SDPA's masks whatever the kernel: a flex model got None, and FlexAttention without a
    # block mask attended the future
    windows = list(packed_windows(_documents(tokenizer), 16))[:2]
    lengths = token_byte_lengths(tokenizer)
    scores = {}
    for kernel in ("sdpa", "flex"):
        torch.manual_seed(0)
        args = ModelArgs.from_flavor("debug", vocab_size=tokenizer.vocab_size, n_layers=1, attn_type=kernel)
        scores[kernel] = score(Transformer(args).eval(), windows, lengths, progress=False).loss
    assert math.isclose(scores["flex"], scores["sdpa"], rel_tol=1e-5)
    with pytest.raises(ValueError, match="needs its BlockMask"):
        Transformer(args).eval()(torch.tensor(windows)[:, :-1])


def test_a_stream_of_exactly_one_window_is_scored():
    # torchtitan's packing yields a window once the buffer holds seq_len + 1 tokens, so a stream of exactly
    # that many is one window, and two documents that fill two windows exactly are two
    assert list(packed_windows([list(range(5))], seq_len=4)) == [[0, 1, 2, 3, 4]]
    assert list(packed_windows([[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]], seq_len=4)) == [
        [1, 2, 3, 4, 5],
        [6, 7, 8, 9, 10],
    ]

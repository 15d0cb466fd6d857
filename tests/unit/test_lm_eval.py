"""lm-evaluation-harness on an exported model: its bits per byte equal BOOST's on the same windows.

Optional: skipped where ``lm_eval`` (and ``accelerate``, which its transformers backend imports)
is not installed; BOOST does not depend on it.
"""

import json
import math

import pytest
import torch

pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")

from boost.after_training.evaluate import score, token_byte_lengths  # noqa: E402
from boost.after_training.interop import save_hf  # noqa: E402
from boost.after_training.lm_eval_local import evaluate_local_text  # noqa: E402
from boost.training.data.run_tokenizer import load_tokenizer  # noqa: E402
from boost.training.model import ModelArgs, Transformer  # noqa: E402
from tests.trained_runs import offline_tokenizer_dir  # noqa: E402

# Each shorter than the exported max_position_embeddings (64), so lm-eval scores it in one window.
DOCS = [
    "def área(r):\n    return 3.14159 * r * r  # π r²\n",
    "import os\nprint(os.getcwd())\n",
    "x = [i * i for i in range(9)]\n",
]


@pytest.mark.lm_eval
def test_lm_eval_bits_per_byte_match_boost(tmp_path):
    tokenizer = load_tokenizer(offline_tokenizer_dir())
    torch.manual_seed(0)
    model = Transformer(ModelArgs(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=tokenizer.vocab_size, ffn_dim=176, linear="lax",
        rank=16, max_seq_len=64,
    )).eval()  # fmt: skip
    save_hf(model, tmp_path / "hf", tokenizer_dir=offline_tokenizer_dir())
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    theirs = evaluate_local_text(tmp_path / "hf", data)
    # lm-eval: each document alone, [BOS] text, every text token predicted, no EOS.
    ours = [
        score(model, [tokenizer.encode(d)], token_byte_lengths(tokenizer), batch_size=1, progress=False)
        for d in DOCS
    ]
    nll_bits = sum(s.loss * s.tokens for s in ours) / math.log(2)
    n_bytes = sum(len(d.encode("utf-8")) for d in DOCS)
    assert sum(s.bytes for s in ours) == n_bytes
    assert math.isclose(theirs["bits_per_byte"], nll_bits / n_bytes, rel_tol=1e-5), (
        theirs,
        nll_bits / n_bytes,
    )
    assert math.isclose(theirs["byte_perplexity"], 2 ** (nll_bits / n_bytes), rel_tol=1e-5)

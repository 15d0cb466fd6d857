"""Make tests/data/cola_golden.pt: a tiny CoLA model's weights and its logits, computed by the CoLA
authors' own modeling code (github alvin-zyl/CoLA, ``cola/modeling_cola.py``), for both settings of
``only_lr_act``. Nothing of BOOST is imported here.

Run once, with the authors' ``cola/`` package on the path and the transformers it was written for:

    git clone https://github.com/alvin-zyl/CoLA /tmp/CoLA     # commit 91ff0d1
    pip install --target /tmp/tf4 --no-deps transformers==4.48.3 tokenizers==0.21.0 huggingface_hub==0.26.5
    PYTHONPATH=/tmp/tf4:/tmp/CoLA python tests/data/make_cola_golden.py

The file records the commit, the versions and this command (``meta``).
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import torch
import transformers
from cola.configuration_cola import ColaConfig
from cola.modeling_cola import ColaForCausalLM

COMMIT = "91ff0d1"
SHAPE = dict(vocab_size=64, hidden_size=32, intermediate_size=88, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=2, rank=8, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=64)


def main() -> None:
    torch.manual_seed(0)
    weights = None
    logits = {}
    tokens = torch.randint(0, SHAPE["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(1))
    for only_lr_act in (True, False):
        model = ColaForCausalLM(ColaConfig(**SHAPE, only_lr_act=only_lr_act)).double().eval()
        if weights is None:
            # the norms start at 1: give them a draw of their own, so that their weights matter
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith("norm.weight"):
                        p.copy_(1 + 0.1 * torch.randn_like(p))
            weights = {k: v.clone() for k, v in model.state_dict().items()}
        model.load_state_dict(weights)
        with torch.no_grad():
            logits[only_lr_act] = model(tokens).logits
    meta = {
        "source": f"github alvin-zyl/CoLA at {COMMIT}, cola/modeling_cola.py ColaForCausalLM, float64",
        "transformers": str(transformers.__version__), "torch": str(torch.__version__),
        "command": "PYTHONPATH=/tmp/tf4:/tmp/CoLA python tests/data/make_cola_golden.py",
        "date": str(datetime.date.today()), "config": SHAPE,
    }
    out = Path(__file__).with_name("cola_golden.pt")
    torch.save({"meta": meta, "weights": weights, "tokens": tokens, "logits": logits}, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()

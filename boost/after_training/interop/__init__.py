"""Hugging Face LLaMA checkpoints in and out of BOOST.

``load_hf`` reads a folder as ``transformers`` saves it (``config.json`` + ``model.safetensors`` or
shards with ``model.safetensors.index.json``; safetensors only, so no pickle is ever loaded) and
builds a ``boost.Transformer`` of any linear kind. ``save_hf`` writes the dense kind back as a LLaMA
checkpoint that ``LlamaForCausalLM.from_pretrained`` loads, and the low-rank kinds as a folder with
BOOST's modeling code that ``AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)``
loads (``boost.after_training.hf_folder``); ``load_hf`` reloads either bit for bit.

RoPE. BOOST (like Meta and torchtitan) rotates *interleaved* pairs ``(x[2j], x[2j+1])``; Hugging Face
rotates *halves* ``(x[j], x[j + head_dim/2])``. HF's ``convert_llama_weights_to_hf.py`` reorders the
rows of ``wq`` and ``wk`` per head so that the two conventions give the same attention scores::

    permute(w, n_heads, d1, d2) = w.view(n_heads, d1 // n_heads // 2, 2, d2).transpose(1, 2).reshape(d1, d2)

``from_hf_rows`` (``boost.after_training.hf_folder``) is its inverse (``view(n_heads, 2, d1 // n_heads // 2, d2)``),
applied with the query heads to ``q_proj`` and with the key/value heads to ``k_proj``. Both are pure
row shuffles: exact. A low-rank import factorises each projection by truncated SVD
(``boost.after_training.interop.factorize``): exact for ``svd`` where the weights have rank ≤ r, a starting point
for training for ``cola`` and ``lax``.

One job per module:

- ``read``: a folder read strictly (config, weights, names and shapes) and built into a model;
- ``factorize``: W ≈ B·A per projection, its error table, and B·A multiplied back out;
- ``write``: a model written as a transformers folder, and ``densify``;
- ``cli``: ``python -m boost.after_training.interop``::

    python -m boost.after_training.interop import HF_DIR --linear cola --rank 64 --out OUT_DIR
    python -m boost.after_training.interop export --config train_configs/debug.toml --out HF_DIR  # newest checkpoint
    python -m boost.after_training.interop export BOOST_DIR --out HF_DIR [--densify]
"""

from boost.after_training.interop.factorize import factorize
from boost.after_training.interop.read import args_from_hf_config, load_hf, load_hf_with_report
from boost.after_training.interop.write import densify, save_hf

__all__ = ["load_hf", "load_hf_with_report", "save_hf", "densify", "args_from_hf_config", "factorize"]

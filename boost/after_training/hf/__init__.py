"""Hugging Face ``transformers`` code for BOOST's low-rank models, shipped inside every exported folder.

``configuration_boost.py`` and ``modeling_boost.py`` are copied verbatim next to the weights by
``boost.after_training.interop.save_hf``; ``config.json``'s ``auto_map`` points transformers at them, so
``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`` needs no BOOST install.
They import torch and transformers only.
"""

from pathlib import Path

REMOTE_CODE_FILES = (
    Path(__file__).with_name("configuration_boost.py"),
    Path(__file__).with_name("modeling_boost.py"),
)

"""What a tokenizer is, as bytes: the fingerprint a checkpoint and a prepared token folder both record.

Two tokenizers of the same vocabulary size can give other ids for the same text; their files differ,
so the fingerprint does. The checkpoint identity (``torchtitan_ext.guards.checkpoint_identity``) and
the token folder's manifest (``boost.training.data.token_folder``) record the same value, so a corpus prepared
with one tokenizer is refused for a run that trains with another.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# The files a Hugging Face tokenizer folder is read from (ids, merges, added and special tokens, BOS/EOS use).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)


def tokenizer_fingerprint(folder: str | Path) -> str:
    """``sha256:<hex>`` over the name and bytes of each of ``TOKENIZER_FILES`` that ``folder`` holds.

    Example::

        >>> import tempfile
        >>> tokenizer_fingerprint(tempfile.mkdtemp()) == tokenizer_fingerprint(tempfile.mkdtemp())  # no files
        True
    """
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = Path(folder) / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + digest.hexdigest()

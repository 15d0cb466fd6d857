"""Which documents ``--validation-fraction`` holds out: a hash of the text, nothing else.

A document goes to ``validation`` when the first 8 bytes of the BLAKE2b digest of its UTF-8 text,
read as a fraction of 2^64, fall below the fraction. The rule sees no worker, order or file, so the
split is the same for any ``--workers`` and any order of the inputs, and a text that occurs twice in
the corpus (C4 repeats boilerplate pages) lands in the same split both times: a held-out document is
never also trained on.
"""

from __future__ import annotations

import hashlib


def holds_out(text: str, fraction: float) -> bool:
    """Whether ``text`` belongs to the validation split at ``fraction`` (0 holds nothing out).

    Example::

        >>> holds_out("a document", 0.0), holds_out("a document", 1.0)
        (False, True)
        >>> sum(holds_out(f"document {i}", 0.1) for i in range(10_000))  # about a tenth
        981
    """
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") < fraction * 2**64

"""Documents framed as the trainer frames them: ``[BOS] ids [EOS]``, a batch at a time.

torchtitan's packing dataset encodes each text with ``HuggingFaceTokenizer.encode(text, add_bos=True,
add_eos=True)``: the tokenizer's ids (its post-processor's tokens included) with BOS before and EOS after,
each where the tokenizer folder names one and the post-processor did not add it
(``boost.training.data.run_tokenizer.load_tokenizer`` reads them as torchtitan does). The ids come from the
Rust tokenizer's ``encode_batch`` (the ids of ``encode``, a batch spread over the process's threads;
``encode_batch_fast``, which skips the offsets, measured the same CPU time on a byte-level BPE).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from boost.training.data.run_tokenizer import TextTokenizer


def frame_batch(tokenizer: TextTokenizer, texts: Sequence[str], typecode: str) -> tuple[array, list[int]]:
    """The framed documents of ``texts`` back to back, and each one's token count.

    Example::

        >>> from boost.training.data.offline_tokenizer import ensure_stdlib_tokenizer
        >>> from boost.training.data.run_tokenizer import load_tokenizer
        >>> tokenizer = load_tokenizer(ensure_stdlib_tokenizer(2048, None))
        >>> tokens, lengths = frame_batch(tokenizer, ["def f():", ""], "H")
        >>> tokens[0] == tokens[lengths[0]] == tokenizer.bos_id, tokens[-1] == tokenizer.eos_id, lengths[1]
        (True, True, 2)
    """
    tokens, lengths = array(typecode), []
    for encoding in tokenizer.tokenizer.encode_batch(list(texts)):
        framed = tokenizer.frame(encoding.ids, bos=True, eos=True)
        tokens.extend(framed)
        lengths.append(len(framed))
    return tokens, lengths

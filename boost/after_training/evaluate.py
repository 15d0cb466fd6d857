"""Perplexity and bits per byte of a trained BOOST model on a text corpus.

Documents are framed and packed exactly as the trainer's validation packs them (torchtitan's
``HuggingFaceTextDataset``): ``[BOS] text [EOS]`` per document, concatenated, cut into consecutive
windows of ``seq_len + 1`` tokens; each window scores its last ``seq_len`` tokens, attending as the run
did (``boost.attn_mask_type``: under ``block_causal`` each token within its own document of the window,
SDPA's mask of the trainer's). So the loss here is the trainer's validation loss on the same split, where
the trainer validated on one data-parallel rank (with more, each rank reads its own share of the windows). Reported:

- ``loss``: mean next-token cross-entropy in nats, ``perplexity = exp(loss)``;
- ``bits_per_byte``: the summed cross-entropy in bits over the UTF-8 bytes of the scored tokens
  (BOS/EOS count no bytes), which compares across tokenizers.

CLI (the run's held-out split, or ``--data`` a ``.txt``/``.jsonl``/``.parquet`` file or folder)::

    python -m boost.after_training.evaluate --config train_configs/debug.toml [--data notes.txt] [--max-tokens 65536]
    torchrun --nproc_per_node 2 -m boost.after_training.evaluate --config ...       # BTP over 2 processes, same number
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

from boost.after_training.job_defaults import job_value, read_run_config
from boost.training.data.local_files import read_local_corpus  # the trainer's readers, not copies
from boost.training.data.stdlib_corpus import stdlib_texts
from boost.training.model.attention import KERNELS
from boost.training.model.model import Transformer


@dataclass
class Score:
    loss: float
    perplexity: float
    bits_per_byte: float
    tokens: int
    bytes: int

    def __str__(self) -> str:
        return (
            f"perplexity {self.perplexity:.4f}  loss {self.loss:.6f} nats/token  "
            f"bits/byte {self.bits_per_byte:.6f}  ({self.tokens} tokens, {self.bytes} bytes)"
        )


# SentencePiece's space symbol, and its byte-fallback tokens (LLaMA 2, Mistral: one byte each)
_SPACE_SYMBOL = "\u2581"
_FALLBACK_BYTE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def token_byte_lengths(tokenizer) -> torch.Tensor:
    """UTF-8 bytes each token id stands for (``(vocab,)``; special tokens 0).

    Byte-level BPE (BOOST's offline tokenizer, GPT-2/LLaMA-3 style) spells every token in a
    256-symbol alphabet, one symbol per byte, so its length is exact. SentencePiece-style tokens (LLaMA 2,
    Mistral) spell a space ``▁`` and a byte-fallback byte ``<0xNN>``: one byte each (a document's first
    word counts the space its tokenizer prepends, one byte the text lacks). Other tokenizers decode each
    token alone, exact for whole-character tokens.
    """
    tok = tokenizer.tokenizer
    # a decoder of any shape (ByteLevel alone, or inside a Sequence) is found in its serialised form
    byte_level = '"type":"ByteLevel"' in json.dumps(
        json.loads(tok.to_str()).get("decoder"), separators=(",", ":")
    )
    special = {t for t in (tokenizer.bos_id, tokenizer.eos_id) if t is not None}
    special |= {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    lengths = torch.zeros(tok.get_vocab_size(), dtype=torch.long)
    for i in range(tok.get_vocab_size()):
        if i in special:
            continue
        piece = tok.id_to_token(i)
        if byte_level:
            lengths[i] = len(piece)
        elif _FALLBACK_BYTE.fullmatch(piece):
            lengths[i] = 1
        elif _SPACE_SYMBOL in piece:  # decoded alone, its leading ▁ would be stripped
            lengths[i] = len(piece.replace(_SPACE_SYMBOL, " ").encode("utf-8"))
        else:
            lengths[i] = len(tok.decode([i]).encode("utf-8"))
    return lengths


def packed_windows(documents: Iterable[list[int]], seq_len: int) -> Iterator[list[int]]:
    """Consecutive ``seq_len + 1``-token windows of the concatenated documents (the tail is dropped)."""
    buffer: list[int] = []
    for ids in documents:
        buffer.extend(ids)
        while len(buffer) >= seq_len + 1:
            yield buffer[: seq_len + 1]
            buffer = buffer[seq_len + 1 :]


@torch.no_grad()
def score(
    model: Transformer,
    windows: Iterable[list[int]],
    byte_lengths: torch.Tensor,
    batch_size: int = 8,
    max_tokens: int | None = None,
    progress: bool = True,
    eos_id: int | None = None,
) -> Score:
    """Cross-entropy of ``model`` on the windows, ``batch_size`` at a time, up to ``max_tokens`` scored tokens,
    masked as the model's ``attn_mask_type`` says (``block_causal``: documents end at ``eos_id``).

    Example::

        >>> from boost.training.model import ModelArgs, Transformer
        >>> _ = torch.manual_seed(0)
        >>> model = Transformer(ModelArgs.from_flavor("debug", vocab_size=512, n_layers=2)).eval()
        >>> windows = packed_windows([list(range(1, 300))], seq_len=64)
        >>> s = score(model, windows, torch.ones(512, dtype=torch.long), progress=False)
        >>> s.tokens
        256
    """
    mask_type = model.model_args.attn_mask_type
    if mask_type != "causal" and eos_id is None:
        raise ValueError(f"attn_mask_type = {mask_type!r} splits windows into documents at EOS: pass eos_id")
    nll, tokens, n_bytes = 0.0, 0, 0
    total = max_tokens
    if isinstance(windows, list) and windows:  # a known amount of work: the bar shows the remaining time
        total = min(len(windows) * (len(windows[0]) - 1), max_tokens or float("inf"))
    bar = tqdm(total=total, unit="tok", disable=not progress, file=sys.stderr, desc="scoring")
    batch: list[list[int]] = []

    def flush() -> None:
        nonlocal nll, tokens, n_bytes
        ids = torch.tensor(batch)
        # the model's own kernel's masks (SDPA's None for causal: its is_causal)
        masks = KERNELS[model.model_args.attn_type].masks(ids[:, :-1], mask_type, eos_id)
        logits = model(ids[:, :-1], attention_masks=masks)
        labels = ids[:, 1:]
        # Summed in float64: the same total whatever the batching or process count.
        nll += (
            F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum").double().item()
        )
        tokens += labels.numel()
        n_bytes += int(byte_lengths[labels].sum())
        bar.update(labels.numel())
        batch.clear()

    for window in windows:
        if max_tokens is not None and tokens + (len(batch) + 1) * (len(window) - 1) > max_tokens:
            break
        batch.append(window)
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    bar.close()
    if tokens == 0:
        raise ValueError(
            "no window to score: the text is shorter than seq_len + 1 tokens (or --max-tokens < seq_len)"
        )
    loss = nll / tokens
    return Score(loss, math.exp(loss), nll / math.log(2) / max(n_bytes, 1), tokens, n_bytes)


def corpus_texts(config: dict, data: str | None) -> tuple[list[str], str]:
    """Texts of ``--data`` or of the run's held-out split (``[validation]`` of the TOML), and a name for them."""
    if data is not None:
        return read_local_corpus(data, "data"), data  # messages read "data = ...: set --data to ..."
    dataset = job_value(config, "validation", "dataset")  # torchtitan's c4_validation when the TOML omits it
    if dataset == "stdlib_validation":
        return stdlib_texts("validation"), "stdlib held-out split"
    if dataset == "local":
        path = job_value(config, "validation", "dataset_path")
        return read_local_corpus(path, "validation.dataset_path"), path
    raise ValueError(f"validation.dataset = {dataset!r} is not available offline here; pass --data FILE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m boost.after_training.evaluate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", required=True, help="the run's TOML (train_configs/...)")
    parser.add_argument(
        "--checkpoint", default=None, help="step-N folder or step number (default: newest intact)"
    )
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the run's)")
    parser.add_argument(
        "--data", default=None, help=".txt/.jsonl/.parquet file or folder (default: held-out split)"
    )
    parser.add_argument(
        "--seq-len", type=int, default=None, help="window length (default: validation.seq_len)"
    )
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=None, help="stop after this many scored tokens")
    from boost.after_training.trained_run import load_run, shard_for_inference
    from boost.training.data.run_tokenizer import RunError, split_overrides

    # --section.field value: the overrides the run was started with (--boost.linear svd), read over the TOML
    own, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    ns = parser.parse_args(own)

    try:
        for option in ("seq_len", "batch_size", "max_tokens"):
            if getattr(ns, option) is not None and getattr(ns, option) < 1:
                raise ValueError(f"--{option.replace('_', '-')} {getattr(ns, option)} must be >= 1")
        config = read_run_config(ns.config, overrides)
        # the trainer's validation windows: validation.seq_len, torchtitan's 2048 when the TOML omits it
        seq_len = ns.seq_len or job_value(config, "validation", "seq_len")
        texts, name = corpus_texts(config, ns.data)
        # a token covers at least a byte of text (the framing's BOS/EOS, a leading-space marker apart): a window
        # longer than the text bounds scores nothing, and its RoPE table is built before the text is read
        # (--seq-len 1000000000: the model's load ran out of memory)
        most = sum(len(text.encode()) + 3 for text in texts)
        if seq_len + 1 > most:
            raise ValueError(
                f"seq_len {seq_len} (--seq-len): no window to score: {name} is at most {most:,} tokens, fewer "
                "than seq_len + 1; pass a smaller --seq-len or more text"
            )
        run = load_run(
            ns.config,
            ns.checkpoint,
            ns.tokenizer,
            max_seq_len=seq_len,
            overrides=overrides,
            checkpoint_arg="--checkpoint",
        )
        rank = shard_for_inference(run.model, run.config)
        documents = (run.tokenizer.encode(t, eos=True) for t in texts)
        result = score(
            run.model, list(packed_windows(documents, seq_len)), token_byte_lengths(run.tokenizer),
            ns.batch_size, ns.max_tokens, progress=rank == 0, eos_id=run.tokenizer.eos_id,
        )  # fmt: skip
        if rank == 0:
            print(f"{run.checkpoint} on {name}, seq_len {seq_len}: {result}")
    except (RunError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from boost.runtime.process_exit import exit_finished_process

    code = main()
    if code == 0 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
        exit_finished_process()  # under torchrun: gloo can abort in interpreter finalisation
    sys.exit(code)

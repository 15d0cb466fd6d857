"""Sample from a trained BOOST model with a KV cache, streaming tokens to the console.

``sample(model, prompt_ids, ...)`` yields new token ids one at a time: the prompt is scored once
(prefill), then every step feeds only the last token and reads the keys and values of the earlier
positions from a ``KVCache``. ``temperature = 0`` is greedy decoding; otherwise the logits are
divided by the temperature, cut to the ``top_k`` most likely tokens and to the smallest set whose
probability reaches ``top_p``, and a token is drawn from a generator seeded by ``seed``.

CLI (newest checkpoint of the run, or ``--checkpoint step-N folder | N``)::

    python -m boost.after_training.generate --config train_configs/debug.toml --prompt "def main(" \\
        --max-new-tokens 64 --temperature 0.8 --top-k 50 --top-p 0.95 --seed 0
    torchrun --nproc_per_node 2 -m boost.after_training.generate --config ...   # BTP over 2 processes, same tokens
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator

import torch

from boost.training.model.kv_cache import KVCache
from boost.training.model.model import Transformer


def next_token_distribution(
    logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None
) -> torch.Tensor:
    """Probabilities ``(vocab,)`` of the next token from its logits, with temperature, top-k and top-p applied."""
    logits = logits.float()
    # shifted first, so that a tiny temperature sends the others to -inf, not the best to inf (inf - inf: nan)
    logits = (logits - logits.max()) / temperature
    if top_k is not None and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep a token while the mass before it is below top_p: the most likely token always stays.
        drop = sorted_probs.cumsum(0) - sorted_probs >= top_p
        probs = probs.scatter(0, order[drop], 0.0)
        probs = probs / probs.sum()
    return probs


def check_sampling(
    temperature: float, top_k: int | None, top_p: float | None, max_new_tokens: int, seed: int = 0
) -> None:
    """``ValueError`` naming the option and its range, before any work."""
    if not -(2**63) <= seed < 2**64:  # torch.Generator.manual_seed's range
        raise ValueError(f"--seed {seed} must lie in [-2**63, 2**64)")
    if not temperature >= 0 or math.isinf(temperature):  # nan fails the comparison
        raise ValueError(f"--temperature {temperature} must be a finite number >= 0 (0 = greedy)")
    if top_k is not None and top_k < 1:
        raise ValueError(f"--top-k {top_k} must be >= 1 (leave it out for no cut)")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"--top-p {top_p} must lie in (0, 1]")
    if max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens {max_new_tokens} must be >= 0")


@torch.no_grad()
def sample(
    model: Transformer,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_id: int | None = None,
    use_cache: bool = True,
) -> Iterator[int]:
    """Yield up to ``max_new_tokens`` token ids continuing ``prompt_ids`` (stops after ``eos_id``). A model
    trained with ``block_causal`` attention continues the prompt's last document (after its last ``eos_id``).

    ``use_cache=False`` re-runs the whole prefix every step (the reference the cache must match).

    Example::

        >>> from boost.training.model import ModelArgs, Transformer
        >>> _ = torch.manual_seed(0)
        >>> model = Transformer(ModelArgs.from_flavor("debug", vocab_size=512, n_layers=2)).eval()
        >>> len(list(sample(model, [1, 2, 3], max_new_tokens=5, temperature=0)))
        5
    """
    check_sampling(temperature, top_k, top_p, max_new_tokens)
    if not prompt_ids:
        raise ValueError("the prompt is empty: give at least one token (the tokenizer's BOS is one)")
    ends = [i for i, t in enumerate(prompt_ids[:-1]) if t == eos_id]
    if model.model_args.attn_mask_type == "block_causal" and ends:
        # The run attended within each document only, and documents end at EOS: the continuation reads
        # the prompt's last document alone (RoPE is relative: its logits are those of the masked window).
        prompt_ids = prompt_ids[ends[-1] + 1 :]
    limit = model.model_args.max_seq_len
    if len(prompt_ids) + max_new_tokens > limit:
        raise ValueError(
            f"prompt ({len(prompt_ids)} tokens) + --max-new-tokens {max_new_tokens} exceeds the model's "
            f"max_seq_len {limit}; ask for fewer tokens"
        )
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.tensor([prompt_ids], dtype=torch.long)
    cache = KVCache(limit) if use_cache else None
    step_input = tokens
    for _ in range(max_new_tokens):
        logits = model(step_input, cache=cache) if use_cache else model(tokens)
        last = logits[0, -1]
        if temperature == 0:
            token = int(last.argmax())
        else:
            probs = next_token_distribution(last, temperature, top_k, top_p)
            token = int(torch.multinomial(probs, 1, generator=generator))
        yield token
        if token == eos_id:
            return
        step_input = torch.tensor([[token]])
        if not use_cache:
            tokens = torch.cat([tokens, step_input], dim=1)


class StreamingDecoder:
    """Decodes a growing id list into text pieces; a byte-level token may end inside a UTF-8
    character, so a piece is released only once the text decoded so far ends in a whole one. Decoded
    after ``prefix`` (the prompt's ids): a tokenizer that strips a text's leading space (SentencePiece's
    ``▁``) keeps the continuation's first one."""

    def __init__(self, tokenizer, prefix: list[int] = ()):
        self.tokenizer, self.ids = tokenizer, list(prefix)
        self.emitted = len(tokenizer.decode(self.ids)) if self.ids else 0

    def push(self, token: int) -> str:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        piece, self.emitted = text[self.emitted :], len(text)
        return piece


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m boost.after_training.generate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", required=True, help="the run's TOML (train_configs/...)")
    parser.add_argument(
        "--checkpoint", default=None, help="step-N folder or step number (default: newest intact)"
    )
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the run's)")
    parser.add_argument("--prompt", default="", help="text to continue (default: start of a document)")
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=0.8, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    from boost.after_training.trained_run import load_run, shard_for_inference
    from boost.training.data.run_tokenizer import RunError, split_overrides

    # --section.field value: the overrides the run was started with (--boost.linear svd), read over the TOML
    own, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    ns = parser.parse_args(own)

    try:
        check_sampling(ns.temperature, ns.top_k, ns.top_p, ns.max_new_tokens, ns.seed)
        # RoPE table long enough for the request even beyond the training length (a token is >= 1 byte).
        needed = 1 + len(ns.prompt.encode()) + ns.max_new_tokens
        run = load_run(
            ns.config,
            ns.checkpoint,
            ns.tokenizer,
            max_seq_len=needed,
            overrides=overrides,
            checkpoint_arg="--checkpoint",
        )
        prompt_ids = run.tokenizer.encode(ns.prompt)
        rank = shard_for_inference(run.model, run.config)
        tokens = sample(
            run.model, prompt_ids, ns.max_new_tokens, ns.temperature, ns.top_k, ns.top_p, ns.seed,
            eos_id=run.tokenizer.eos_id,
        )  # fmt: skip
        if rank == 0:
            print(f"[{run.checkpoint}]", file=sys.stderr)
            sys.stdout.write(ns.prompt)
        stream = StreamingDecoder(run.tokenizer, prompt_ids)
        for token in tokens:
            piece = stream.push(token)
            if rank == 0 and piece:
                sys.stdout.write(piece)
                sys.stdout.flush()
        if rank == 0:
            print()
    except (RunError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from boost.runtime.process_exit import exit_finished_process

    code = main()
    sys.stdout.flush()
    if code == 0 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
        exit_finished_process()  # under torchrun: gloo can abort in interpreter finalisation
    sys.exit(code)

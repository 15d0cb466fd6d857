"""Keys and values of the positions already seen, per layer, for incremental decoding.

``Transformer.forward(tokens, cache=cache)`` scores only the new ``tokens``: every attention layer
appends their keys and values here and attends over all of them, and RoPE starts at position
``cache.seen``. Training never passes a cache. Under tensor parallelism each rank caches its own
heads (the attention views use ``-1`` for the head count), so nothing here knows of the layout.
"""

from __future__ import annotations

import torch


class KVCache:
    """Growing per-layer key/value tensors ``(bs, positions, n_local_kv_heads, head_dim)``.

    Args:
        max_positions: the model's RoPE table length (``ModelArgs.max_seq_len``); a longer
            sequence is refused with the fix rather than rotated with a truncated table.

    Example::

        >>> from boost.training.model import ModelArgs, Transformer
        >>> _ = torch.manual_seed(0)
        >>> model = Transformer(ModelArgs.from_flavor("debug", vocab_size=512, n_layers=2))
        >>> cache = KVCache(model.model_args.max_seq_len)
        >>> prefill = model(torch.tensor([[1, 2, 3]]), cache=cache)   # (1, 3, 512), cache.seen == 3
        >>> step = model(torch.tensor([[4]]), cache=cache)            # (1, 1, 512), cache.seen == 4
    """

    def __init__(self, max_positions: int):
        self.max_positions = max_positions
        self._layers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._seen = 0

    @property
    def seen(self) -> int:
        """Positions already cached: where the next tokens' RoPE starts."""
        return self._seen

    def begin(self, new_positions: int) -> int:
        """Check that ``new_positions`` more fit; return the position they start at."""
        if self._seen + new_positions > self.max_positions:
            raise ValueError(
                f"sequence of {self._seen + new_positions} positions exceeds the model's max_seq_len "
                f"{self.max_positions}; ask for fewer new tokens or a shorter prompt"
            )
        return self._seen

    def append(self, layer_id: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's keys and values of ``layer_id``; return all of that layer's so far."""
        if layer_id in self._layers:
            k_past, v_past = self._layers[layer_id]
            k, v = torch.cat([k_past, k], dim=1), torch.cat([v_past, v], dim=1)
        self._layers[layer_id] = (k, v)
        return k, v

    def end(self, new_positions: int) -> None:
        """Mark ``new_positions`` as cached (after every layer has appended them)."""
        self._seen += new_positions

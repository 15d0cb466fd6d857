"""The training library: what a run is made of, on one device or many; torch only, never torchtitan.

- ``rules/``: every rule, once, a file a concern: linear kinds and TP schemes as records, modes, rank, layouts;
- ``options``: the ``[boost]`` options of a run, with their defaults;
- ``config_error``: ``ConfigError``, the one exception for input a user must change;
- ``model/``: the decoder, written for one device;
- ``parallel/``: tensor parallelism and activation checkpointing, applied to a built model;
- ``optim/``: LORO, the low-rank Riemannian optimizer, and its learning-rate schedule;
- ``data/``: corpora, tokenizers and prepared token folders, with no trainer attached.

Of the other groups it imports ``boost.runtime`` alone: planning and the after-training tools build
on it, never the other way round.
"""

"""The datasets a job names, checked before any process starts: a known name, and a ``local`` corpus that
every data-parallel rank can read from.

No torch and no torchtitan here: the launcher runs it before either loads. The known names are
torchtitan's own registry (from the schema snapshot, ``torchtitan_ext.preflight.schema``) and
BOOST's (``BOOST_DATASETS``, which ``text_datasets.register_datasets`` puts into torchtitan's registry;
tests/unit/test_start_up.py holds the two lists to the registry as the trainer sees it).
"""

from __future__ import annotations

from boost.config_error import refuse
from boost.data.local_files import read_local_corpus
from torchtitan_ext.preflight.schema import torchtitan_datasets

# registered by torchtitan_ext.data.text_datasets.register_datasets
BOOST_DATASETS = ("stdlib", "stdlib_validation", "local")
STDLIB_DATASETS = ("stdlib", "stdlib_validation")


def known_datasets() -> list[str]:
    """Every dataset name a job may give: torchtitan's registry and BOOST's."""
    return sorted({*torchtitan_datasets(), *BOOST_DATASETS})


def contiguous_shards(items: list, n: int) -> list[list]:
    """``items`` in ``n`` contiguous shards, as ``datasets.distributed.split_dataset_by_node`` splits a map-style
    dataset over data-parallel ranks (the first ``len(items) % n`` shards one longer)."""
    size, extra = divmod(len(items), n)
    bounds = [r * size + min(r, extra) for r in range(n + 1)]
    return [items[bounds[r] : bounds[r + 1]] for r in range(n)]


def check_dataset(
    name: str, dataset_path: str | None, section: str, dp_degree: int, batch_tokens: int | None = None
) -> None:
    """Refuse an unknown dataset, or a ``local`` corpus that is malformed or too small for the ranks.

    torchtitan gives each data-parallel rank a contiguous share of the documents; a rank with none
    would loop over nothing forever (torchtitan's infinite loader re-loops without yielding). A
    finite loader (validation: pass ``batch_tokens`` = local_batch_size × (seq_len + 1)) whose
    share cannot fill one batch yields nothing, and torchtitan's Validator then fails on an empty
    loss list at the first validation, possibly hours in.
    """
    if name.lower() not in known_datasets():
        refuse(f"{section}.dataset", name, f"unknown dataset; choose one of {known_datasets()}")
    config_field = f"{section}.dataset_path"
    if name.lower() in STDLIB_DATASETS and dataset_path:
        refuse(
            config_field,
            dataset_path,
            f"the stdlib datasets read the interpreter's sources and would ignore it: "
            f'set {section}.dataset = "local" to read it, or remove the path',
        )
    if name.lower() != "local":
        return
    texts = read_local_corpus(dataset_path, config_field)
    if len(texts) < dp_degree:
        refuse(
            config_field,
            dataset_path,
            f"holds {len(texts)} document(s), fewer than the data-parallel degree "
            f"{dp_degree}: each data-parallel rank needs one; add documents or "
            "lower the degree",
        )
    if batch_tokens is not None:
        # Byte-level BPE: a token covers at least one UTF-8 byte, so bytes + BOS + EOS bound the tokens.
        most = min(sum(len(t.encode()) + 2 for t in shard) for shard in contiguous_shards(texts, dp_degree))
        if most < batch_tokens:
            refuse(
                config_field,
                dataset_path,
                f"a data-parallel rank's share holds at most {most} tokens, fewer than "
                f"one {section} batch (local_batch_size × (seq_len + 1) = {batch_tokens}): "
                f"add text, or lower {section}.local_batch_size or {section}.seq_len",
            )

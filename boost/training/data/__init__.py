"""Text a run trains on and the offline tokenizer, with no trainer attached.

- ``stdlib_corpus``: the running interpreter's standard library as a corpus, split by path hash;
- ``local_files``: a user's ``.txt`` / ``.jsonl`` / ``.parquet`` files, read strictly;
- ``offline_tokenizer``: the byte-level BPE trained on ``stdlib`` and cached per machine;
- ``run_tokenizer``: a run's TOML and the tokenizer it names, read as the trainer reads them;
- ``token_order``, ``token_batches`` (with ``token_blend``, ``keyed_permutation``): a prepared token
  folder (``token_folder``) read as one global order of windows, a data-parallel rank's part of it.

Plain lists of texts and folders out; ``torchtitan_ext.data.text_datasets`` and
``torchtitan_ext.data.tokenizer`` hand them to torchtitan, the after-training tools read them directly.
"""

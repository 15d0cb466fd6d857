"""A corpus tokenized once into a token folder (``boost.training.data.token_folder``), in parallel, resumable.

- ``input_files``: the ``--input`` arguments (files, folders, globs) to a fixed list of files;
- ``document_reader``: one file's documents streamed, bad input refused or counted;
- ``framing``: documents framed ``[BOS] ids [EOS]`` as the trainer frames them;
- ``holdout``: which documents ``--validation-fraction`` holds out (a hash of the text);
- ``file_job``: one input file into its own shards, the unit of parallel work and of resuming;
- ``resume_state``: what an unfinished prepare has done (``DIR/.prepare/``);
- ``worker_pool``: file jobs on forked worker processes;
- ``progress_report``: the progress bar and the summary line;
- ``preparer``: ``prepare_corpus``, the whole run, the manifest last;
- ``cli`` / ``__main__``: ``python -m boost.training.data.prepare``.
"""

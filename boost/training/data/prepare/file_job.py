"""One input file tokenized into its own shards: the unit of parallel work and of resuming.

Input file ``k`` becomes ``train-k`` (and ``validation-k`` when documents are held out), whoever
prepares it and whenever: a file's shards depend on the file and the options alone, which is what
makes the output the same bytes for any ``--workers`` and lets a re-run skip finished files. The
shards are renamed into place when the whole file is done, then its record is written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from boost.training.data.prepare.document_reader import DocumentReader
from boost.training.data.prepare.framing import frame_batch
from boost.training.data.prepare.holdout import holds_out
from boost.training.data.prepare.resume_state import FileRecord, PrepareOptions, PrepareState
from boost.training.data.run_tokenizer import TextTokenizer, load_tokenizer
from boost.training.data.token_folder import ShardWriter, shard_name

# A batch is what one encode_batch call spreads over a process's threads: large enough that each
# thread gets dozens of documents, small enough that progress moves every few seconds.
BATCH_DOCUMENTS = 1024
BATCH_CHARS = 4_000_000


@dataclass(frozen=True)
class FileJob:
    index: int
    path: Path
    output: Path
    tokenizer_folder: Path
    options: PrepareOptions
    skip_bad: bool


Progress = Callable[[int, int, int], None]
"""Told ``(documents, tokens, bytes read)`` after each batch, each counted since the last call."""


@functools.cache
def _tokenizer(folder: Path) -> TextTokenizer:
    return load_tokenizer(folder)


def prepare_file(job: FileJob, report: Progress) -> FileRecord:
    """Tokenize ``job.path`` into its shards in ``job.output``; its record, also written to the state."""
    options = job.options
    tokenizer = _tokenizer(job.tokenizer_folder)
    typecode = {"uint16": "H", "uint32": "I"}[options.dtype]
    stat = job.path.stat()
    reader = DocumentReader(job.path, options.text_field, job.skip_bad)
    splits = ("train", "validation") if options.validation_fraction > 0 else ("train",)
    writers = {
        split: ShardWriter(job.output, shard_name(split, job.index), options.dtype) for split in splits
    }
    max_token_id = dict.fromkeys(splits, -1)
    bytes_reported = 0
    try:
        for batch in reader.batches(BATCH_DOCUMENTS, BATCH_CHARS):
            texts = {split: [] for split in splits}
            for _, text in batch:
                held_out = holds_out(text, options.validation_fraction)
                texts["validation" if held_out else "train"].append(text)
            tokens_in_batch = 0
            for split, split_texts in texts.items():
                if not split_texts:
                    continue
                tokens, lengths = frame_batch(tokenizer, split_texts, typecode)
                writers[split].append(tokens, lengths)
                max_token_id[split] = max(max_token_id[split], max(tokens, default=-1))
                tokens_in_batch += len(tokens)
            report(len(batch), tokens_in_batch, reader.bytes_read - bytes_reported)
            bytes_reported = reader.bytes_read
        shards = {split: writer.commit() for split, writer in writers.items()}
    except BaseException:
        for writer in writers.values():
            writer.abandon()
        raise
    report(0, 0, stat.st_size - bytes_reported)
    record = FileRecord(
        index=job.index,
        path=str(job.path),
        bytes=stat.st_size,
        mtime_ns=stat.st_mtime_ns,
        documents=sum(s.documents for s in shards.values()),
        skipped=reader.skipped,
        shards=shards,
        max_token_id=max_token_id,
    )
    PrepareState(job.output).record(record)
    return record

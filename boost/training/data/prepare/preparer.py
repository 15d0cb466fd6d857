"""A corpus prepared into a token folder: input files to shards in parallel, the manifest last.

``prepare_corpus`` resolves the inputs, refuses a folder that holds something else (another
prepare's options, files no prepare wrote), skips the input files an interrupted run finished,
prepares the rest on worker processes, and writes the manifest once every file is done: until then
``read_manifest`` refuses the folder, so a half-prepared corpus is never read as a dataset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from boost.training.config_error import ConfigError
from boost.training.data.prepare.file_job import FileJob
from boost.training.data.prepare.input_files import input_files
from boost.training.data.prepare.progress_report import PrepareProgress, summary_line
from boost.training.data.prepare.resume_state import FileRecord, PrepareOptions, PrepareState
from boost.training.data.prepare.worker_pool import run_file_jobs
from boost.training.data.run_tokenizer import TextTokenizer, load_tokenizer
from boost.training.data.token_folder import (
    MANIFEST,
    SPLITS,
    InputFile,
    Manifest,
    Split,
    read_manifest,
    token_dtype,
    write_manifest,
)
from boost.training.data.tokenizer_fingerprint import tokenizer_fingerprint


class PrepareInterrupted(Exception):
    """Ctrl-C: the files finished so far are kept, and a re-run continues from them."""


@dataclass(frozen=True)
class PrepareResult:
    manifest: Manifest
    summary: str
    """The one line a user reads at the end."""


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _manifest(options: PrepareOptions, records: list[FileRecord], tokenizer: TextTokenizer) -> Manifest:
    splits = {}
    for split in SPLITS:
        mine = [r for r in records if split in r.shards]
        splits[split] = Split(
            tuple(r.shards[split] for r in mine), max((r.max_token_id[split] for r in mine), default=-1)
        )
    return Manifest(
        tokenizer=options.tokenizer,
        tokenizer_path=str(tokenizer.folder),
        vocab_size=tokenizer.vocab_size,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        dtype=options.dtype,
        splits=splits,
        inputs=tuple(InputFile(r.path, r.bytes, r.documents, r.skipped) for r in records),
        text_field=options.text_field,
        validation_fraction=options.validation_fraction,
    )


def _finished_folder(output: Path, options: PrepareOptions) -> Manifest:
    """The manifest of a folder already prepared with ``options``; another folder is refused."""
    manifest = read_manifest(output, "--output")
    differences = options.differences(PrepareOptions.of_manifest(manifest))
    changed = [
        f.path for f in manifest.inputs if Path(f.path).is_file() and Path(f.path).stat().st_size != f.bytes
    ]
    if differences or changed:
        what = "; ".join(differences) if differences else f"{changed[0]} changed size since"
        raise ConfigError(
            f"--output {output}: already holds a finished prepare with other options or inputs ({what}); "
            "prepare into a new folder"
        )
    return manifest


def prepare_corpus(
    inputs: list[str],
    output: str | Path,
    tokenizer_folder: str | Path,
    text_field: str = "text",
    validation_fraction: float = 0.0,
    workers: int | None = None,
    skip_bad: bool = False,
    show_progress: bool | None = None,
) -> PrepareResult:
    """Tokenize every document of ``inputs`` into the token folder ``output`` (``boost.training.data.token_folder``).

    Raises ``ConfigError`` (bad options, or ``BadInput`` naming a file and line), ``WorkerDied`` or
    ``PrepareInterrupted``; in each case the folder holds no manifest and a re-run continues it.

    Example::

        >>> import tempfile
        >>> from boost.training.data.offline_tokenizer import ensure_stdlib_tokenizer
        >>> corpus = Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = corpus.write_text('{"text": "def f(): pass"}\\n{"text": "x = 1"}\\n')
        >>> out = Path(tempfile.mkdtemp()) / "tokens"
        >>> result = prepare_corpus([str(corpus)], out, ensure_stdlib_tokenizer(2048, None), workers=1)
        >>> result.manifest.splits["train"].documents, sorted(p.name for p in out.iterdir())
        (2, ['manifest.json', 'train-00000.bin', 'train-00000.idx'])
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise ConfigError(f"--validation-fraction {validation_fraction}: hold out a fraction in [0, 1)")
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise ConfigError(f"--workers {workers}: use at least 1")
    output = Path(output).expanduser().resolve()
    tokenizer_folder = Path(tokenizer_folder).expanduser().resolve()
    files = input_files(inputs)
    tokenizer = load_tokenizer(tokenizer_folder)
    options = PrepareOptions(
        tokenizer=tokenizer_fingerprint(tokenizer_folder),
        text_field=text_field,
        validation_fraction=validation_fraction,
        dtype=token_dtype(tokenizer.vocab_size),
        inputs=tuple(str(f) for f in files),
    )
    if (output / MANIFEST).is_file():
        manifest = _finished_folder(output, options)
        return PrepareResult(
            manifest,
            f"already prepared, nothing to do: {output} ({manifest.splits['train'].tokens:,} tokens)",
        )

    state = PrepareState(output)
    state.open(options)
    records: dict[int, FileRecord] = {}
    jobs = []
    for index, path in enumerate(files):
        record = state.finished(index, path)
        if record is not None:
            records[index] = record
        else:
            jobs.append(FileJob(index, path, output, tokenizer_folder, options, skip_bad))
    files_before = len(records)
    # Largest first: the last file to start is a small one, so no core waits long on a straggler.
    jobs.sort(key=lambda job: (-job.path.stat().st_size, job.index))
    processes = min(workers, len(jobs))
    progress = PrepareProgress(sum(job.path.stat().st_size for job in jobs), len(jobs), show_progress)
    try:
        if jobs:
            run_file_jobs(
                jobs,
                processes,
                max(1, workers // processes),
                progress.update,
                lambda record: records.__setitem__(record.index, record),
            )
        progress.close()
        manifest = _manifest(options, [records[i] for i in range(len(files))], tokenizer)
        if not any(split.documents for split in manifest.splits.values()):
            # only --skip-bad gets here (an input without a document is refused otherwise): a folder of
            # no token would be "prepared", and the trainer could only guess why it is empty
            raise ConfigError(
                f"--output {output}: every record of the input was bad and skipped ({manifest.skipped:,} "
                f"skipped), so no document is left to train on; check --text-field {text_field!r} and the "
                "input, then prepare into a new folder"
            )
        write_manifest(output, manifest)
        state.finish()
    except KeyboardInterrupt:
        progress.close()
        # counted on disk: a worker may have finished a file whose news had not reached this process
        done = sum(state.finished(index, path) is not None for index, path in enumerate(files))
        raise PrepareInterrupted(
            f"interrupted: {done} of {len(files)} input files are prepared in {output}; "
            "re-run the same command to continue"
        ) from None
    finally:
        progress.close()
        state.release()
        for stale in output.glob(".*.tmp"):  # staging files of workers that were ended
            stale.unlink()
    return PrepareResult(
        manifest, summary_line(manifest, str(output), progress.elapsed, progress.tokens, files_before)
    )

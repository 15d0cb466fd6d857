"""``python -m boost.training.data.prepare``: a corpus tokenized into a token folder, as the trainer would read it.

Small corpora made here (stdlib sources as documents, in every input format); the tokenizer is the
offline BPE of the default vocabulary, cached once per machine. What must hold: the ids are
torchtitan's own framing of the same texts; the bytes are the same for 1 and 2 workers; the
validation split is disjoint from training and decided by the text alone; an interrupted prepare
(Ctrl-C, a stop on a bad file) continues to the bytes of an uninterrupted one without redoing
finished files; every bad input is refused with its one exact line, or counted under --skip-bad.
"""

from __future__ import annotations

import errno
import gzip
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from array import array
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torchtitan.components.tokenizer import HuggingFaceTokenizer

from boost.after_training.hf_folder import write_tokenizer
from boost.training.config_error import ConfigError
from boost.training.data.offline_tokenizer import ensure_stdlib_tokenizer
from boost.training.data.prepare.cli import main
from boost.training.data.prepare.holdout import holds_out
from boost.training.data.prepare.preparer import prepare_corpus
from boost.training.data.prepare.worker_pool import HOLD_ENV
from boost.training.data.stdlib_corpus import read_stdlib_file, stdlib_files
from boost.training.data.token_folder import MANIFEST, TokenSplit, read_manifest

ROOT = Path(__file__).resolve().parents[2]
# The default run vocabulary: its BPE is trained once per machine (the docstring examples share it).
VOCAB = 2048
TEXTS = [
    "def f(x):\n    return x + 1\n",
    "naïve café — 東京 🚀 ümlaut “quoted” ‘single’",
    "",
    " leading space and a literal <|end_of_text|> inside",
    "line one\r\nline two\u2028after a Unicode line separator\n",
]


@pytest.fixture(scope="module")
def tokenizer_folder() -> Path:
    return ensure_stdlib_tokenizer(VOCAB, None)


def stdlib_documents(count: int) -> list[str]:
    texts = (read_stdlib_file(relative) for relative in stdlib_files("train"))
    return list(itertools.islice((t for t in texts if t.strip()), count))


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return stdlib_documents(60)


def write_jsonl(path: Path, texts: list[str], compress: bool = False) -> Path:
    lines = "".join(
        json.dumps({"text": t, "timestamp": "2019-04-25T12:57:54Z", "url": "u"}) + "\n" for t in texts
    )
    if compress:
        path.write_bytes(gzip.compress(lines.encode(), mtime=0))
    else:
        path.write_text(lines)
    return path


def write_parquet(path: Path, texts: list[str | None], column: str = "text") -> Path:
    pq.write_table(pa.table({column: pa.array(texts, type=pa.string())}), path)
    return path


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def split_documents(folder: Path, split: str) -> list[list[int]]:
    """Every document of a split, as its ids, from the shards' .idx and .bin."""
    manifest = read_manifest(folder, "training.dataset_path")
    flat = TokenSplit(folder, manifest, split)
    documents, start = [], 0
    for shard in manifest.splits[split].shards:
        offsets = array("q", (folder / f"{shard.name}.idx").read_bytes())
        documents += [flat.read(start + a, b - a).tolist() for a, b in zip(offsets, offsets[1:])]
        start += shard.tokens
    return documents


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, documents) -> Path:
    """Every input format, a duplicated document across two files, and a nested folder."""
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "nested").mkdir()
    write_jsonl(folder / "a.jsonl", documents[:20])
    write_jsonl(folder / "nested" / "b.json.gz", documents[20:40] + [documents[0]], compress=True)
    write_parquet(folder / "c.parquet", documents[40:55])
    (folder / "d.txt").write_text(documents[55])
    (folder / "ignored.md").write_text("not an input")
    return folder


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, corpus, tokenizer_folder) -> Path:
    """The corpus prepared by one worker: the reference the other runs are held to."""
    out = tmp_path_factory.mktemp("prepared") / "tokens"
    prepare_corpus(
        [str(corpus)], out, tokenizer_folder, validation_fraction=0.25, workers=1, show_progress=False
    )
    return out


# ----------------------------------------------------------------------------- framing and format


def _with_post_processor(source: Path, folder: Path, template: str, config: bool) -> Path:
    """``source``'s tokenizer whose own post-processor frames each text by ``template``, with ``source``'s
    tokenizer_config.json (naming BOS and EOS) or with none."""
    from tokenizers import Tokenizer, processors

    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    special = [
        (t, tokenizer.token_to_id(t)) for t in ("<|begin_of_text|>", "<|end_of_text|>") if t in template
    ]
    tokenizer.post_processor = processors.TemplateProcessing(single=template, special_tokens=special)
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    if config:
        (folder / "tokenizer_config.json").write_text((source / "tokenizer_config.json").read_text())
    return folder


def test_ids_are_torchtitans_framing_read_back_through_the_manifest(tmp_path, tokenizer_folder):
    # The offline BPE (no post-processor), an exported folder's copy, whose post-processor adds BOS itself,
    # and folders whose post-processor adds BOS (and EOS), with and without a tokenizer_config.json naming
    # them: torchtitan's HuggingFaceTokenizer keeps the post-processor's tokens and adds only those it did
    # not, and the framing must still agree (without a config torchtitan knows no BOS or EOS to add).
    exported = tmp_path / "exported"
    exported.mkdir()
    write_tokenizer(tokenizer_folder, exported, model_max_length=128)
    post_processed = [
        _with_post_processor(tokenizer_folder, tmp_path / name, template, config)
        for name, template, config in [
            ("bos-no-config", "<|begin_of_text|> $A", False),
            ("bos-eos-config", "<|begin_of_text|> $A <|end_of_text|>", True),
        ]
    ]
    for folder in (tokenizer_folder, exported, *post_processed):
        reference = HuggingFaceTokenizer(str(folder))
        expected = [reference.encode(t, add_bos=True, add_eos=True) for t in TEXTS]
        out = tmp_path / f"tokens-{folder.name}"
        corpus = write_jsonl(tmp_path / f"texts-{folder.name}.jsonl", TEXTS)
        result = prepare_corpus([str(corpus)], out, folder, workers=1, show_progress=False)
        assert split_documents(out, "train") == expected  # exact ids, document boundaries included
        manifest = read_manifest(out, "training.dataset_path")
        assert manifest == result.manifest
        assert (manifest.bos_id, manifest.eos_id) == (reference.bos_id, reference.eos_id)
        assert manifest.dtype == "uint16" and manifest.vocab_size == reference.get_vocab_size()
        assert manifest.splits["train"].max_token_id == max(max(ids) for ids in expected)
        assert manifest.splits["validation"].shards == ()
        assert [(f.documents, f.skipped, f.bytes) for f in manifest.inputs] == [(5, 0, corpus.stat().st_size)]


def test_one_and_two_workers_give_identical_bytes(tmp_path, corpus, prepared, tokenizer_folder):
    out = tmp_path / "tokens"
    prepare_corpus(
        [str(corpus)], out, tokenizer_folder, validation_fraction=0.25, workers=2, show_progress=False
    )
    assert folder_bytes(out) == folder_bytes(prepared)
    names = sorted(folder_bytes(out))
    assert names == ["manifest.json"] + [
        f"{s}-{i:05d}.{x}" for s in ("train", "validation") for i in range(4) for x in ("bin", "idx")
    ]


def test_validation_split_is_disjoint_and_decided_by_the_text(prepared, corpus, documents, tokenizer_folder):
    reference = HuggingFaceTokenizer(str(tokenizer_folder))
    framed = {tuple(reference.encode(t, add_bos=True, add_eos=True)): t for t in documents[:56]}
    train, validation = split_documents(prepared, "train"), split_documents(prepared, "validation")
    assert validation and train
    assert not {tuple(d) for d in train} & {tuple(d) for d in validation}
    for split, held in ((train, False), (validation, True)):
        assert all(holds_out(framed[tuple(d)], 0.25) == held for d in split)
    # all 57 records are there; the text in two files is in one split, twice
    assert len(train) + len(validation) == 57
    duplicated = tuple(reference.encode(documents[0], add_bos=True, add_eos=True))
    assert [tuple(d) for d in train + validation].count(duplicated) == 2


# ----------------------------------------------------------------------------- resume


def _open_once_read(fifo: Path, process: subprocess.Popen) -> int:
    """Open ``fifo`` for writing once a reader holds it (a worker at its hold); fail if ``process`` ends first.

    The wait ends on a state, the worker's or the process's, whatever the machine's speed; the bound is
    a hang guard alone (a prepare of four tiny files reaches its hold in seconds)."""
    hang_guard = time.monotonic() + 600
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader has it open
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
        if process.poll() is not None:
            stdout, stderr = process.communicate()
            pytest.fail(f"the prepare ended (exit {process.returncode}) before its hold: {stdout}{stderr}")
        assert time.monotonic() < hang_guard, "the prepare never reached its hold"
        time.sleep(0.01)


@pytest.mark.slow
def test_ctrl_c_says_one_line_and_a_rerun_finishes_the_same_bytes(tmp_path, tokenizer_folder):
    texts = stdlib_documents(60)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):  # equal shares: after the first file is done, three remain to interrupt
        write_jsonl(corpus / f"part-{i}.json.gz", texts[i::4], compress=True)
    out = tmp_path / "tokens"
    command = [sys.executable, "-m", "boost.training.data.prepare", "--tokenizer", str(tokenizer_folder)]
    command += ["--input", str(corpus), "--output", str(out), "--workers", "1"]
    # the one worker waits at this FIFO after each file: held open here, the prepare stops after its
    # first file, and the Ctrl-C lands with exactly one file done and three to go
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    env = dict(os.environ, **{HOLD_ENV: str(hold)})
    # A terminal's Ctrl-C reaches a prepare whose SIGINT is at its default. A runner started as a
    # background job of a script (`cmd &`) ignores SIGINT, and an ignored signal stays ignored across
    # exec: the prepare would never hear it. Python's own handler here is reset to the default in the child.
    runner_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    finally:
        signal.signal(signal.SIGINT, runner_sigint)
    try:
        held = _open_once_read(hold, process)
        try:
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=600)  # a hang guard: the stop takes a second
        finally:
            os.close(held)
    finally:
        if process.poll() is None:  # a failed guard leaves no prepare (nor its worker) behind
            process.kill()
            process.wait()
    assert (process.returncode, stdout) == (130, "")
    assert (
        stderr
        == f"interrupted: 1 of 4 input files are prepared in {out}; re-run the same command to continue\n"
    )
    assert not (out / MANIFEST).exists()
    finished = {p.name: p.stat().st_ino for p in out.glob("*.bin")}
    assert len(finished) == 1

    prepare_corpus([str(corpus)], out, tokenizer_folder, workers=2, show_progress=False)
    assert {
        p.name: p.stat().st_ino for p in out.glob("*.bin") if p.name in finished
    } == finished  # not redone
    reference = tmp_path / "reference"
    prepare_corpus([str(corpus)], reference, tokenizer_folder, workers=2, show_progress=False)
    assert folder_bytes(out) == folder_bytes(reference)
    assert not (out / ".prepare").exists()


def test_a_stop_on_a_bad_file_resumes_after_the_fix_and_other_options_are_refused(
    tmp_path, corpus, prepared, tokenizer_folder
):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for source in sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix != ".md"):
        copy = inputs / source.relative_to(corpus)
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(source.read_bytes())
    good = (inputs / "d.txt").read_bytes()
    (inputs / "d.txt").write_bytes(b"")  # file 2, the smallest: the last to start, after the 3 others
    out = tmp_path / "tokens"
    arguments = dict(validation_fraction=0.25, workers=1, show_progress=False)
    with pytest.raises(ConfigError, match="d.txt is empty"):
        prepare_corpus([str(inputs)], out, tokenizer_folder, **arguments)
    assert sorted(p.name for p in (out / ".prepare").glob("done-*")) == [
        f"done-0000{i}.json" for i in (0, 1, 3)
    ]
    with pytest.raises(ConfigError, match="not a finished prepare"):
        read_manifest(out, "training.dataset_path")
    with pytest.raises(ConfigError) as refused:
        prepare_corpus([str(inputs)], out, tokenizer_folder, **{**arguments, "validation_fraction": 0.5})
    assert str(refused.value) == (
        f"--output {out}: holds an unfinished prepare with other options (validation_fraction 0.25 there, "
        "0.5 now); re-run it with its own options to finish it, or prepare into a new folder"
    )
    done_before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.bin")}
    (inputs / "d.txt").write_bytes(good)
    prepare_corpus([str(inputs)], out, tokenizer_folder, **arguments)
    assert {
        n: t for n, t in ((p.name, p.stat().st_mtime_ns) for p in out.glob("*.bin")) if n in done_before
    } == done_before
    # the same documents as the reference; only the recorded input paths differ
    reference_manifest = read_manifest(prepared, "x")
    for split in ("train", "validation"):
        assert split_documents(out, split) == split_documents(prepared, split)
    assert read_manifest(out, "x").splits == reference_manifest.splits

    again = prepare_corpus([str(inputs)], out, tokenizer_folder, **arguments)
    assert again.summary.startswith("already prepared, nothing to do")
    with pytest.raises(ConfigError, match="already holds a finished prepare with other options"):
        prepare_corpus([str(inputs)], out, tokenizer_folder, **{**arguments, "text_field": "body"})
    with pytest.raises(ConfigError, match="holds files that no prepare wrote"):
        prepare_corpus([str(inputs)], inputs, tokenizer_folder, **arguments)


# ----------------------------------------------------------------------------- bad input


def _truncated_gz(path: Path) -> Path:
    # lines 1 and 2 decompress; the stream ends inside line 3 (incompressible, so the cut lands in it)
    big = random.Random(0).randbytes(60_000).hex()
    whole = gzip.compress(
        ("".join(json.dumps({"text": t}) + "\n" for t in ("one", "two", big))).encode(), mtime=0
    )
    path.write_bytes(whole[: len(whole) * 2 // 3])
    return path


BAD_INPUTS = {
    "truncated gz": (
        lambda d: _truncated_gz(d / "t.json.gz"),
        "{f}:3 is cut short: the gzip stream ends inside the file (an unfinished download or copy?); "
        "fetch or copy the file again, or pass --skip-bad to keep its 2 lines before",
        2,
    ),
    "not JSON": (
        lambda d: (d / "j.jsonl").write_text('{"text": "ok"}\nnot json\n') and d / "j.jsonl",
        "{f}:2 is not JSON (Expecting value, column 1); fix or remove the line, "
        "or pass --skip-bad to skip such records",
        1,
    ),
    "not an object": (
        lambda d: (d / "j.jsonl").write_text('["text"]\n{"text": "ok"}\n') and d / "j.jsonl",
        '{f}:1 is a JSON list, not an object; write one {{"text": "..."}} object a line, '
        "or pass --skip-bad to skip such records",
        1,
    ),
    "no text field": (
        lambda d: (d / "j.jsonl").write_text('{"text": "ok"}\n{"body": "x", "url": "u"}\n') and d / "j.jsonl",
        "{f}:2 has no 'text' field (keys: ['body', 'url']); name the field with --text-field, "
        "or pass --skip-bad to skip such records",
        1,
    ),
    "text not a string": (
        lambda d: (d / "j.jsonl").write_text('{"text": 5}\n{"text": "ok"}\n') and d / "j.jsonl",
        "{f}:1 has a 'text' of type int, not a string; store each document as a string, "
        "or pass --skip-bad to skip such records",
        1,
    ),
    "not UTF-8": (
        lambda d: (d / "j.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n') and d / "j.jsonl",
        "{f}:2 is not UTF-8 text (byte 13 of the line); convert the file to UTF-8, "
        "or pass --skip-bad to skip such records",
        1,
    ),
    "lone surrogate": (
        lambda d: (d / "j.jsonl").write_text('{"text": "ok"}\n{"text": "a\\ud800b"}\n') and d / "j.jsonl",
        "{f}:2 has a 'text' holding a lone surrogate (\\ud800 at character 1), not Unicode text; "
        "write the document as valid UTF-8, or pass --skip-bad to skip such records",
        1,
    ),
    "empty file": (
        lambda d: (d / "e.jsonl").write_text("") or d / "e.jsonl",
        "{f} is empty; fill it or remove it from the input, or pass --skip-bad to skip it",
        0,
    ),
    "blank text file": (
        lambda d: (d / "b.txt").write_text(" \n\n") and d / "b.txt",
        "{f} holds only blank space; fill it or remove it from the input, or pass --skip-bad to skip it",
        0,
    ),
    "null parquet row": (
        lambda d: write_parquet(d / "p.parquet", ["ok", None]),
        "{f} row 1 has a null 'text'; drop or fill the row, or pass --skip-bad to skip such records",
        1,
    ),
    "parquet without the column": (
        lambda d: write_parquet(d / "p.parquet", ["ok"], column="body"),
        "{f} has no 'text' column (columns: ['body']); name the column with --text-field, "
        "or pass --skip-bad to skip the file",
        0,
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_refused_in_one_line_or_counted_with_skip_bad(case, tmp_path, tokenizer_folder, capsys):
    make, message, kept = BAD_INPUTS[case]
    path = make(tmp_path)
    good = write_jsonl(tmp_path / "good.jsonl", ["a good document"])
    out = tmp_path / "tokens"
    argv = ["--tokenizer", str(tokenizer_folder), "--input", str(good), str(path), "--output", str(out)]
    assert main([*argv, "--workers", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "error: " + message.format(f=path) + "\n"
    assert not (out / MANIFEST).exists()
    assert not list(out.glob(".*.tmp"))

    assert main([*argv, "--skip-bad"]) == 0  # continues the same folder: --skip-bad is no other option
    summary = capsys.readouterr().out
    assert ", 1 skipped, " in summary and summary.endswith(f"-> {out}\n")
    manifest = read_manifest(out, "training.dataset_path")
    assert [(f.path, f.documents, f.skipped) for f in manifest.inputs] == [
        (str(good), 1, 0),
        (str(path), kept, 1),
    ]


def test_a_parquet_file_that_breaks_partway_says_what_skip_bad_keeps(tmp_path, tokenizer_folder, capsys):
    # row groups of 1,000 rows, the third's first page header overwritten: the rows before it are read and
    # prepared before the error, so --skip-bad keeps them, and the one-line message says how many
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(3000)]}), path, row_group_size=1000)
    column = pq.ParquetFile(path).metadata.row_group(2).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * 16)
    out = tmp_path / "tokens"
    argv = ["--tokenizer", str(tokenizer_folder), "--input", str(path), "--output", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    said = re.fullmatch(
        rf"error: {re.escape(str(path))} row (\d+) is not a readable parquet file \([^\n]+\); write it with "
        r"pyarrow or pandas' to_parquet, or pass --skip-bad to keep its (\d+) rows before\n",
        err,
    )
    assert said and said[1] == said[2] and 0 < int(said[1]) <= 2000, err
    assert main([*argv, "--skip-bad"]) == 0
    manifest = read_manifest(out, "training.dataset_path")
    assert [(f.documents, f.skipped) for f in manifest.inputs] == [(int(said[1]), 1)]


def test_inputs_and_options_refused_by_name(tmp_path, tokenizer_folder, capsys):
    (tmp_path / "notes.md").write_text("x")
    base = ["--tokenizer", str(tokenizer_folder), "--output", str(tmp_path / "out")]
    cases = {
        ("--input", str(tmp_path / "notes.md")): f"--input {tmp_path / 'notes.md'}: not one of .txt, .jsonl, "
        ".json.gz, .jsonl.gz, .parquet; rename it or convert it",
        (
            "--input",
            str(tmp_path / "*.jsonl"),
        ): f"--input {tmp_path / '*.jsonl'}: the pattern matches no .txt, "
        ".jsonl, .json.gz, .jsonl.gz, .parquet file",
        ("--input", str(tmp_path / "missing")): f"--input {tmp_path / 'missing'}: no such file or folder",
        ("--input", str(tmp_path), "--validation-fraction", "1"): "--validation-fraction 1.0: hold out a "
        "fraction in [0, 1)",
        ("--input", str(tmp_path), "--workers", "0"): "--workers 0: use at least 1",  # not "all cores"
        # an unset variable ("$CORPUS") is not the working directory, read recursively
        ("--input", ""): "--input '': an empty path (an unset shell variable?); name a file, folder or glob",
    }
    for extra, message in cases.items():
        assert main([*base, *extra]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"


def test_shard_writer_holds_uint32_ids_and_refuses_what_uint16_cannot(tmp_path):
    from boost.training.data.token_folder import InputFile, Manifest, ShardWriter, Split, write_manifest

    writer = ShardWriter(tmp_path, "train-00000", "uint32")
    writer.append([0, 70_000, 1], [3])
    writer.append(array("I", [0, 128_255, 99, 1]), [4])
    shard = writer.commit()
    manifest = Manifest(
        "sha256:0", "t", 128_256, 0, 1, "uint32", {"train": Split((shard,), 128_255)}, (InputFile("x", 1, 2),)
    )
    write_manifest(tmp_path, manifest)
    assert split_documents(tmp_path, "train") == [[0, 70_000, 1], [0, 128_255, 99, 1]]
    narrow = ShardWriter(tmp_path, "train-00001", "uint16")
    with pytest.raises(OverflowError):
        narrow.append([0, 70_000, 1], [3])
    narrow.abandon()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "manifest.json",
        "train-00000.bin",
        "train-00000.idx",
    ]


def test_a_glob_and_another_text_field_select_the_documents(tmp_path, tokenizer_folder):
    write_parquet(tmp_path / "p.parquet", ["from parquet"], column="body")
    (tmp_path / "j.jsonl").write_text(json.dumps({"body": "from json", "text": "not this"}) + "\n")
    (tmp_path / "skipped.json.gz").write_bytes(gzip.compress(b'{"body": "not matched by the glob"}\n'))
    out = tmp_path / "tokens"
    prepare_corpus([str(tmp_path / "*.[jp]*[lt]")], out, tokenizer_folder, text_field="body", workers=1)
    reference = HuggingFaceTokenizer(str(tokenizer_folder))
    expected = [reference.encode(t, add_bos=True, add_eos=True) for t in ("from json", "from parquet")]
    assert split_documents(out, "train") == expected
    assert read_manifest(out, "x").text_field == "body"


def test_an_output_that_cannot_be_a_folder_is_refused_in_one_line(tmp_path, tokenizer_folder, capsys):
    (tmp_path / "a.jsonl").write_text('{"text": "x = 1"}\n')
    (tmp_path / "file").write_text("x")
    argv = ["--tokenizer", str(tokenizer_folder), "--input", str(tmp_path / "a.jsonl")]
    assert main([*argv, "--output", str(tmp_path / "file" / "tokens")]) == 2
    assert capsys.readouterr().err == (
        f"error: --output {tmp_path / 'file' / 'tokens'}: cannot be created (Not a directory); "
        "name a folder that can be\n"
    )


def test_a_corpus_all_skipped_as_bad_is_no_dataset(tmp_path, tokenizer_folder, capsys):
    # a mistyped --text-field under --skip-bad skips every record: no folder of 0 tokens is "prepared"
    (tmp_path / "a.jsonl").write_text('{"text": "x = 1"}\n{"text": "y = 2"}\n')
    out = tmp_path / "tokens"
    argv = ["--tokenizer", str(tokenizer_folder), "--input", str(tmp_path / "a.jsonl"), "--output", str(out)]
    assert main([*argv, "--text-field", "body", "--skip-bad"]) == 2
    assert capsys.readouterr().err == (
        f"error: --output {out}: every record of the input was bad and skipped (2 skipped), so no document "
        "is left to train on; check --text-field 'body' and the input, then prepare into a new folder\n"
    )
    assert not (out / MANIFEST).exists()

"""The ``tokens`` dataset through torchtitan's glue: the real dataloader (two ranks, a resume from one
rank to two), validation's sources, the preflight's refusals (manifests only) and the resume guard.

One process: torchtitan's ``ParallelAwareDataloader`` needs no process group, so both data-parallel
ranks' loaders are built side by side, and a DCP checkpoint of a loader is saved without one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp
from torchtitan.config import ConfigManager

from boost.training.config_error import ConfigError
from boost.training.data.token_folder import read_manifest, write_manifest
from tests.token_folders import write_token_folder
from torchtitan_ext.data.text_datasets import build_boost_dataloader, build_boost_validation_dataloader
from torchtitan_ext.data.token_loader import GlobalOrderDataloader
from torchtitan_ext.data.tokenizer import build_boost_tokenizer
from torchtitan_ext.guards.checkpoint_guard import CheckpointRefused, check_resume, prepare_resume
from torchtitan_ext.preflight import check_job

ROOT = Path(__file__).resolve().parents[2]
VOCAB, SEQ_LEN = 2048, 15  # windows of 16 tokens
WINDOWS = 64


def job_args(cache_dir: Path, folder: Path, *overrides: str) -> list[str]:
    return [
        "--job.config_file", str(ROOT / "train_configs" / "debug.toml"),
        "--boost.cache_dir", str(cache_dir),
        "--boost.tokenizer_vocab_size", str(VOCAB),
        "--training.dataset", "tokens",
        "--training.dataset_path", str(folder),
        "--training.seq_len", str(SEQ_LEN),
        "--training.local_batch_size", "2",
        "--validation.dataset", "tokens",
        "--validation.seq_len", str(SEQ_LEN),
        "--validation.local_batch_size", "2",
        *overrides,
    ]  # fmt: skip


def job_config(cache_dir: Path, folder: Path, *overrides: str):
    return ConfigManager().parse_args(job_args(cache_dir, folder, *overrides))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return (
        tmp_path_factory.getbasetemp() / "boost-cache"
    )  # tests/trainer.py's BOOST_CACHE: trained once a session


@pytest.fixture(scope="module")
def tokenizer_folder(cache_dir) -> Path:
    return Path(build_boost_tokenizer(job_config(cache_dir, Path("unused"))).tokenizer_path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tokenizer_folder) -> Path:
    """``WINDOWS`` training windows whose ids number the tokens (a window names itself), and 20 held out."""
    path = tmp_path_factory.mktemp("tokens")
    ids = list(range(WINDOWS * (SEQ_LEN + 1)))
    held_out = list(range(1100, 1100 + 20 * (SEQ_LEN + 1)))
    write_token_folder(
        path,
        tokenizer_folder,
        VOCAB,
        [ids[i : i + 7] for i in range(0, len(ids), 7)],
        [held_out[i : i + 7] for i in range(0, len(held_out), 7)],
        documents_per_shard=20,
    )
    return path


def windows(batch) -> list[int]:
    inputs, labels = batch
    assert inputs["input"].shape == labels.shape == (inputs["input"].shape[0], SEQ_LEN)
    assert (inputs["input"][:, 1:] == labels[:, :-1]).all()
    return [int(row[0]) // (SEQ_LEN + 1) for row in inputs["input"]]


def test_two_ranks_of_the_real_dataloader_split_an_epoch_and_a_resume_from_one_rank_to_two(cache_dir, folder):
    job = job_config(cache_dir, folder)
    loaders = [build_boost_dataloader(2, rank, None, job) for rank in range(2)]
    assert all(isinstance(loader, GlobalOrderDataloader) for loader in loaders)
    its = [iter(loader) for loader in loaders]
    read = [[w for _ in range(WINDOWS // 4) for w in windows(next(it))] for it in its]
    assert not set(read[0]) & set(read[1]) and sorted(read[0] + read[1]) == list(range(WINDOWS))
    # one global position, the same bytes on every rank at a step boundary: DCP keeps it once
    states = [loader.state_dict() for loader in loaders]
    assert set(states[0]) == {"token_order", "world_size"} and states[0] == states[1]

    # one rank reading 4 windows a step; at step 5 its state goes to two ranks reading 2 each
    one_rank = build_boost_dataloader(
        1, 0, None, job_config(cache_dir, folder, "--training.local_batch_size", "4")
    )
    it = iter(one_rank)
    for _ in range(5):
        next(it)
    state = one_rank.state_dict()
    uninterrupted = [windows(next(it)) for _ in range(15)]  # into the next epoch
    resumed = [build_boost_dataloader(2, rank, None, job) for rank in range(2)]
    for loader in resumed:
        loader.load_state_dict(state)
    its = [iter(loader) for loader in resumed]
    assert [windows(next(its[0])) + windows(next(its[1])) for _ in range(15)] == uninterrupted


def test_validation_reads_the_held_out_split_or_a_folders_train_split(
    cache_dir, folder, tmp_path, tokenizer_folder
):
    job = job_config(cache_dir, folder)
    loader = build_boost_validation_dataloader(2, 1, None, job)
    passes = [[w for batch in loader for w in windows(batch)] for _ in range(2)]
    held_out = [w - 1100 // (SEQ_LEN + 1) for w in passes[0]]
    assert passes[0] == passes[1] and len(passes[0]) == 20 // 4 * 2 and all(0 <= w < 22 for w in held_out)
    # a folder of held-out text alone (no validation split): its train split
    write_token_folder(tmp_path / "val", tokenizer_folder, VOCAB, [list(range(500, 500 + 8 * 16))])
    other = job_config(cache_dir, folder, "--validation.dataset_path", str(tmp_path / "val"))
    assert sorted(
        w for batch in build_boost_validation_dataloader(1, 0, None, other) for w in windows(batch)
    ) == [500 // 16 + i for i in range(8)]


def test_a_validation_folder_with_a_held_out_split_is_read_from_it_not_from_its_train_split(
    cache_dir, folder, tmp_path, tokenizer_folder
):
    # validation.dataset_path names a prepared folder of both splits: the held-out one is the validation's
    train, held_out = list(range(500, 500 + 8 * 16)), list(range(900, 900 + 8 * 16))
    write_token_folder(tmp_path / "both", tokenizer_folder, VOCAB, [train], [held_out])
    job = job_config(cache_dir, folder, "--validation.dataset_path", str(tmp_path / "both"))
    read = sorted(w for batch in build_boost_validation_dataloader(1, 0, None, job) for w in windows(batch))
    assert read == [900 // 16 + i for i in range(8)]


def refusal(args: list[str], world_size: int = 1) -> str:
    with pytest.raises(ConfigError) as refused:
        check_job(args, world_size)
    return str(refused.value)


def test_the_preflight_refuses_what_a_token_folder_cannot_serve(
    cache_dir, folder, tmp_path, tokenizer_folder
):
    def args(path, *overrides):
        return job_args(cache_dir, path, *overrides)

    check_job(args(folder), 2)  # the folder serves two ranks; the refusals below are each one change
    unfinished = tmp_path / "unfinished"
    write_token_folder(unfinished, tokenizer_folder, VOCAB, [list(range(64))], finished=False)
    assert refusal(args(unfinished)) == (
        f"training.dataset_path = {str(unfinished)!r}: not a finished prepare (no manifest.json): run "
        "python -m boost.training.data.prepare --config TOML --input CORPUS --output DIR with this folder as DIR "
        "(a re-run continues an interrupted one)"
    )
    assert "no such folder; prepare a corpus into it first" in refusal(args(tmp_path / "nowhere"))
    corpus_file = tmp_path / "corpus.jsonl"  # the corpus named where its prepared folder belongs
    corpus_file.write_text('{"text": "a document"}\n')
    assert "is a file, not a prepared token folder: prepare it into a folder first" in refusal(
        args(corpus_file)
    )
    assert refusal(job_args(cache_dir, folder)[:-14] + ["--training.dataset", "tokens"]).startswith(
        'training.dataset_path = None: dataset "tokens" reads prepared token folders'
    )

    other_tokenizer = tmp_path / "other-tokenizer"
    other_tokenizer.mkdir()
    (other_tokenizer / "tokenizer.json").write_text("{}")
    foreign = tmp_path / "foreign"
    write_token_folder(foreign, other_tokenizer, VOCAB, [list(range(1024))])
    message = refusal(args(foreign))
    assert message.startswith(
        f"training.dataset_path = {str(foreign)!r}: prepared with another tokenizer (sha256:"
    )
    assert (
        f"from {other_tokenizer}) than this run's (sha256:" in message
        and f"in {tokenizer_folder}): " in message
    )
    assert message.endswith(
        f"or train with the tokenizer it was prepared with (--model.hf_assets_path {other_tokenizer})"
    )

    beyond = tmp_path / "beyond"
    write_token_folder(beyond, tokenizer_folder, VOCAB, [list(range(1024)), [VOCAB + 5]])
    assert refusal(args(beyond)) == (
        f"training.dataset_path = {str(beyond)!r}: its train split holds token id {VOCAB + 5}, beyond the model's "
        f"vocabulary of {VOCAB} ids (this run's tokenizer): prepare the corpus again with the run's TOML "
        "(python -m boost.training.data.prepare --config TOML --input CORPUS --output DIR)"
    )

    assert refusal(args(folder, "--training.local_batch_size", "40"), 2) == (
        f"training.dataset_path = {str(folder)!r}: its train split holds 64 windows of training.seq_len + 1 = 16 "
        "tokens (1024 tokens), fewer than one batch for every data-parallel rank (training.local_batch_size × "
        "data-parallel degree = 40 × 2 = 80): prepare more text into it, or lower training.local_batch_size or "
        "training.seq_len"
    )
    assert (
        "its validation split holds 20 windows of validation.seq_len + 1 = 16 tokens (320 tokens), fewer than"
        in (refusal(args(folder, "--validation.local_batch_size", "11"), 2))
    )
    no_held_out = tmp_path / "no-held-out"
    write_token_folder(no_held_out, tokenizer_folder, VOCAB, [list(range(1024))])
    assert refusal(args(no_held_out)) == (
        "validation.dataset_path = None: not set, so validation reads the held-out split of training.dataset_path's "
        f"{str(no_held_out)!r}, which has none: prepare held-out text into its own folder and set "
        "validation.dataset_path to it, or prepare the training corpus with --validation-fraction F"
    )
    # a validation folder read whole (no held-out split) that is the training text, or prepared from its files
    same_text = tmp_path / "same-text"
    manifest = write_token_folder(same_text, tokenizer_folder, VOCAB, [list(range(2048))])
    write_manifest(same_text, dataclasses.replace(manifest, inputs=read_manifest(no_held_out, "x").inputs))
    for validation, why in (
        (f"{no_held_out}/", f"it is training.dataset_path's {str(no_held_out)!r}"),
        (
            str(same_text),
            f"it was prepared from {str(no_held_out / 'made-in-a-test')!r}, as is training.dataset_path's",
        ),
    ):
        message = refusal(args(no_held_out, "--validation.dataset_path", validation))
        assert (
            message.startswith(f"validation.dataset_path = {validation!r}: has no held-out split")
            and why in message
        )
        assert message.endswith("or prepare held-out text into its own folder")
    check_job(args(folder, "--validation.dataset_path", str(same_text)), 1)  # other text: read whole
    assert refusal(args(f"0.7:{folder},{no_held_out}")) == (
        f"training.dataset_path = '0.7:{folder},{no_held_out}': entry {str(no_held_out)!r} has no weight: every "
        'folder of a blend needs one; write "DIR", or "W1:DIR1,W2:DIR2,..." with positive weights '
        '(e.g. "0.7:/data/c4,0.3:/data/code")'
    )
    assert refusal(args(folder, "--training.dataloader.num_workers", "2")).startswith(
        'training.dataloader.num_workers = 2: the "tokens" dataset reads a memory map in the training process'
    )
    assert refusal(args(folder, "--training.dataset", "stdlib", "--training.dataset_seed", "3")).startswith(
        "training.dataset_seed = 3: only the \"tokens\" dataset shuffles (training.dataset = 'stdlib'"
    )


def save_position(loader, dump_folder: Path, step: int) -> Path:
    path = dump_folder / "checkpoint" / f"step-{step}"
    # with the training state beside it: the guard takes a folder without it for a model-only save
    dcp.save({"dataloader": loader, "train_state": {"step": step}}, checkpoint_id=str(path))
    return path


def test_a_resume_continues_the_order_at_any_degree_and_refuses_another_order(
    cache_dir, folder, tmp_path, capsys
):
    dump = tmp_path / "run"
    loader = build_boost_dataloader(
        1, 0, None, job_config(cache_dir, folder, "--training.local_batch_size", "4")
    )
    it = iter(loader)
    for _ in range(3):
        next(it)
    save_position(loader, dump, 3)

    def job(*overrides):
        return job_config(cache_dir, folder, "--job.dump_folder", str(dump), *overrides)

    plan = prepare_resume(job(), world_size=2)
    assert plan.step == 3 and not plan.skip_dataloader
    assert (
        "the data-parallel degree changed from 1 (checkpoint) to 2: the tokens dataset's global order continues"
        in (capsys.readouterr().err)
    )
    check_resume(job("--training.local_batch_size", "8"))  # another batch size: the next samples, from 12 on
    with pytest.raises(CheckpointRefused) as refused:
        check_resume(job("--training.seq_len", "31", "--validation.seq_len", "31"))
    assert str(refused.value) == (
        f"BOOST checkpoint error: {dump}/checkpoint/step-3 is at sample 12 of another data order than this job's: "
        "windows of seq_len + 1 = 16 tokens (checkpoint) against 32 (this job). Resume with the checkpoint's "
        "settings, or start this job's order from its beginning with --checkpoint.exclude_from_loading "
        "dataloader (model, optimizer and step still resume), or train in a new --job.dump_folder"
    )
    with pytest.raises(CheckpointRefused, match="shuffle seed 0 \\(checkpoint\\) against 7 \\(this job\\)"):
        prepare_resume(job("--training.dataset_seed", "7"), world_size=1)
    assert not prepare_resume(
        job("--training.dataset_seed", "7", "--checkpoint.exclude_from_loading", "dataloader"), 1
    ).skip_dataloader
    # a text dataset cannot read the tokens position: its data starts afresh, with a warning
    assert prepare_resume(
        job("--training.dataset", "stdlib", "--training.dataset_path", ""), 1
    ).skip_dataloader
    assert "the checkpoint's data position is the tokens dataset's global position" in capsys.readouterr().err
    shutil.rmtree(dump)


def test_every_shipped_tomls_header_trains_on_a_prepared_folder(cache_dir, tmp_path, tokenizer_folder):
    # A folder of the size the 1B-30B TOMLs' header command needs (4 training and 8 validation windows of
    # 4096 + 1 tokens at data-parallel degree 1), prepared with the header's --validation-fraction.
    ids = [i % VOCAB for i in range(4 * 4097 + 8 * 4097)]
    folder = tmp_path / "prepared"
    write_token_folder(folder, tokenizer_folder, VOCAB, [ids[: 4 * 4097]], [ids[4 * 4097 :]])
    for name in ("60M", "130M", "350M", "1B", "3B", "7B", "13B", "30B"):
        toml = ROOT / "train_configs" / f"{name}.toml"
        header = "".join(
            line[1:].strip() + " " for line in toml.read_text().splitlines() if line.startswith("#")
        )
        prepare, _, train = header.partition("python -m boost.training.data.prepare ")[2].partition("NGPU=")
        assert prepare.split()[:2] == ["--config", f"train_configs/{name}.toml"], name
        ngpu, command = train.split(" ", 1)
        overrides = command.partition("./run_train.sh ")[2].partition(" (README")[0].replace("\\", "").split()
        assert overrides == [
            "--training.dataset", "tokens", "--training.dataset_path", "DIR", "--validation.dataset", "tokens"
        ]  # fmt: skip
        overrides[3] = str(folder)
        # the header's command as is, at its NGPU, with the offline tokenizer the folder was prepared with
        job = check_job(
            ["--job.config_file", str(toml), *overrides, "--boost.cache_dir", str(cache_dir),
             "--boost.tokenizer_vocab_size", str(VOCAB)],
            int(ngpu),
        )  # fmt: skip
        assert job.training.dataset == "tokens" and job.validation.enable, name


def test_a_large_local_corpus_is_warned_about_from_its_file_sizes_before_it_is_read(tmp_path, monkeypatch):
    import torchtitan_ext.data.dataset_check as dataset_check

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "a document"}\n{"no text": 1}\n')
    monkeypatch.setattr(dataset_check, "LOCAL_CORPUS_WARN_BYTES", corpus.stat().st_size - 1)
    with (
        pytest.warns(UserWarning) as warned,
        pytest.raises(ConfigError, match="corpus.jsonl:2 has no 'text' field"),
    ):
        dataset_check.check_dataset("local", str(corpus), "training", 1)
    assert str(warned[0].message).startswith(
        f"training.dataset_path = {str(corpus)!r}: a local corpus of 0.0 GB of files, which every rank holds in "
        "memory (several times its size); prepare it once into token shards and train from them: "
        "python -m boost.training.data.prepare --config TOML --input CORPUS --output DIR, "
        "then --training.dataset tokens"
    )


@pytest.mark.slow
def test_the_launchers_check_of_a_token_folder_loads_no_torchtitan(cache_dir, folder, tmp_path):
    """run_train.sh's preflight reads the manifest and the tokenizer's own file: torchtitan's import
    (~6 s, most of a launch before the ranks) is left to the ranks."""
    code = (
        "import sys\nfrom torchtitan_ext.preflight import main\nmain(sys.argv[1:])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torchtitan'))"
    )
    argv = job_args(cache_dir, folder, "--job.dump_folder", str(tmp_path / "out"))
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=ROOT, env=dict(os.environ, NGPU="2"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def _damaged_folder(tmp_path: Path, damage: str) -> Path:
    """A finished two-shard folder (its tokenizer a hand-made one: read_manifest never opens it), then
    ``damage`` done to it."""
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    folder = tmp_path / "tokens"
    write_token_folder(folder, tokenizer, VOCAB, [[0, 5, 1], [0, 6, 7, 1]], documents_per_shard=1)
    manifest_file = folder / "manifest.json"
    raw = json.loads(manifest_file.read_text())
    if damage == "cut-short":
        manifest_file.write_text('{"format": "boost-tokens", ')  # a copy cut short
    elif damage == "no-splits":
        del raw["splits"]
        manifest_file.write_text(json.dumps(raw))
    elif damage == "null":
        manifest_file.write_text("null")
    elif damage == "dtype-list":
        manifest_file.write_text(json.dumps({**raw, "dtype": [raw["dtype"]]}))
    elif damage == "splits-list":
        manifest_file.write_text(json.dumps({**raw, "splits": []}))
    elif damage in ("format", "version", "dtype"):
        raw[damage] = {"format": "other-tokens", "version": 2, "dtype": "int8"}[damage]
        manifest_file.write_text(json.dumps(raw))
    elif damage == "bin-missing":
        (folder / "train-00001.bin").unlink()
    elif damage == "idx-truncated":
        idx = folder / "train-00000.idx"
        idx.write_bytes(idx.read_bytes()[:-8])
    return folder


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("cut-short", "its manifest.json cannot be read (Expecting"),
        ("no-splits", "its manifest.json cannot be read ('splits'); prepare the corpus again into a new DIR"),
        ("null", "its manifest.json cannot be read (not a manifest object with a dtype string); prepare"),
        (
            "dtype-list",
            "its manifest.json cannot be read (not a manifest object with a dtype string); prepare",
        ),
        ("splits-list", "its manifest.json cannot be read ('list' object has no attribute 'items'); prepare"),
        (
            "format",
            "manifest.json is format 'other-tokens' v1, this BOOST reads 'boost-tokens' v1: "
            "prepare the corpus again with this BOOST",
        ),
        (
            "version",
            "manifest.json is format 'boost-tokens' v2, this BOOST reads 'boost-tokens' v1: "
            "prepare the corpus again with this BOOST",
        ),
        ("dtype", "manifest.json names dtype 'int8', not one of ['uint16', 'uint32']"),
        (
            "bin-missing",
            "train-00001.bin is missing, the manifest says 8: the folder was changed after prepare; "
            "prepare the corpus again into a new DIR",
        ),
        (
            "idx-truncated",
            "train-00000.idx has 8 bytes, the manifest says 16: the folder was changed after prepare; "
            "prepare the corpus again into a new DIR",
        ),
    ],
    ids=[
        "cut-short",
        "no-splits",
        "null",
        "dtype-list",
        "splits-list",
        "format",
        "version",
        "dtype",
        "bin-missing",
        "idx-truncated",
    ],
)
def test_read_manifest_refuses_a_folder_damaged_after_prepare(tmp_path, damage, message):
    # the preflight decides from the manifest alone: a folder it cannot trust must stop the run there,
    # not as a short read or a garbled window mid-training
    folder = _damaged_folder(tmp_path, damage)
    with pytest.raises(ConfigError, match=re.escape(f"training.dataset_path = {str(folder)!r}: ")) as refused:
        read_manifest(folder, "training.dataset_path")
    assert message in str(refused.value)

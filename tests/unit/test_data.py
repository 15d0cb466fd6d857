"""Offline data and tokenizer: BPE training and caching, stdlib splits, packing, resume, local files.

Run from the repository root: ``python -m pytest tests/unit/test_data.py -q``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torchtitan.components.tokenizer import HuggingFaceTokenizer
from torchtitan.config import ConfigManager, JobConfig
from torchtitan.hf_datasets.text_datasets import DATASETS, build_text_validation_dataloader

import boost.training.data.offline_tokenizer as offline_tokenizer
import boost.training.data.stdlib_corpus as stdlib_corpus
import torchtitan_ext.data.text_datasets as text_datasets
from boost.after_training.hf_folder import write_tokenizer
from boost.training.config_error import ConfigError
from boost.training.data.local_files import read_local_corpus
from boost.training.data.offline_tokenizer import BOS_TOKEN, EOS_TOKEN
from boost.training.data.run_tokenizer import RunError, load_tokenizer, read_toml, run_tokenizer_dir
from boost.training.data.stdlib_corpus import stdlib_files, stdlib_root
from torchtitan_ext.data.text_datasets import (
    build_boost_dataloader,
    build_boost_validation_dataloader,
    load_local_dataset,
)
from torchtitan_ext.data.tokenizer import (
    boost_tokenizer_dir,
    boost_vocab_size,
    build_boost_tokenizer,
    check_tokenizer_assets,
)

VOCAB = 1024  # not the default 2048, so a passing size check proves the config is read
SEQ_LEN, BATCH = 32, 2


def job_config(cache_dir: Path, *overrides: str) -> JobConfig:
    return ConfigManager().parse_args(
        [
            "--job.custom_config_module", "torchtitan_ext.config",
            "--model.hf_assets_path", "",
            "--boost.cache_dir", str(cache_dir),
            "--boost.tokenizer_vocab_size", str(VOCAB),
            "--training.dataset", "stdlib",
            "--training.local_batch_size", str(BATCH),
            "--training.seq_len", str(SEQ_LEN),
            *overrides,
        ]
    )  # fmt: skip


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("boost-cache")


@pytest.fixture(scope="module")
def tokenizer(cache_dir):
    return build_boost_tokenizer(job_config(cache_dir))


def token_stream(tokenizer, texts: list[str]) -> list[int]:
    """What torchtitan's HuggingFaceTextDataset packs: every document between BOS and EOS, back to back."""
    return [t for text in texts for t in tokenizer.encode(text, add_bos=True, add_eos=True)]


def stdlib_text(relative_path: str) -> str:
    return (stdlib_root() / relative_path).read_text(encoding="utf-8", errors="replace")


# ----------------------------------------------------------------------------- tokenizer


def test_tokenizer_is_configured_and_lossless(tokenizer, cache_dir):
    folder = Path(tokenizer.tokenizer_path)
    assert folder.parent == cache_dir and folder.name.startswith(f"tokenizer-stdlib-v{VOCAB}-")
    assert tokenizer.get_vocab_size() == VOCAB == boost_vocab_size(job_config(cache_dir))
    assert tokenizer.id_to_token(tokenizer.bos_id) == BOS_TOKEN
    assert tokenizer.id_to_token(tokenizer.eos_id) == EOS_TOKEN

    snippet = stdlib_text("textwrap.py")[:4000] + "\n\tdef ünïcode(): return '→ ∑ 字'  \n\n"
    ids = tokenizer.encode(snippet, add_bos=False, add_eos=False)
    assert tokenizer.decode(ids) == snippet  # byte-level, no prefix space → exact
    assert len(ids) < len(snippet) / 2  # it learnt merges, not just bytes
    with_specials = tokenizer.encode(snippet, add_bos=True, add_eos=True)
    assert with_specials == [tokenizer.bos_id, *ids, tokenizer.eos_id]


def test_second_call_loads_the_cache(tokenizer, cache_dir, monkeypatch):
    tokenizer_json = Path(tokenizer.tokenizer_path) / "tokenizer.json"
    mtime = tokenizer_json.stat().st_mtime_ns

    def no_training(vocab_size):
        raise AssertionError("the cached tokenizer should have been loaded, not retrained")

    monkeypatch.setattr(offline_tokenizer, "_train_stdlib_bpe", no_training)
    again = build_boost_tokenizer(job_config(cache_dir))
    assert again.get_vocab() == tokenizer.get_vocab()
    assert tokenizer_json.stat().st_mtime_ns == mtime
    # A folder holding tokenizer.json is taken as is, whatever the vocabulary setting says.
    assets = job_config(
        cache_dir, "--model.hf_assets_path", tokenizer.tokenizer_path, "--boost.tokenizer_vocab_size", "4096"
    )
    from_assets = build_boost_tokenizer(assets)
    assert from_assets.tokenizer_path == tokenizer.tokenizer_path and from_assets.get_vocab_size() == VOCAB


def test_concurrent_callers_train_once_and_share_one_tokenizer(tmp_path, monkeypatch):
    # flock locks belong to an open file description, so threads that each open the lock file
    # contend exactly as torchrun's rank processes do.
    trained = []
    train = offline_tokenizer._train_stdlib_bpe
    counted_train = lambda vocab_size: trained.append(vocab_size) or train(vocab_size)  # noqa: E731
    monkeypatch.setattr(offline_tokenizer, "_train_stdlib_bpe", counted_train)
    folders, errors = [], []

    def rank():
        try:
            folders.append(offline_tokenizer.ensure_stdlib_tokenizer(300, str(tmp_path)))
        except Exception as error:  # noqa: BLE001 - re-raised below in the main thread
            errors.append(error)

    threads = [threading.Thread(target=rank) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and trained == [300] and len(set(folders)) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left behind

    # Where flock does not serialise (network file systems) the loser's rename fails: it must keep
    # the winner's folder and clean up its own.
    folder = folders[0]
    winner = (folder / "tokenizer.json").read_bytes()
    staging = tmp_path / ".late-rank"
    staging.mkdir()
    (staging / "tokenizer.json").write_text("{}")
    offline_tokenizer._publish_dir(staging, folder)
    assert not staging.exists() and (folder / "tokenizer.json").read_bytes() == winner


# Each process stands in for a torchrun rank: it imports, waits until every rank is ready, then asks
# for the tokenizer at once, and reports whether it trained and what it loaded.
_RANK_SCRIPT = """
import hashlib, pathlib, sys, time
from torchtitan.config import ConfigManager
import boost.training.data.offline_tokenizer as offline_tokenizer
from torchtitan_ext.data.tokenizer import build_boost_tokenizer
cache, rank, world = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
train = offline_tokenizer._train_stdlib_bpe
offline_tokenizer._train_stdlib_bpe = lambda vocab_size: print("TRAINED") or train(vocab_size)
config = ConfigManager().parse_args(["--job.custom_config_module", "torchtitan_ext.config",
    "--model.hf_assets_path", "", "--boost.cache_dir", str(cache), "--boost.tokenizer_vocab_size", "300"])
(cache / f"ready-{rank}").touch()
while len(list(cache.glob("ready-*"))) < world:
    time.sleep(0.01)
tokenizer = build_boost_tokenizer(config)
tokenizer_json = pathlib.Path(tokenizer.tokenizer_path) / "tokenizer.json"
print("LOADED", hashlib.sha256(tokenizer_json.read_bytes()).hexdigest(), tokenizer.get_vocab_size())
"""


@pytest.mark.slow
def test_concurrent_rank_processes_load_the_same_tokenizer(tmp_path):
    world = 2  # each process imports torch (seconds of CPU); two already race for the lock
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK_SCRIPT, str(tmp_path), str(rank), str(world)],
            cwd=Path(__file__).parents[2],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    outputs = [rank.communicate(timeout=600) for rank in ranks]  # a hang guard: the suite's bound on a run
    assert all(rank.returncode == 0 for rank in ranks), [err[-2000:] for _, err in outputs]
    stdouts = [out.split() for out, _ in outputs]
    assert sum(out.count("TRAINED") for out in stdouts) == 1
    loaded = {tuple(out[out.index("LOADED") + 1 :]) for out in stdouts}
    assert len(loaded) == 1 and next(iter(loaded))[1] == "300"


# ----------------------------------------------------------------------------- stdlib corpus


def test_stdlib_splits_are_disjoint_and_deterministic():
    train, validation = stdlib_files("train"), stdlib_files("validation")
    assert train and validation and not set(train) & set(validation)
    assert 0.005 < len(validation) / (len(train) + len(validation)) < 0.05
    assert all(stdlib_corpus.is_validation_file(p) for p in validation)
    excluded = {"site-packages", "test", "tests", "idlelib", "lib2to3"}
    assert not [p for p in train + validation if excluded & set(Path(p).parts[:-1])]

    stdlib_corpus._stdlib_relative_paths.cache_clear()  # a fresh walk of the file system, same answer
    assert stdlib_files("train") == train and stdlib_files("validation") == validation
    # The split is a function of the relative path alone (SHA-1, not Python's salted hash()):
    # this count is the same on every machine and in every process.
    assert sum(stdlib_corpus.is_validation_file(f"module_{i}.py") for i in range(1000)) == 16
    assert stdlib_corpus.stdlib_texts("validation") == [stdlib_text(p) for p in validation]
    assert text_datasets.load_stdlib_dataset("validation")["text"] == stdlib_corpus.stdlib_texts("validation")


# ----------------------------------------------------------------------------- dataloaders


def test_dataloader_packs_documents_into_shifted_windows(tokenizer, cache_dir):
    loader = build_boost_dataloader(1, 0, tokenizer, job_config(cache_dir))
    batches = [batch for _, batch in zip(range(3), loader)]
    inputs = torch.cat([input_dict["input"] for input_dict, _ in batches])
    labels = torch.cat([labels for _, labels in batches])
    assert all(b[0]["input"].shape == b[1].shape == (BATCH, SEQ_LEN) for b in batches)
    assert torch.equal(labels[:, :-1], inputs[:, 1:])  # labels are the inputs shifted by one

    # Each row is the next seq_len + 1 tokens of the BOS/doc/EOS stream of the first train files.
    stream = token_stream(tokenizer, [stdlib_text(p) for p in stdlib_files("train")[:4]])
    window = SEQ_LEN + 1
    expected = torch.tensor([stream[i * window : (i + 1) * window] for i in range(len(inputs))])
    assert len(stream) >= expected.numel()
    assert torch.equal(inputs, expected[:, :-1]) and torch.equal(labels, expected[:, 1:])


def test_dataloader_state_dict_resumes_at_the_next_batch(tokenizer, cache_dir):
    config = job_config(cache_dir, "--training.seq_len", "256")
    loader = build_boost_dataloader(2, 1, tokenizer, config)
    batches = iter(loader)
    # Stop a few documents in, with a part-used document in the token buffer: both must be restored.
    for _ in range(500):
        next(batches)
        dataset_state = loader.dataset.state_dict()
        if dataset_state["sample_idx"] >= 3 and dataset_state["token_buffer"]:
            break
    assert dataset_state["sample_idx"] >= 3 and dataset_state["token_buffer"], dataset_state["sample_idx"]
    state = loader.state_dict()
    expected = [next(batches) for _ in range(2)]

    resumed = build_boost_dataloader(2, 1, tokenizer, config)
    resumed.load_state_dict(state)
    got = [batch for _, batch in zip(range(2), resumed)]
    for (want_inputs, want_labels), (got_inputs, got_labels) in zip(expected, got):
        assert torch.equal(want_inputs["input"], got_inputs["input"]) and torch.equal(want_labels, got_labels)

    # The two data-parallel ranks read different shards.
    rank0_first = next(iter(build_boost_dataloader(2, 0, tokenizer, config)))[0]["input"]
    rank1_first = next(iter(build_boost_dataloader(2, 1, tokenizer, config)))[0]["input"]
    assert not torch.equal(rank0_first, rank1_first)


def test_validator_dataloader_reads_stdlib_validation(tokenizer, cache_dir):
    config = job_config(
        cache_dir,
        "--validation.dataset", "stdlib_validation",
        "--validation.local_batch_size", str(BATCH),
        "--validation.seq_len", str(SEQ_LEN),
    )  # fmt: skip
    # torchtitan's builder finds the dataset too; BOOST's validator uses its own loader
    stream = token_stream(tokenizer, [stdlib_text(stdlib_files("validation")[0])])
    loaders = {
        build: build(1, 0, tokenizer, config, infinite=True)
        for build in (build_text_validation_dataloader, build_boost_validation_dataloader)
    }
    for loader in loaders.values():
        inputs, labels = next(iter(loader))
        assert (
            inputs["input"][0].tolist() == stream[:SEQ_LEN] and labels[0].tolist() == stream[1 : SEQ_LEN + 1]
        )
    # every validation pass scores the same held-out windows; torchtitan's dataset moves on instead
    again = {build: next(iter(loader))[0]["input"][0].tolist() for build, loader in loaders.items()}
    assert again[build_boost_validation_dataloader] == stream[:SEQ_LEN]
    assert again[build_text_validation_dataloader] != stream[:SEQ_LEN]


# ----------------------------------------------------------------------------- local files


@pytest.fixture
def local_folder(tmp_path) -> tuple[Path, list[str]]:
    """A folder with one file of each format (and one to ignore), and the documents it holds in order."""
    docs = [
        "a plain-text document\nspanning two lines\n",
        "first json line: " + "x = 1\n" * 20,
        "second json line: " + "y = 2\n" * 20,
        "first parquet row: " + "def f(): pass\n" * 10,
        "second parquet row: " + "return None\n" * 10,
    ]
    (tmp_path / "a.txt").write_text(docs[0])
    records = [json.dumps({"text": doc, "id": i}) for i, doc in enumerate(docs[1:3], start=1)]
    (tmp_path / "b.jsonl").write_text("\n".join(records) + "\n\n")  # a blank line is skipped
    pq.write_table(pa.table({"text": docs[3:], "id": [3, 4]}), tmp_path / "c.parquet")
    (tmp_path / "notes.md").write_text("not a dataset file")
    return tmp_path, docs


def test_local_dataset_reads_txt_jsonl_and_parquet(local_folder, tokenizer, cache_dir):
    folder, docs = local_folder
    assert load_local_dataset(str(folder))["text"] == docs
    assert load_local_dataset(str(folder / "b.jsonl"))["text"] == docs[1:3]

    seq_len = 8
    config = job_config(
        cache_dir,
        "--training.dataset", "local",
        "--training.dataset_path", str(folder),
        "--training.local_batch_size", "1",
        "--training.seq_len", str(seq_len),
    )  # fmt: skip
    loader = build_boost_dataloader(1, 0, tokenizer, config, infinite=False)
    rows = [inputs["input"][0].tolist() + labels[0, -1:].tolist() for inputs, labels in loader]
    stream = token_stream(tokenizer, docs)
    n_windows = len(stream) // (seq_len + 1)
    assert rows == [stream[i * (seq_len + 1) : (i + 1) * (seq_len + 1)] for i in range(n_windows)]


def test_whole_set_validation_reads_whole_batches(local_folder, tokenizer, cache_dir):
    """The held-out text loader of the whole set (``validation.steps = -1``) reads whole batches only, the
    stream's windows in order (the last partial batch left out, as the ``tokens`` loader leaves it), and
    refuses a share without one whole batch, naming the fields, before any step."""
    folder, docs = local_folder
    seq_len = 8
    windows = len(token_stream(tokenizer, docs)) // (seq_len + 1)
    batch = next(b for b in range(2, windows) if windows % b)  # a batch size that leaves a partial batch
    config = job_config(
        cache_dir,
        "--validation.dataset", "local",
        "--validation.dataset_path", str(folder),
        "--validation.local_batch_size", str(batch),
        "--validation.seq_len", str(seq_len),
    )  # fmt: skip
    loader = build_boost_validation_dataloader(1, 0, tokenizer, config, infinite=False)
    sizes = [labels.shape[0] for _, labels in loader]
    assert sizes == [batch] * (windows // batch), (sizes, windows, batch)
    too_big = job_config(
        cache_dir,
        "--validation.dataset", "local",
        "--validation.dataset_path", str(folder),
        "--validation.local_batch_size", str(windows + 1),
        "--validation.seq_len", str(seq_len),
    )  # fmt: skip
    with pytest.raises(
        ConfigError, match=rf"share holds fewer than validation.local_batch_size = {windows + 1}"
    ):
        build_boost_validation_dataloader(1, 0, tokenizer, too_big, infinite=False)


def test_local_dataset_errors_name_the_setting(tmp_path, tokenizer, cache_dir):
    with pytest.raises(ValueError, match=r"training\.dataset_path, which is not set"):
        build_boost_dataloader(1, 0, tokenizer, job_config(cache_dir, "--training.dataset", "local"))
    missing = job_config(
        cache_dir, "--training.dataset", "local", "--training.dataset_path", str(tmp_path / "nope")
    )
    with pytest.raises(ConfigError, match=r"training\.dataset_path = .*nope.*: does not exist"):
        build_boost_dataloader(1, 0, tokenizer, missing)
    empty = job_config(cache_dir, "--training.dataset", "local", "--training.dataset_path", str(tmp_path))
    with pytest.raises(ValueError, match=r"holds no \.txt/\.jsonl/\.parquet file"):
        build_boost_dataloader(1, 0, tokenizer, empty)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"content": "no text field"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1 has no 'text' field"):
        load_local_dataset(str(tmp_path))

    validation = job_config(cache_dir, "--validation.dataset", "local")
    with pytest.raises(ValueError, match=r"validation\.dataset_path"):
        build_boost_validation_dataloader(1, 0, tokenizer, validation)
    with pytest.raises(ValueError, match=r"validation\.dataset_path"):  # the Validator's own path
        build_text_validation_dataloader(1, 0, tokenizer, validation)


# (file name, content, what the refusal says after "training.dataset_path: <dir>/")
MALFORMED = [
    ("empty.txt", b"", r"empty\.txt is empty; fill it or remove it"),
    ("blank.txt", b" \n\t\n", r"blank\.txt holds only blank space"),
    (
        "latin1.txt",
        "line one\ncaf\u00e9\n".encode("latin-1"),
        r"latin1\.txt:2 is not UTF-8 text \(byte 12\); convert it",
    ),
    ("binary.txt", b"\x00\x01\x02ELF", r"binary\.txt:1 holds NUL bytes: a binary file"),
    ("empty.jsonl", b"", r"empty\.jsonl is empty"),
    ("blank.jsonl", b"\n\n", r"blank\.jsonl holds only blank space"),
    ("blank_lines.jsonl", b"\n \n\n{}", r"blank_lines\.jsonl:4 has no 'text' field \(keys: \[\]\)"),
    (
        "not_json.jsonl",
        b'{"text": "a"}\nnot json\n',
        r"not_json\.jsonl:2 is not JSON \(Expecting value, column 1\)",
    ),
    ("list.jsonl", b'["text"]\n', r"list\.jsonl:1 is a JSON list, not an object"),
    ("no_text.jsonl", b'{"content": "x"}\n', r"no_text\.jsonl:1 has no 'text' field \(keys: \['content'\]\)"),
    ("number.jsonl", b'{"text": 5}\n', r"number\.jsonl:1 has a 'text' of type int, not a string"),
    (
        "surrogate.jsonl",
        b'{"text": "a\\ud800b"}\n',
        r"surrogate\.jsonl:1 has a 'text' holding a lone surrogate \(\\ud800 at character 1\), not Unicode text",
    ),
    ("fake.parquet", b"PAR1 not really", r"fake\.parquet is not a readable parquet file"),
]


@pytest.mark.parametrize("name,content,message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_local_corpus_is_refused_with_file_line_and_fix(tmp_path, name, content, message):
    (tmp_path / "good.txt").write_text(
        "a good document"
    )  # one bad file spoils the folder: nothing is skipped
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ConfigError, match=rf"^training\.dataset_path: {tmp_path}/{message}"):
        read_local_corpus(str(tmp_path))


def test_jsonl_lines_split_on_newline_only(tmp_path):
    # JSON strings may hold U+2028 and \x0c raw; str.splitlines() would cut such a record in two.
    docs = ["one\u2028line", "form\x0cfeed"]
    (tmp_path / "a.jsonl").write_text(
        "\r\n".join(json.dumps({"text": d}, ensure_ascii=False) for d in docs) + "\n"
    )
    assert read_local_corpus(str(tmp_path / "a.jsonl")) == docs


def test_parquet_without_string_text_column_is_refused(tmp_path):
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    with pytest.raises(ConfigError, match=r"ints\.parquet has a 'text' column of int64, not strings"):
        read_local_corpus(str(tmp_path / "ints.parquet"))
    pq.write_table(pa.table({"text": ["a", None]}), tmp_path / "nulls.parquet")
    with pytest.raises(ConfigError, match=r"nulls\.parquet row 1 has a null 'text'"):
        read_local_corpus(str(tmp_path / "nulls.parquet"))


def test_corpus_smaller_than_the_data_parallel_degree_is_refused_before_start(tmp_path):
    from torchtitan_ext.preflight import check_job

    corpus = tmp_path / "one.jsonl"
    corpus.write_text(json.dumps({"text": "the only document"}) + "\n")
    argv = [
        "--job.config_file",
        str(Path(__file__).parents[2] / "train_configs" / "debug.toml"),
        "--training.dataset",
        "local",
        "--training.dataset_path",
        str(corpus),
    ]
    check_job(argv, 1)
    with pytest.raises(ConfigError, match=r"holds 1 document\(s\), fewer than the data-parallel degree 2"):
        check_job([*argv, "--parallelism.data_parallel_shard_degree", "2"], 2)
    # Validation reads its set once: a share that cannot fill one batch would end torchtitan's
    # Validator on an empty loss list at the first validation.
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text(json.dumps({"text": "the held-out text"}) + "\n")
    validation = ["--validation.dataset", "local", "--validation.dataset_path", str(held_out)]
    with pytest.raises(
        ConfigError,
        match=r"^validation\.dataset_path = .*: a data-parallel rank's share holds at most "
        r"19 tokens, fewer than one validation batch \(local_batch_size × "
        r"\(seq_len \+ 1\) = 2056\)",
    ):
        check_job([*argv, *validation], 1)
    check_job([*argv, *validation, "--validation.local_batch_size", "1", "--validation.seq_len", "8"], 1)


def test_no_corpus_makes_a_loader_spin(tmp_path, tokenizer, cache_dir):
    # torchtitan's infinite loader re-loops an empty shard forever: a rank with no document is refused
    # when its loader is built, even when nothing checked the corpus before (here, no preflight).
    corpus = tmp_path / "one.jsonl"
    corpus.write_text(json.dumps({"text": "the only document"}) + "\n")
    config = job_config(
        cache_dir,
        "--training.dataset",
        "local",
        "--training.dataset_path",
        str(corpus),
        "--training.seq_len",
        "8",
    )
    next(iter(build_boost_dataloader(1, 0, tokenizer, config)))  # one tiny document still yields (re-looped)
    with pytest.raises(ConfigError, match=r"data-parallel rank 1 got no document"):
        build_boost_dataloader(2, 1, tokenizer, config)
    corpus.write_text("")
    with pytest.raises(ConfigError, match=r"one\.jsonl is empty"):
        build_boost_dataloader(1, 0, tokenizer, config)


def test_tokenizer_file_that_does_not_parse_is_refused(tmp_path, tokenizer):
    (tmp_path / "tokenizer.json").write_text("{garbage")
    with pytest.raises(
        ConfigError, match=rf"model\.hf_assets_path: {tmp_path}/tokenizer\.json does not parse"
    ):
        check_tokenizer_assets(str(tmp_path), 1)
    with pytest.raises(RunError, match=rf"{tmp_path}/tokenizer\.json does not parse as a tokenizers file"):
        load_tokenizer(tmp_path)  # prepare's and the after-training tools' reader: one line, not a traceback
    check_tokenizer_assets(
        tokenizer.tokenizer_path, 1
    )  # the real one passes, and its 1024 tokens split 2 ways
    check_tokenizer_assets(tokenizer.tokenizer_path, 2)
    with pytest.raises(
        ConfigError, match=r"its tokenizer has 1024 tokens, which the TP degree 3 does not divide"
    ):
        check_tokenizer_assets(tokenizer.tokenizer_path, 3)
    (tmp_path / "tokenizer.json").write_bytes(
        (Path(tokenizer.tokenizer_path) / "tokenizer.json").read_bytes()
    )
    (tmp_path / "tokenizer_config.json").write_text("{")
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json is not valid JSON"):
        check_tokenizer_assets(str(tmp_path), 1)
    with pytest.raises(RunError, match=r"tokenizer_config\.json is not valid JSON"):
        load_tokenizer(tmp_path)  # prepare's and the after-training tools' reader


def test_a_special_token_the_tokenizer_does_not_hold_is_refused_by_every_reader(tmp_path, tokenizer):
    # torchtitan's tokenizer would add it as a new id: the trainer would frame documents with ids the
    # prepared corpus and the after-training tools never saw
    (tmp_path / "tokenizer.json").write_bytes(
        (Path(tokenizer.tokenizer_path) / "tokenizer.json").read_bytes()
    )
    config = json.loads((Path(tokenizer.tokenizer_path) / "tokenizer_config.json").read_text())
    as_object = {"__type": "AddedToken", "content": config["eos_token"]}  # LLaMA 2's form reads the same
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": as_object}))
    check_tokenizer_assets(str(tmp_path), 1)
    assert load_tokenizer(tmp_path).eos_id == load_tokenizer(tokenizer.tokenizer_path).eos_id
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "bos_token": "<s-not-held>"}))
    said = "names bos_token '<s-not-held>', which tokenizer.json does not hold: add it to tokenizer.json's"
    with pytest.raises(
        ConfigError, match=re.escape(f"model.hf_assets_path: {tmp_path}/tokenizer_config.json {said}")
    ):
        check_tokenizer_assets(str(tmp_path), 1)
    with pytest.raises(RunError, match=re.escape(f"{tmp_path}/tokenizer_config.json: {said}")):
        load_tokenizer(tmp_path)
    with pytest.raises(ValueError, match=re.escape(said)):
        write_tokenizer(tmp_path, tmp_path / "exported", model_max_length=64)


def test_the_tools_read_the_tokenizer_the_trainer_reads(tmp_path, tokenizer, cache_dir):
    # prepare --config and the after-training tools resolve a TOML's tokenizer as the trainer does: the
    # deprecated model.tokenizer_path, which torchtitan copies over model.hf_assets_path, included
    from tokenizers import Tokenizer, processors

    folder = tmp_path / "post-processed"
    folder.mkdir()
    own = Tokenizer.from_file(str(Path(tokenizer.tokenizer_path) / "tokenizer.json"))
    own.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A", special_tokens=[(BOS_TOKEN, own.token_to_id(BOS_TOKEN))]
    )
    own.save(str(folder / "tokenizer.json"))  # and no tokenizer_config.json: torchtitan knows no BOS or EOS
    toml = tmp_path / "run.toml"
    for model in (f'tokenizer_path = "{folder}"', f'hf_assets_path = "{folder}"'):
        toml.write_text(
            f'[model]\n{model}\n[boost]\ncache_dir = "{cache_dir}"\ntokenizer_vocab_size = {VOCAB}\n'
        )
        trainer = ConfigManager().parse_args(["--job.config_file", str(toml), "--job.custom_config_module",
                                              "torchtitan_ext.config"])  # fmt: skip
        assert run_tokenizer_dir(read_toml(toml)) == boost_tokenizer_dir(trainer) == folder

    # a prompt's ids (generate, evaluate) are torchtitan's for the same text, the post-processor's BOS kept
    reference, ours = build_boost_tokenizer(trainer), load_tokenizer(folder)
    for text in ("def f(x):", "", "naïve café"):
        for bos, eos in ((True, False), (True, True), (False, False)):
            assert ours.encode(text, bos=bos, eos=eos) == reference.encode(text, add_bos=bos, add_eos=eos)
    assert ours.encode("def f(x):")[0] == own.token_to_id(BOS_TOKEN)

    # a post-processor that also appends EOS (a config naming both): a document is framed as torchtitan frames
    # it, and a prompt is its beginning, without the EOS (generation would start a new document after it)
    own.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A {EOS_TOKEN}",
        special_tokens=[(t, own.token_to_id(t)) for t in (BOS_TOKEN, EOS_TOKEN)],
    )
    both = tmp_path / "post-processed-eos"
    both.mkdir()
    own.save(str(both / "tokenizer.json"))
    config = Path(tokenizer.tokenizer_path) / "tokenizer_config.json"
    (both / "tokenizer_config.json").write_text(config.read_text())
    reference, ours = (
        HuggingFaceTokenizer(str(both)),
        load_tokenizer(both),
    )  # torchtitan's, as the trainer builds it
    for text in ("def f(x):", "", "a literal <|end_of_text|>"):
        document = reference.encode(text, add_bos=True, add_eos=True)
        assert document[0] == ours.bos_id and document[-1] == ours.eos_id
        assert ours.encode(text, eos=True) == document
        assert ours.encode(text) == document[:-1]
        assert ours.encode(text, bos=False) == document[1:-1]


def test_registration_is_idempotent_and_other_names_fall_through(tokenizer, cache_dir):
    text_datasets.register_datasets()
    text_datasets.register_datasets()
    assert {"stdlib", "stdlib_validation", "local", "c4", "c4_validation"} <= set(DATASETS)
    with pytest.raises(ValueError, match=r"not supported.*stdlib"):
        build_boost_dataloader(
            1, 0, tokenizer, job_config(cache_dir, "--training.dataset", "no_such_dataset")
        )

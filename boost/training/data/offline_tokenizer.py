"""The offline tokenizer: a byte-level BPE trained on the ``stdlib`` corpus, once per machine.

Trained (about a second) on the first ~4 MB of the ``stdlib`` training split and cached under
``<cache>/tokenizer-stdlib-v<vocab>-<hash>/``, where the hash covers the BPE recipe, the training
size, the Python version and the corpus file list, so a changed recipe or standard library never
loads a stale folder. Concurrent ranks queue on a file lock: one trains, the rest load its result.
The folder holds ``tokenizer.json`` and a ``tokenizer_config.json`` naming BOS and EOS, the form
torchtitan's ``HuggingFaceTokenizer`` and ``boost.training.data.run_tokenizer.load_tokenizer`` read.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from boost.training.data.stdlib_corpus import read_stdlib_file, stdlib_files

logger = logging.getLogger(__name__)

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"

_TOKENIZER_TRAIN_CHARS = 4_000_000  # enough for a 2k-8k vocabulary, trains in about a second
# Part of the cache key: bump it whenever the BPE recipe below changes, so stale caches are ignored.
_BPE_RECIPE = "bytelevel-bpe/no-prefix-space/v1"


def _cache_root(cache_dir: str | None) -> Path:
    """``cache_dir`` (``boost.cache_dir``), else ``$BOOST_CACHE``, else ``~/.cache/boost``."""
    configured = cache_dir or os.environ.get("BOOST_CACHE") or "~/.cache/boost"
    return Path(configured).expanduser()


def stdlib_tokenizer_dir(vocab_size: int, cache_dir: str | None) -> Path:
    """Cache folder of the offline BPE for this vocabulary, Python version and corpus."""
    # python_version(), not sys.version: the latter names the build date and compiler, which
    # differ between machines that hold the same standard library.
    key = "\n".join(
        [_BPE_RECIPE, str(_TOKENIZER_TRAIN_CHARS), platform.python_version(), *stdlib_files("train")]
    )
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return _cache_root(cache_dir) / f"tokenizer-stdlib-v{vocab_size}-{digest}"


def _train_stdlib_bpe(vocab_size: int) -> Tokenizer:
    """A byte-level BPE (GPT-2 style, lossless on any text) trained on the start of the stdlib train split."""
    texts, n_chars = [], 0
    for relative in stdlib_files("train"):
        if n_chars >= _TOKENIZER_TRAIN_CHARS:
            break
        texts.append(read_stdlib_file(relative))
        n_chars += len(texts[-1])
    tokenizer = Tokenizer(models.BPE())
    # No prefix space: decode(encode(s)) must give s back exactly, leading indentation included.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        # All 256 byte symbols up front, so no byte (hence no text) is ever out of vocabulary.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    logger.info(
        f"Trained a {tokenizer.get_vocab_size()}-token byte-level BPE on {n_chars / 1e6:.1f}M stdlib chars"
    )
    return tokenizer


@contextmanager
def _exclusive_lock(lock_path: Path) -> Iterator[None]:
    # Ranks of one node queue here, so one trains and the rest load its result.
    with lock_path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _publish_dir(staging: Path, target: Path) -> None:
    """Rename a complete ``staging`` folder to ``target``; if another process got there first, keep theirs."""
    try:
        os.replace(staging, target)  # atomic: readers see no folder or a complete one
    except OSError:
        # Only reachable where flock does not serialise writers (e.g. some network file systems):
        # the training is deterministic, so the winner's files equal ours.
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "tokenizer.json").exists():
            raise


def ensure_stdlib_tokenizer(vocab_size: int, cache_dir: str | None) -> Path:
    """The offline tokenizer's folder, training and caching it on first use (safe under concurrent ranks)."""
    target = stdlib_tokenizer_dir(vocab_size, cache_dir)
    if (target / "tokenizer.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f"{target.name}.lock"):
        if (target / "tokenizer.json").exists():  # another rank trained it while we waited
            return target
        tokenizer = _train_stdlib_bpe(vocab_size)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
        staging.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        tokenizer.save(str(staging / "tokenizer.json"))
        # torchtitan's HuggingFaceTokenizer finds BOS/EOS ids through these two keys.
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "add_bos_token": True,
            "add_eos_token": False,
        }
        (staging / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
        _publish_dir(staging, target)
    logger.info(f"Cached the offline tokenizer in {target}")
    return target


def assets_tokenizer_dir(hf_assets_path: str | None) -> Path | None:
    """``model.hf_assets_path`` when it holds a ``tokenizer.json`` (the run's tokenizer), else ``None``."""
    if hf_assets_path and (Path(hf_assets_path).expanduser() / "tokenizer.json").is_file():
        return Path(hf_assets_path).expanduser()
    return None


def tokenizer_dir(hf_assets_path: str | None, vocab_size: int, cache_dir: str | None) -> Path:
    """The tokenizer folder of a run: ``model.hf_assets_path`` when it holds a ``tokenizer.json``,
    else the offline BPE's (trained on first use). The trainer and the after-training tools both ask here."""
    return assets_tokenizer_dir(hf_assets_path) or ensure_stdlib_tokenizer(vocab_size, cache_dir)

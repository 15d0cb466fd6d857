"""The tokenizer of a BOOST run, from its job config: torchtitan's ``build_tokenizer_fn`` and the preflight's check.

The tokenizer is ``model.hf_assets_path`` when that folder holds a ``tokenizer.json``; otherwise the
offline byte-level BPE of ``boost.training.data.offline_tokenizer``, sized by ``boost.tokenizer_vocab_size``
and cached under ``boost.cache_dir``. The model's vocabulary is the tokenizer's (``boost_vocab_size``).
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from boost.training.config_error import ConfigError, refuse
from boost.training.data.offline_tokenizer import tokenizer_dir
from boost.training.data.run_tokenizer import missing_special_tokens

if TYPE_CHECKING:
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.config import JobConfig

# torchtitan's logger is the root logger; naming it here keeps this module free of torchtitan's import,
# so the launcher's check of the tokenizer files loads no torchtitan.
logger = logging.getLogger()

# torchtitan's default points into its own source tree; outside it, it is not a user's choice.
_TORCHTITAN_DEFAULT_ASSETS = "./tests/assets/tokenizer"


def boost_tokenizer_dir(job_config: JobConfig) -> Path:
    """``model.hf_assets_path`` when it holds a ``tokenizer.json``, else the cached offline BPE's folder."""
    assets = job_config.model.hf_assets_path
    if (
        assets
        and assets != _TORCHTITAN_DEFAULT_ASSETS
        and not (Path(assets).expanduser() / "tokenizer.json").is_file()
    ):
        logger.warning(
            f"model.hf_assets_path = {assets!r} holds no tokenizer.json; using the offline stdlib BPE"
        )
    return tokenizer_dir(assets, job_config.boost.tokenizer_vocab_size, job_config.boost.cache_dir)


def check_tokenizer_assets(hf_assets_path: str, tp_degree: int) -> None:
    """Refuse a ``model.hf_assets_path`` without a ``tokenizer.json`` that parses (and whose size TP divides).

    Before any process starts: a garbage tokenizer file otherwise fails on every rank with a JSON
    error that names no file.
    """
    if not hf_assets_path or hf_assets_path == _TORCHTITAN_DEFAULT_ASSETS:
        return
    folder = Path(hf_assets_path).expanduser()
    fallback = 'or set model.hf_assets_path = "" to train the offline BPE'
    tokenizer_json = folder / "tokenizer.json"
    if not tokenizer_json.is_file():
        refuse(
            "model.hf_assets_path",
            hf_assets_path,
            f"holds no tokenizer.json; point it at a tokenizer folder {fallback}",
        )
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_json))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for any parse error
        raise ConfigError(
            f"model.hf_assets_path: {tokenizer_json} does not parse as a tokenizers file "
            f"({str(e).splitlines()[0] if str(e) else type(e).__name__}); replace it with one saved by "
            f"tokenizers' Tokenizer.save, {fallback}"
        ) from None
    config_json = folder / "tokenizer_config.json"
    if config_json.is_file():
        try:
            config = json.loads(config_json.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"model.hf_assets_path: {config_json} is not valid JSON ({e}); fix or remove it"
            ) from None
        missing = missing_special_tokens(tokenizer, config) if isinstance(config, dict) else None
        if missing:
            raise ConfigError(f"model.hf_assets_path: {config_json} {missing}")
    vocab_size = tokenizer.get_vocab_size()
    if vocab_size % tp_degree:
        refuse(
            "model.hf_assets_path",
            hf_assets_path,
            f"its tokenizer has {vocab_size} tokens, which the TP degree "
            f"{tp_degree} does not divide (the embedding and head shard on it)",
        )


@functools.cache
def _tokenizer_in(folder: Path) -> HuggingFaceTokenizer:
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    return HuggingFaceTokenizer(str(folder))


def build_boost_tokenizer(job_config: JobConfig) -> HuggingFaceTokenizer:
    """The tokenizer of a BOOST run (a train spec's ``build_tokenizer_fn``).

    One per folder and process: torchtitan builds the trainer's tokenizer here, and its
    ``update_from_config`` (``torchtitan_ext.model``), which receives no tokenizer, asks for the
    vocabulary size through :func:`boost_vocab_size` — the same object, not a second parse.
    """
    return _tokenizer_in(boost_tokenizer_dir(job_config))


def folder_vocab_size(folder: Path) -> int:
    """The vocabulary size torchtitan's ``HuggingFaceTokenizer`` reports for a tokenizer folder of
    :func:`boost_tokenizer_dir` (it loads that folder's ``tokenizer.json`` the same way), read without
    importing torchtitan: the launcher's check of a token folder stays torch-free (the import is ~6 s)."""
    return Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size()


def boost_vocab_size(job_config: JobConfig) -> int:
    """Vocabulary size of :func:`build_boost_tokenizer`'s tokenizer (sizes the model's embedding)."""
    return build_boost_tokenizer(job_config).get_vocab_size()

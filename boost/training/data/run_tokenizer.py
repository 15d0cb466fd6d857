"""The tokenizer a run trains with, read as its trainer reads it, and the TOML that names it.

``read_toml`` reads a run's TOML; ``run_tokenizer_dir`` is the folder its trainer takes the tokenizer
from (``model.hf_assets_path``, else the cached offline BPE of
``boost.training.data.offline_tokenizer``); ``load_tokenizer`` reads that folder's ``tokenizer.json``
with the BOS/EOS ids every training document was framed with (``TextTokenizer``). ``RunError`` names
the file and the fix. ``python -m boost.training.data.prepare`` tokenizes a corpus with it;
``boost.after_training.trained_run`` reads a finished run's with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

from boost.training.data.offline_tokenizer import tokenizer_dir
from boost.training.options import BoostOptions


class RunError(ValueError):
    """A run's config, checkpoint or tokenizer cannot be used; the message names the file and the fix."""


@dataclass
class TextTokenizer:
    """The run's tokenizer with the BOS/EOS ids the trainer framed every document with."""

    tokenizer: Tokenizer
    bos_id: int | None
    eos_id: int | None
    folder: Path

    def encode(self, text: str, bos: bool = True) -> list[int]:
        """Token ids of ``text``, led by BOS as every training document was."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if bos and self.bos_id is not None else []) + ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def read_toml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise RunError(
            f"--config {path} does not exist; pass the TOML the run was trained with (train_configs/)"
        )
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise RunError(f"{path} is not valid TOML: {e}") from None


def load_tokenizer(folder: str | Path) -> TextTokenizer:
    """``tokenizer.json`` (+ ``tokenizer_config.json`` naming bos/eos) from ``folder``."""
    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise RunError(f"{folder} holds no tokenizer.json; pass --tokenizer DIR with the run's tokenizer")
    try:
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for any parse error
        raise RunError(
            f"{folder / 'tokenizer.json'} does not parse as a tokenizers file ({e}); pass --tokenizer DIR "
            "with the run's tokenizer"
        ) from None
    config_file = folder / "tokenizer_config.json"
    try:
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    except (OSError, ValueError) as e:
        raise RunError(f"{config_file} is not valid JSON ({e}); fix or remove it") from None
    missing = missing_special_tokens(tokenizer, config)
    if missing:
        raise RunError(f"{config_file}: {missing}")
    bos, eos = (special_token_text(config.get(key)) for key in ("bos_token", "eos_token"))
    return TextTokenizer(
        tokenizer,
        tokenizer.token_to_id(bos) if bos else None,
        tokenizer.token_to_id(eos) if eos else None,
        folder,
    )


def special_token_text(token: str | dict | None) -> str | None:
    """A special token as ``tokenizer_config.json`` names it: a string, or transformers' serialised
    ``AddedToken`` (``{"__type": "AddedToken", "content": "<s>", ...}``)."""
    return token.get("content") if isinstance(token, dict) else token


def missing_special_tokens(tokenizer: Tokenizer, config: dict) -> str | None:
    """What is wrong where ``tokenizer_config.json`` names a BOS or EOS token its ``tokenizer.json`` does not
    hold: torchtitan's tokenizer then adds it as a new id, so the trainer would frame documents with ids
    the prepared corpus and the after-training tools never saw."""
    absent = [
        f"{key} {text!r}"
        for key in ("bos_token", "eos_token")
        if (text := special_token_text(config.get(key))) and tokenizer.token_to_id(text) is None
    ]
    if not absent:
        return None
    return (
        f"names {' and '.join(absent)}, which tokenizer.json does not hold: add it to tokenizer.json's "
        "added_tokens, or name one it holds"
    )


def run_tokenizer_dir(config: dict) -> Path:
    """The tokenizer folder the trainer used for this TOML."""
    boost = config.get("boost", {})
    return tokenizer_dir(
        config.get("model", {}).get("hf_assets_path", ""),
        boost.get("tokenizer_vocab_size", BoostOptions.tokenizer_vocab_size),
        boost.get("cache_dir", BoostOptions.cache_dir),
    )

"""The tokenizer a run trains with, read as its trainer reads it, and the TOML that names it.

``read_toml`` reads a run's TOML; ``run_tokenizer_dir`` is the folder its trainer takes the tokenizer
from (``model.hf_assets_path``, or the deprecated ``model.tokenizer_path`` torchtitan copies over it; else
the cached offline BPE of ``boost.training.data.offline_tokenizer``); ``load_tokenizer`` reads that folder's
``tokenizer.json`` with the BOS/EOS ids every training document was framed with, and whether its own
post-processor adds them (``TextTokenizer``, which frames a text as torchtitan does). ``RunError`` names
the file and the fix. ``python -m boost.training.data.prepare`` tokenizes a corpus with it;
``boost.after_training.trained_run`` reads a finished run's with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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
    """The run's tokenizer with the BOS/EOS ids the trainer framed every document with, and whether the
    tokenizer's own post-processor adds them (``adds_bos``/``adds_eos``: torchtitan's ``hf_adds_bos`` and
    ``hf_adds_eos``, read from the ids of an empty text as torchtitan reads them)."""

    tokenizer: Tokenizer
    bos_id: int | None
    eos_id: int | None
    folder: Path
    adds_bos: bool = False
    adds_eos: bool = False

    def encode(self, text: str, bos: bool = True, eos: bool = False) -> list[int]:
        """Token ids of ``text`` as the trainer framed a document (torchtitan's ``HuggingFaceTokenizer.encode(text,
        add_bos=True, add_eos=True)``: the tokenizer's ids, its post-processor's tokens included, BOS and EOS
        added where it added none), without the leading BOS where ``bos`` is false and without the closing EOS
        where ``eos`` is false: a prompt is a document's beginning, whatever the post-processor appends."""
        ids = self.frame(self.tokenizer.encode(text).ids, bos=True, eos=True)
        if not bos and self.bos_id is not None and ids[:1] == [self.bos_id]:
            ids = ids[1:]
        if not eos and self.eos_id is not None and ids[-1:] == [self.eos_id]:
            ids = ids[:-1]
        return ids

    def frame(self, ids: list[int], bos: bool = True, eos: bool = False) -> list[int]:
        """``ids`` (the tokenizer's, post-processor included) with the BOS and EOS torchtitan adds to them."""
        head = [self.bos_id] if bos and self.bos_id is not None and not self.adds_bos else []
        tail = [self.eos_id] if eos and self.eos_id is not None and not self.adds_eos else []
        return head + ids + tail

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def read_toml(path: str | Path, overrides: Sequence[str] = ()) -> dict:
    """The TOML at ``path`` with the run's command-line ``overrides`` over it (``with_overrides``)."""
    path = Path(path)
    if path.is_dir():
        raise RunError(
            f"--config {path} is a folder; pass the TOML the run was trained with (train_configs/)"
        )
    if not path.is_file():
        raise RunError(
            f"--config {path} does not exist; pass the TOML the run was trained with (train_configs/)"
        )
    try:
        with open(path, "rb") as f:
            config = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise RunError(f"{path} is not valid TOML: {e}") from None
    return with_overrides(config, overrides)


# --section.field value, --section.field=value, --section.field (true), --section.no-field (false)
_OVERRIDE = re.compile(r"--([A-Za-z_][\w-]*)\.(no[-_])?([A-Za-z_][\w-]*?)(?:=(.*))?$", re.DOTALL)


def with_overrides(config: dict, overrides: Sequence[str]) -> dict:
    """``config`` with the scalar overrides a run was started with, as ``run_train.sh`` takes them
    (``--boost.linear svd``, ``--training.seq_len=512``, ``--boost.no-group-linears``): a run trained with
    overrides is read back with the same ones. A value is read as a TOML value, else as a string.

    Example::

        >>> with_overrides({"boost": {"linear": "cola"}}, ["--boost.linear", "svd", "--boost.no-group-linears"])
        {'boost': {'linear': 'svd', 'group_linears': False}}
    """
    config = {
        section: dict(fields) if isinstance(fields, dict) else fields for section, fields in config.items()
    }
    args, i = list(overrides), 0
    while i < len(args):
        match = _OVERRIDE.match(args[i])
        if match is None:
            raise RunError(
                f"{args[i]!r}: not a --section.field override; give the run's overrides as run_train.sh took them "
                "(--boost.linear svd)"
            )
        section, negated, field, attached = match.groups()
        section, field = section.replace("-", "_"), field.replace("-", "_")
        if negated:
            value, i = False, i + 1
        elif attached is not None:
            value, i = _toml_value(attached), i + 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            value, i = _toml_value(args[i + 1]), i + 2
        else:
            value, i = True, i + 1
        if not isinstance(config.setdefault(section, {}), dict):
            raise RunError(f"--{section}.{field}: the TOML's {section} is not a table")
        config[section][field] = value
    return config


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` split into a tool's own arguments and the run's ``--section.field [value]`` overrides (a
    tool's own options have no dot), so that no override's value is read as the tool's positional."""
    own, overrides, i = [], [], 0
    while i < len(argv):
        match = _OVERRIDE.match(argv[i])
        if match is None:
            own.append(argv[i])
            i += 1
            continue
        takes_next = match.group(2) is None and match.group(4) is None and i + 1 < len(argv)
        takes_next = takes_next and not argv[i + 1].startswith("--")
        overrides += argv[i : i + 1 + takes_next]
        i += 1 + takes_next
    return own, overrides


def _toml_value(text: str):
    """``text`` as a TOML value (``512``, ``0.25``, ``true``), else the string itself (``svd``)."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


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
    bos_id = tokenizer.token_to_id(bos) if bos else None
    eos_id = tokenizer.token_to_id(eos) if eos else None
    # torchtitan's _infer_should_add_bos_eos: the post-processor adds BOS (EOS) where an empty text's ids hold it
    empty = tokenizer.encode("").ids
    return TextTokenizer(
        tokenizer, bos_id, eos_id, folder, adds_bos=bos_id is not None and bos_id in empty,
        adds_eos=eos_id is not None and eos_id in empty,
    )  # fmt: skip


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
    """The tokenizer folder the trainer used for this TOML: ``model.tokenizer_path`` where set (torchtitan copies
    the deprecated field over ``model.hf_assets_path``), else ``model.hf_assets_path``."""
    boost, model = config.get("boost", {}), config.get("model", {})
    return tokenizer_dir(
        model.get("tokenizer_path") or model.get("hf_assets_path", ""),
        boost.get("tokenizer_vocab_size", BoostOptions.tokenizer_vocab_size),
        boost.get("cache_dir", BoostOptions.cache_dir),
    )

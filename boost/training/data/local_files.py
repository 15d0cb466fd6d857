"""A ``local`` corpus read strictly: every document, or a ``ConfigError`` naming the file, line and fix.

``training.dataset_path`` (or ``validation.dataset_path``) is a ``.txt`` (one document per file),
``.jsonl`` (a ``text`` string per line) or ``.parquet`` (a string column ``text``) file, or a folder
of them. Where the ``stdlib`` corpus is lenient (a few latin-1 bytes in the standard library are
replaced), a user's corpus is not: an empty, blank, unreadable, non-UTF-8 or binary file, or a line
or row that is not a text document, is refused, so nothing trains on garbage or loops over nothing.
The preflight (``torchtitan_ext.data.dataset_check.check_dataset``), the loader
(``torchtitan_ext.data.text_datasets.load_local_dataset``) and ``boost.after_training.evaluate`` read through here.
"""

from __future__ import annotations

import json
from pathlib import Path

from boost.training.config_error import ConfigError, refuse

LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")


def local_text_files(dataset_path: str | None, config_field: str = "training.dataset_path") -> list[Path]:
    """The ``.txt``/``.jsonl``/``.parquet`` files a ``local`` dataset reads, in sorted path order.

    Raises ``ConfigError`` naming ``config_field`` when the path is unset, missing or holds no such file.
    """
    fix = f"set --{config_field} to a {'/'.join(LOCAL_SUFFIXES)} file or a folder of them"
    if not dataset_path:
        raise ConfigError(f'dataset "local" reads {config_field}, which is not set: {fix}')
    path = Path(dataset_path).expanduser()
    if not path.exists():
        refuse(config_field, dataset_path, f"does not exist: {fix}")
    if path.is_file():
        files = [path] if path.suffix in LOCAL_SUFFIXES else []
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in LOCAL_SUFFIXES)
    if not files:
        refuse(config_field, dataset_path, f"holds no {'/'.join(LOCAL_SUFFIXES)} file: {fix}")
    return files


def _corpus_error(config_field: str, where: object, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{config_field}: {where} {problem}; {fix}")


def _read_utf8_file(path: Path, config_field: str) -> str:
    """A corpus file's text; unreadable, non-UTF-8, binary (NUL bytes) or blank files are refused."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise _corpus_error(
            config_field, path, f"cannot be read ({e.strerror})", "check its permissions"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise _corpus_error(
            config_field,
            f"{path}:{line}",
            f"is not UTF-8 text (byte {e.start})",
            "convert it to UTF-8 (iconv -t UTF-8) or remove it",
        ) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise _corpus_error(
            config_field, f"{path}:{line}", "holds NUL bytes: a binary file, not text", "remove it"
        )
    if not text.strip():
        raise _corpus_error(
            config_field, path, "is empty" if not text else "holds only blank space", "fill it or remove it"
        )
    return text


def _read_jsonl_texts(path: Path, config_field: str) -> list[str]:
    texts = []
    # split("\n"), not splitlines(): a JSON string may hold U+2028 and other line breaks of Unicode.
    for line_number, line in enumerate(_read_utf8_file(path, config_field).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise _corpus_error(
                config_field,
                where,
                f"is not JSON ({e.msg}, column {e.colno})",
                'write one JSON object per line, e.g. {"text": "..."}',
            ) from None
        if not isinstance(record, dict):
            raise _corpus_error(
                config_field,
                where,
                f"is a JSON {type(record).__name__}, not an object",
                'write one JSON object per line, e.g. {"text": "..."}',
            )
        if "text" not in record:
            raise _corpus_error(
                config_field,
                where,
                f"has no 'text' field (keys: {sorted(record)})",
                "name the document's field 'text'",
            )
        if not isinstance(record["text"], str):
            raise _corpus_error(
                config_field,
                where,
                f"has a 'text' of type {type(record['text']).__name__}, not a string",
                "store each document as a JSON string",
            )
        text = record["text"]
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:  # a JSON escape such as "\\ud800": no tokenizer takes it
                raise _corpus_error(
                    config_field,
                    where,
                    f"has a 'text' holding a lone surrogate (\\u{ord(text[e.start]):04x} at character {e.start}), "
                    "not Unicode text",
                    "write the document as valid UTF-8",
                ) from None
        texts.append(text)
    if not texts:
        raise _corpus_error(config_field, path, "holds only blank lines", "fill it or remove it")
    return texts


def _read_parquet_texts(path: Path, config_field: str) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        if "text" not in schema.names:
            raise _corpus_error(
                config_field,
                path,
                f"has no 'text' column (columns: {schema.names})",
                "name the document column 'text'",
            )
        if not (
            pa.types.is_string(schema.field("text").type)
            or pa.types.is_large_string(schema.field("text").type)
        ):
            raise _corpus_error(
                config_field,
                path,
                f"has a 'text' column of {schema.field('text').type}, not strings",
                "store the documents as strings",
            )
        texts = pq.read_table(path, columns=["text"]).column("text").to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise _corpus_error(
            config_field,
            path,
            f"is not a readable parquet file ({e})",
            "write it with pyarrow or pandas' to_parquet, or remove it",
        ) from None
    if None in texts:
        raise _corpus_error(
            config_field, f"{path} row {texts.index(None)}", "has a null 'text'", "drop or fill the row"
        )
    if not texts:
        raise _corpus_error(config_field, path, "holds no row", "fill it or remove it")
    return texts


def read_local_corpus(dataset_path: str | None, config_field: str = "training.dataset_path") -> list[str]:
    """Every document of a ``local`` dataset: one per ``.txt`` file, ``.jsonl`` line or ``.parquet`` row.

    Strict where ``stdlib`` is lenient: a file that is empty, blank, unreadable, not UTF-8, binary,
    or a line/row that is not a text document is refused with ``ConfigError`` naming the file (and
    line) and the fix, so nothing trains on garbage or loops over nothing.
    """
    texts: list[str] = []
    for path in local_text_files(dataset_path, config_field):
        if path.suffix == ".txt":
            texts.append(_read_utf8_file(path, config_field))
        elif path.suffix == ".jsonl":
            texts.extend(_read_jsonl_texts(path, config_field))
        else:
            texts.extend(_read_parquet_texts(path, config_field))
    return texts

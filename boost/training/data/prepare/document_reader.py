"""One input file's documents, streamed, each with its line (or row); bad input refused or counted.

A ``.txt`` file is one document, read as ``local`` reads it (UTF-8, no NUL byte, not blank). A
``.jsonl`` / ``.json.gz`` / ``.jsonl.gz`` file holds one JSON object per line (C4's own files:
``{"text", "timestamp", "url"}``), the document in ``text_field``; blank lines are passed over. A
``.parquet`` file holds the documents in the string column ``text_field``.

Bad input — a truncated or corrupt ``.gz``, a line that is not UTF-8 or not a JSON object, a record
without the field or whose field is not a string (or holds a lone surrogate, which no tokenizer
accepts), a null parquet value, an empty file — raises ``BadInput``, one line naming the file and
line and the fix. With ``skip_bad`` the record (the rest of a truncated stream or of a parquet file whose
row group does not decode, a whole unreadable file) is left out instead and counted in ``skipped``.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

from boost.training.config_error import ConfigError
from boost.training.data.prepare.input_files import input_kind

SKIP_RECORDS = "or pass --skip-bad to skip such records"


class BadInput(ConfigError):
    """A record or file prepare cannot read; the message names the file, the line and the fix."""


class DocumentReader:
    """The documents of one input file, in file order, as ``(position, text)`` batches.

    ``position`` is the line (1-based) of a text or JSON lines file, the row (0-based, as pandas
    counts) of a parquet file; ``where(position)`` names it for a message.

    Example::

        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = path.write_text('{"text": "one"}\\n\\nnot json\\n{"text": "two"}\\n')
        >>> reader = DocumentReader(path, "text", skip_bad=True)
        >>> list(reader.batches(max_documents=10, max_chars=100)), reader.skipped
        ([[(1, 'one'), (4, 'two')]], 1)
    """

    def __init__(self, path: Path, text_field: str, skip_bad: bool):
        self.path = path
        self.text_field = text_field
        self.skip_bad = skip_bad
        self.skipped = 0
        self.bytes_read = 0
        """How far into the file (its bytes on disk) reading has come: the progress bar's measure."""
        self._kind = input_kind(path)

    def where(self, position: int) -> str:
        return f"{self.path} row {position}" if self._kind == ".parquet" else f"{self.path}:{position}"

    def bad(self, where: str, problem: str, fix: str, skip: str = SKIP_RECORDS) -> None:
        """Refuse (``BadInput``), or under ``skip_bad`` count the record and go on."""
        if not self.skip_bad:
            raise BadInput(f"{where} {problem}; {fix}, {skip}")
        self.skipped += 1

    def batches(self, max_documents: int, max_chars: int) -> Iterator[list[tuple[int, str]]]:
        """The documents in batches of at most ``max_documents`` or about ``max_chars`` characters."""
        batch: list[tuple[int, str]] = []
        chars = 0
        for position, text in self._documents():
            batch.append((position, text))
            chars += len(text)
            if len(batch) >= max_documents or chars >= max_chars:
                yield batch
                batch, chars = [], 0
        if batch:
            yield batch

    def _documents(self) -> Iterator[tuple[int, str]]:
        if self._kind == ".txt":
            yield from self._text_file()
        elif self._kind == ".parquet":
            yield from self._parquet_rows()
        else:
            yield from self._json_lines()

    def _text_file(self) -> Iterator[tuple[int, str]]:
        raw = self.path.read_bytes()
        self.bytes_read = len(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            self.bad(
                f"{self.path}:{line}",
                f"is not UTF-8 text (byte {e.start})",
                "convert it to UTF-8 (iconv -t UTF-8)",
                "or pass --skip-bad to skip the file",
            )
            return
        if "\x00" in text:
            line = text.count("\n", 0, text.index("\x00")) + 1
            self.bad(
                f"{self.path}:{line}",
                "holds NUL bytes: a binary file, not text",
                "remove it from the input",
                "or pass --skip-bad to skip the file",
            )
            return
        if not text.strip():
            self._empty("is empty" if not text else "holds only blank space")
            return
        yield 1, text

    def _empty(self, problem: str) -> None:
        self.bad(
            str(self.path), problem, "fill it or remove it from the input", "or pass --skip-bad to skip it"
        )

    def _json_lines(self) -> Iterator[tuple[int, str]]:
        found = False
        line_number = 0
        with self.path.open("rb") as raw:
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if self._kind.endswith(".gz") else raw
            try:
                for line_number, line in enumerate(stream, start=1):
                    self.bytes_read = raw.tell()
                    if line.isspace():
                        continue
                    found = True
                    text = self._json_text(line, line_number)
                    if text is not None:
                        yield line_number, text
            except EOFError:
                self.bad(
                    f"{self.path}:{line_number + 1}",
                    "is cut short: the gzip stream ends inside the file (an unfinished download or copy?)",
                    "fetch or copy the file again",
                    f"or pass --skip-bad to keep its {line_number} lines before",
                )
                return
            except (gzip.BadGzipFile, zlib.error) as e:
                self.bad(
                    f"{self.path}:{line_number + 1}",
                    f"is not a readable gzip stream ({e})",
                    "fetch or copy the file again",
                    f"or pass --skip-bad to keep its {line_number} lines before",
                )
                return
            self.bytes_read = raw.tell()
        if not found:
            self._empty("is empty" if line_number == 0 else "holds only blank lines")

    def _json_text(self, line: bytes, line_number: int) -> str | None:
        """The document of one JSON line, or None when the line is bad and skipped."""
        where = f"{self.path}:{line_number}"
        field = self.text_field
        try:
            decoded = line.decode("utf-8")
        except UnicodeDecodeError as e:
            self.bad(where, f"is not UTF-8 text (byte {e.start} of the line)", "convert the file to UTF-8")
            return None
        try:
            record = json.loads(decoded)
        except json.JSONDecodeError as e:
            self.bad(where, f"is not JSON ({e.msg}, column {e.colno})", "fix or remove the line")
            return None
        if not isinstance(record, dict):
            kind = type(record).__name__
            self.bad(
                where, f"is a JSON {kind}, not an object", f'write one {{"{field}": "..."}} object a line'
            )
            return None
        text = record.get(field)
        if text is None and field not in record:
            self.bad(
                where, f"has no '{field}' field (keys: {sorted(record)})", "name the field with --text-field"
            )
            return None
        if not isinstance(text, str):
            kind = type(text).__name__
            self.bad(
                where, f"has a '{field}' of type {kind}, not a string", "store each document as a string"
            )
            return None
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                code = ord(text[e.start])
                self.bad(
                    where,
                    f"has a '{field}' holding a lone surrogate (\\u{code:04x} at character {e.start}), "
                    "not Unicode text",
                    "write the document as valid UTF-8",
                )
                return None
        return text

    def _parquet_rows(self) -> Iterator[tuple[int, str]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        field, size = self.text_field, self.path.stat().st_size
        skip_file = "or pass --skip-bad to skip the file"
        row = 0  # the rows read (and prepared) before any error
        try:
            parquet = pq.ParquetFile(self.path)
            schema = parquet.schema_arrow
            if field not in schema.names:
                self.bad(
                    str(self.path),
                    f"has no '{field}' column (columns: {schema.names})",
                    "name the column with --text-field",
                    skip_file,
                )
                return
            kind = schema.field(field).type
            if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
                self.bad(
                    str(self.path),
                    f"has a '{field}' column of {kind}, not strings",
                    "store strings",
                    skip_file,
                )
                return
            rows = parquet.metadata.num_rows
            if rows == 0:
                self._empty("holds no row")
                return
            for batch in parquet.iter_batches(batch_size=1024, columns=[field]):
                for text in batch.column(0).to_pylist():
                    if text is None:
                        self.bad(f"{self.path} row {row}", f"has a null '{field}'", "drop or fill the row")
                    else:
                        yield row, text
                    row += 1
                self.bytes_read = size * row // rows
        except (pa.ArrowException, OSError) as e:
            # a row group that does not decode ends the file where its rows before are prepared already
            # (as a truncated .gz's lines before): the message says what --skip-bad keeps
            detail = " ".join(str(e).split())  # pyarrow's messages span lines; the error is one
            self.bad(
                str(self.path) if row == 0 else f"{self.path} row {row}",
                f"is not a readable parquet file ({detail})",
                "write it with pyarrow or pandas' to_parquet",
                skip_file if row == 0 else f"or pass --skip-bad to keep its {row} rows before",
            )

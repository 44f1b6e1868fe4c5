"""Text result sets (docs/protocol.md 1.4): parsing on the client side, building on the server side."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .packets import ProtocolError, build_eof, is_eof, lenenc_int, lenenc_str, read_lenenc_int, read_lenenc_str

TYPE_VAR_STRING = 0xFD
TYPE_LONGLONG = 0x08
TYPE_LONG = 0x03
TYPE_DOUBLE = 0x05
CHARSET_UTF8 = 33
CHARSET_UTF8MB4 = 45  # utf8mb4_general_ci
CHARSET_BINARY = 63
# column definition flags, and the decimals of a text column (NOT_FIXED_DEC)
NOT_NULL_FLAG = 1
UNSIGNED_FLAG = 32
BINARY_FLAG = 128
NOT_FIXED_DEC = 39


@dataclass(frozen=True)
class ResultSet:
    columns: tuple[str, ...]
    rows: tuple[tuple[str | None, ...], ...]

    def dicts(self) -> list[dict[str, str | None]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


class ResultSetParser:
    """Collects the packets of one text result set; ``add`` returns True when complete."""

    def __init__(self, column_count: int) -> None:
        self._column_count = column_count
        self._columns: list[str] = []
        self._rows: list[tuple[str | None, ...]] = []
        self._phase = "columns"

    def add(self, payload: memoryview) -> bool:
        if self._phase == "columns":
            if len(self._columns) < self._column_count:
                self._columns.append(_column_name(payload))
                return False
            if not is_eof(payload):
                raise ProtocolError("expected EOF after column definitions")
            self._phase = "rows"
            return False
        if is_eof(payload):
            return True
        self._rows.append(_row_values(payload, self._column_count))
        return False

    def result(self) -> ResultSet:
        return ResultSet(tuple(self._columns), tuple(self._rows))


def _column_name(payload: memoryview) -> str:
    pos = 0
    name: bytes | None = b""
    for _ in range(5):  # catalog, schema, table, org_table, name
        name, pos = read_lenenc_str(payload, pos)
    return (name or b"").decode("utf-8", "replace")


def _row_values(payload: memoryview, count: int) -> tuple[str | None, ...]:
    values = []
    pos = 0
    for _ in range(count):
        raw, pos = read_lenenc_str(payload, pos)
        values.append(None if raw is None else raw.decode("utf-8", "replace"))
    return tuple(values)


def column_count(payload: memoryview) -> int:
    count, _ = read_lenenc_int(payload, 0)
    if not count:
        raise ProtocolError("result set with no columns")
    return count


@dataclass(frozen=True)
class ColumnDef:
    """A column definition given whole, as a server describes the columns of a SHOW statement
    (the type, display length, flags and decimals of its Item)."""

    name: str
    column_type: int = TYPE_VAR_STRING
    length: int = 1024
    flags: int = 0
    decimals: int = 0
    charset: int = CHARSET_UTF8
    org_name: str | None = None  # None: the name again


def text_column(name: str, characters: int) -> ColumnDef:
    """Item_empty_string: a NOT NULL text column of ``characters`` characters, described as a
    server describes it to a client whose results are utf8mb4 (the character set the relay's
    greeting announces): 4 bytes a character."""
    return ColumnDef(name, TYPE_VAR_STRING, characters * 4, NOT_NULL_FLAG, NOT_FIXED_DEC, CHARSET_UTF8MB4, "")


def int_column(name: str, digits: int, column_type: int = TYPE_LONGLONG) -> ColumnDef:
    """Item_return_int: a NOT NULL unsigned integer column of ``digits`` display digits."""
    return ColumnDef(name, column_type, digits, NOT_NULL_FLAG | UNSIGNED_FLAG | BINARY_FLAG, 0, CHARSET_BINARY, "")


def build_column(name: str, column_type: int = TYPE_VAR_STRING, charset: int = CHARSET_UTF8,
                 length: int = 1024) -> bytes:
    return build_column_def(ColumnDef(name, column_type, length, charset=charset))


def build_column_def(column: ColumnDef) -> bytes:
    encoded = column.name.encode("utf-8")
    original = encoded if column.org_name is None else column.org_name.encode("utf-8")
    return (lenenc_str(b"def") + lenenc_str(b"") + lenenc_str(b"") + lenenc_str(b"")
            + lenenc_str(encoded) + lenenc_str(original) + b"\x0c"
            + struct.pack("<HIBHB", column.charset, column.length, column.column_type, column.flags, column.decimals)
            + b"\x00\x00")


def build_row(values: tuple[object, ...] | list[object]) -> bytes:
    parts = []
    for value in values:
        if value is None:
            parts.append(b"\xfb")
        else:
            raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
            parts.append(lenenc_str(raw))
    return b"".join(parts)


def _column_type(rows: list[tuple[object, ...]] | tuple[tuple[object, ...], ...], index: int) -> tuple[int, int]:
    """A column of integers is typed as a server types one (clients such as PyMySQL then return
    ints); anything else is text."""
    values = [row[index] for row in rows]
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return TYPE_LONGLONG, CHARSET_BINARY
    return TYPE_VAR_STRING, CHARSET_UTF8


def _declared_type(column_type: int) -> tuple[int, int]:
    """A column typed by its statement (as the server's own column definitions are): numbers are
    binary, text utf8."""
    return column_type, CHARSET_UTF8 if column_type == TYPE_VAR_STRING else CHARSET_BINARY


def build_result_head(columns: list[ColumnDef] | tuple[ColumnDef, ...]) -> list[bytes]:
    """The payloads before the rows of a result set whose columns are given whole: the rows
    (``build_row``) and the closing EOF follow, or an ERR where the server fails half-way."""
    return [lenenc_int(len(columns)), *(build_column_def(column) for column in columns), build_eof()]


def build_result_set(columns: list[str] | tuple[str, ...],
                     rows: list[tuple[object, ...]] | tuple[tuple[object, ...], ...],
                     types: tuple[int, ...] = ()) -> list[bytes]:
    """Payloads of a complete text result set (to be framed with consecutive seq ids).  ``types``:
    each column's type, as the statement defines it; without them a column is typed by its values."""
    payloads = [lenenc_int(len(columns))]
    payloads.extend(build_column(name, *(_declared_type(types[i]) if types else _column_type(rows, i)))
                    for i, name in enumerate(columns))
    payloads.append(build_eof())
    payloads.extend(build_row(row) for row in rows)
    payloads.append(build_eof())
    return payloads

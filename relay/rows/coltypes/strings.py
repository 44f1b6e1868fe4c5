"""Strings and what the binlog stores like them (sans-IO): CHAR, VARCHAR, BINARY, TEXT and
BLOB, ENUM and SET, GEOMETRY, and MySQL 9's VECTOR.

Python values:

=====================  =====================================================================
CHAR/VARCHAR/TEXT      str decoded by the column charset when the table map carries it
                       (``latin1`` is MySQL's cp1252 variant); bytes for the binary charset
                       (63), with BINARY(n) re-padded with NULs to n, as the server shows it.
                       Without charset metadata: str if the bytes are valid UTF-8, else
                       bytes (so TEXT and BLOB are indistinguishable then).
ENUM                   str when the names are known (metadata FULL), else the int index
                       (1-based; 0 is the empty "error" value, returned as '' with names).
SET                    frozenset of str when the names are known, else the int bit mask.
VECTOR (MySQL 9, 242)  tuple of float (each float32 widened exactly); its length is the
                       dimensionality the table map's metadata gives (TableMap.vector_dimensions).
GEOMETRY               bytes as stored: 4-byte little-endian SRID followed by the WKB.
=====================  =====================================================================
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .base import (
    BOTH,
    MARIADB,
    MYSQL,
    R_BYTES,
    R_CODEC,
    R_CONVERT,
    R_UTF8,
    Column,
    ColumnType,
    Compiled,
    Decoder,
    Inline,
    length_prefixed,
    meta_byte,
    need,
    prefix_unpacker,
    prefixed,
    u16,
    uint_decoder,
)
from .charsets import BINARY_CHARSET, charset_codec, text_converter
from .codes import BLOB_TYPES, ENUM, GEOMETRY, SET, STRING, VAR_STRING, VARCHAR, VECTOR


def member_kind(col_type: int, meta: Any) -> int | None:
    """ENUM or SET for a column of either (a STRING column's real type says), else None."""
    if col_type == ENUM or col_type == SET:
        return col_type
    if col_type == STRING and meta[0] in (ENUM, SET):
        return meta[0]
    return None


def _string_meta(b0: int, b1: int) -> tuple[int, int]:
    # CHAR(n) with n*mbmaxlen > 255 needs 10 bits of length; the server hides the two
    # high bits, inverted, in bits 4-5 of the real-type byte (Field_string::do_save_field_metadata).
    if (b0 & 0x30) != 0x30:
        return b0 | 0x30, b1 | (((b0 & 0x30) ^ 0x30) << 4)
    return b0, b1


def _var_text(prefix: int, codec: str) -> Decoder:
    # The common case (utf8mb4 VARCHAR/CHAR/TEXT) with a 1- or 2-byte length prefix,
    # specialised: one call per value, no convert/length_at indirection.
    if prefix == 1:
        def dec1(buf: bytes, pos: int) -> tuple[str, int]:
            end = pos + 1 + buf[pos]
            if end > len(buf):
                need(end, buf)
            return buf[pos + 1:end].decode(codec), end
        return dec1
    if prefix == 2:
        def dec2(buf: bytes, pos: int) -> tuple[str, int]:
            end = pos + 2 + u16(buf, pos)[0]
            if end > len(buf):
                need(end, buf)
            return buf[pos + 2:end].decode(codec), end
        return dec2
    return length_prefixed(prefix, lambda raw: raw.decode(codec))


def _string_decoder(prefix: int, charset: int | None) -> Decoder:
    codec = charset_codec(charset)
    if codec == "binary":
        return length_prefixed(prefix, None)
    if codec is not None and codec != "mysql-latin1":
        return _var_text(prefix, codec)
    return length_prefixed(prefix, text_converter(charset))


def _fixed_string(meta: tuple[int, int], charset: int | None,
                  names: tuple[str, ...] | None) -> Decoder:
    real_type, length = meta
    if real_type == ENUM:
        return _enum(length, names)
    if real_type == SET:
        return _set(length, names)
    dec = _string_decoder(1 if length < 256 else 2, charset)
    if charset != BINARY_CHARSET:
        return dec

    # BINARY(n): the binlog drops trailing NULs (Field_string::pack); the server
    # shows them, so put them back.
    def dec_binary(buf: bytes, pos: int) -> tuple[bytes, int]:
        raw, end = dec(buf, pos)
        return raw.ljust(length, b"\0"), end
    return dec_binary


def _enum(size: int, names: tuple[str, ...] | None) -> Decoder:
    read = prefix_unpacker(size)
    if names is None:
        def dec_index(buf: bytes, pos: int) -> tuple[int, int]:
            if pos + size > len(buf):
                need(pos + size, buf)
            return read(buf, pos), pos + size
        return dec_index
    table = ("",) + tuple(names)

    def dec(buf: bytes, pos: int) -> tuple[str, int]:
        if pos + size > len(buf):
            need(pos + size, buf)
        i = read(buf, pos)
        if i >= len(table):
            raise ValueError(f"ENUM index {i} beyond its {len(names)} values")
        return table[i], pos + size
    return dec


def _set(size: int, names: tuple[str, ...] | None) -> Decoder:
    if names is None:
        return uint_decoder(size, "little")
    members = tuple(names)

    def dec(buf: bytes, pos: int) -> tuple[frozenset[str], int]:
        end = pos + size
        if end > len(buf):
            need(end, buf)
        mask = int.from_bytes(buf[pos:end], "little")
        if mask >> len(members):
            raise ValueError(f"SET mask {mask:#x} beyond its {len(members)} members")
        return frozenset(m for i, m in enumerate(members) if mask >> i & 1), end
    return dec


def _vector(prefix: int) -> Decoder:
    """MySQL 9 VECTOR (Field_vector, a blob of float32): a little-endian length prefix of
    ``prefix`` bytes (the column metadata), then the length / 4 floats, little-endian."""
    length_at = prefix_unpacker(prefix)

    def dec(buf: bytes, pos: int) -> tuple[tuple[float, ...], int]:
        start = pos + prefix
        n = length_at(buf, pos)
        end = start + n
        if end > len(buf):
            need(end, buf)
        if n % 4:
            raise ValueError(f"VECTOR of {n} bytes is not a whole number of float32 values")
        return struct.unpack_from(f"<{n // 4}f", buf, start), end
    return dec


_PREFIX_CODES = {1: "B", 2: "H", 3: "HB", 4: "I"}


def _string_plan(prefix: int, charset: int | None, binary_length: int | None) -> Inline:
    """Length prefix in the fixed head, then the bytes, converted as _string_decoder does."""
    codec = charset_codec(charset)
    consts: dict[str, Any] = {}
    if codec == "binary":
        convert = "{raw}" if binary_length is None else f"{{raw}}.ljust({binary_length}, b'\\0')"
    elif codec == "utf-8":
        convert = "{raw}.decode()"  # the default codec: no codec name to parse, per value
    elif codec is not None and codec != "mysql-latin1":
        convert = f"{{raw}}.decode({codec!r})"
    else:
        consts["text"] = text_converter(charset)
        convert = "{c}text({raw})"

    def render(v: str, t: list[str], c: str) -> list[str]:
        length = t[0] if prefix != 3 else f"({t[0]} | {t[1]} << 16)"
        return [f"end = pos + {length}",
                f"{v} = " + convert.format(raw="buf[pos:end]", c=c),
                "pos = end"]
    return Inline(_PREFIX_CODES[prefix], "" if prefix == 1 else "<", render, consts, True)


def _string_compiled(prefix: int, charset: int | None, binary_length: int | None) -> Compiled:
    """The compiled reader's string: the length prefix, then the bytes converted as
    _string_plan converts them."""
    codec = charset_codec(charset)
    if codec == "binary":
        return (R_BYTES, prefix, binary_length or 0, None)
    if codec == "utf-8":
        return (R_UTF8, prefix, 0, None)
    if codec is not None and codec != "mysql-latin1":
        return (R_CODEC, prefix, 0, codec)
    return (R_CONVERT, prefix, 0, text_converter(charset))


def _char(build: Callable[[int, int | None, int | None], Any]) -> Callable[[Column], Any]:
    """The plan (or compiled kind) of a CHAR or BINARY column, by build(prefix, charset,
    BINARY's length); none for the ENUM and SET that STRING columns also are."""
    def of(col: Column) -> Any:
        real_type, length = col.meta
        if real_type in (ENUM, SET):
            return None
        return build(1 if length < 256 else 2, col.charset, length if col.charset == BINARY_CHARSET else None)
    return of


def _varchar_meta(meta: bytes, pos: int) -> int:
    return meta[pos] | meta[pos + 1] << 8  # the maximum length in bytes


def _string_meta_at(meta: bytes, pos: int) -> tuple[int, int]:
    return _string_meta(meta[pos], meta[pos + 1])


def _fixed_string_decoder(col: Column) -> Decoder:
    return _fixed_string(col.meta, col.charset, col.names)


def _when_prefixed(plan: Callable[[Column], Any]) -> Callable[[Column], Any]:
    """The plan (or compiled kind) where the metadata is a length-prefix size of 1-4 (elsewhere
    the decoder raises)."""
    return lambda col: plan(col) if 1 <= col.meta <= 4 else None


_VARCHAR = ColumnType(lambda col: _string_decoder(1 if col.meta < 256 else 2, col.charset),
                      lambda col: _string_plan(1 if col.meta < 256 else 2, col.charset, None),
                      meta_size=2, read_meta=_varchar_meta, character=BOTH,
                      compiled=lambda col: _string_compiled(1 if col.meta < 256 else 2, col.charset, None))
# metadata: the size of the length prefix
_BLOB = ColumnType(prefixed(lambda col: _string_decoder(col.meta, col.charset)),
                   _when_prefixed(lambda col: _string_plan(col.meta, col.charset, None)),
                   meta_size=1, read_meta=meta_byte, character=BOTH,
                   compiled=_when_prefixed(lambda col: _string_compiled(col.meta, col.charset, None)))
_MEMBERS = ColumnType(_fixed_string_decoder, meta_size=2, read_meta=_string_meta_at)

TYPES: dict[int, ColumnType] = {
    VARCHAR: _VARCHAR,
    VAR_STRING: _VARCHAR,
    STRING: ColumnType(_fixed_string_decoder, _char(_string_plan), meta_size=2, read_meta=_string_meta_at,
                       character=BOTH, compiled=_char(_string_compiled)),
    ENUM: _MEMBERS,
    SET: _MEMBERS,
    **dict.fromkeys(BLOB_TYPES, _BLOB),
    # MariaDB 10.11 lists GEOMETRY columns (binary charset) among character columns; MySQL 9
    # lists VECTOR columns (binary charset) there (vector.binlog: its TEXT column is the
    # exception after a VECTOR, at index 1).
    GEOMETRY: ColumnType(prefixed(lambda col: length_prefixed(col.meta, None)),
                         _when_prefixed(lambda col: _string_plan(col.meta, BINARY_CHARSET, None)),
                         meta_size=1, read_meta=meta_byte, character=MARIADB,
                         compiled=_when_prefixed(lambda col: _string_compiled(col.meta, BINARY_CHARSET, None))),
    VECTOR: ColumnType(prefixed(lambda col: _vector(col.meta)), meta_size=1, read_meta=meta_byte, character=MYSQL),
}
INLINE_GLOBALS: dict[str, Any] = {}

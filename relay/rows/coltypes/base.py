"""What every column-type family shares (sans-IO): the shapes of a decoder, a column, an
inline plan and a registry entry; the Truncated error; length prefixes and lenenc integers."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from ...errors import InputError
from ...protocol.packets import read_lenenc_count
from .codes import type_name

# dec(buf, pos) -> (value, next pos). One is built per column when a table map is parsed, with
# everything that depends on the column already bound, so a value costs one call.
Decoder = Callable[[bytes, int], tuple[Any, int]]

# Which servers a registry entry's metadata rule holds for (TableMap.flavor).
MARIADB = frozenset({"mariadb"})
MYSQL = frozenset({"mysql"})
BOTH = MARIADB | MYSQL


class Column(NamedTuple):
    """One column as the table map describes it: what its decoder and inline plan are built from."""

    type: int
    meta: Any  # its entry of parse_column_meta
    unsigned: bool  # from the SIGNEDNESS metadata; False without it
    charset: int | None  # collation id, when the charset metadata gives one
    names: tuple[str, ...] | None  # ENUM/SET member names (binlog_row_metadata=FULL)


# --------------------------------------------------------------------------- inline plans
#
# Row readers (relay.rows.coltypes.readers) are generated Python source, one straight line per
# column, so that the common types cost no call per value. An Inline says how one column
# reads: its fixed-width head is a few struct codes (readers batch the heads of adjacent
# columns into one Struct.unpack_from), then lines turn the unpacked temporaries into the
# value and, for length-prefixed columns, read the bytes at ``pos`` and move ``pos`` on.
# Each plan computes exactly what the column's decoder returns (same formulas, same
# types); a column without a plan is read by calling its decoder.


class Inline(NamedTuple):
    codes: str  # struct codes of the fixed-width head (no byte-order character)
    endian: str  # "<" or ">", or "" when every code is one byte (fits either order)
    render: Callable[[str, list[str], str], list[str]]  # (value, temporaries, prefix) -> lines
    consts: dict[str, Any]  # per-column objects the lines use, named prefix + key
    reads_on: bool  # whether the lines read buf at pos and advance pos (a variable part)


def inline_same(v: str, t: list[str], c: str) -> list[str]:
    return [f"{v} = {t[0]}"]


# --------------------------------------------------------------------------- compiled readers
#
# When the optional C module relay.rows.coltypes._rowread is built, the row readers do their
# work in C (readers.compiled_reader). A column of a common type is read there by its kind, a
# (kind, size, extra, obj) tuple that its registry entry's ``compiled`` gives: the same value
# as its decoder and its inline plan, by the same formulas; a column without one calls its
# decoder. The kinds are the R_* of _rowread.c, same numbers (tests/unit/test_c_codes.py compares them):
R_CALL = 1  # (R_CALL, 0, 0, decoder): the decoder's value
R_INT = 2  # (R_INT, size, 0, None): a little-endian signed integer of 1, 2, 3, 4 or 8 bytes
R_UINT = 3  # the same, unsigned
R_YEAR = 4  # (R_YEAR, 1, 0, None): one byte, 1900 + n, 0 for 0
R_FLOAT = 5  # (R_FLOAT, 4, 0, None): struct "<f"
R_DOUBLE = 6  # (R_DOUBLE, 8, 0, None): struct "<d"
R_UTF8 = 7  # (R_UTF8, prefix, 0, None): a little-endian length prefix of 1-4 bytes, bytes.decode()
R_BYTES = 8  # (R_BYTES, prefix, n, None): the bytes, padded with NULs to n bytes when n > 0
R_CODEC = 9  # (R_CODEC, prefix, 0, codec): bytes.decode(codec)
R_CONVERT = 10  # (R_CONVERT, prefix, 0, convert): convert(the bytes)
R_DECIMAL = 11  # (R_DECIMAL, precision, scale, (multiply, unit, negative zero, Decimal)): decimal.py's plan
R_DATETIME2 = 12  # (R_DATETIME2, fsp, 0, None): temporal.py's plan (a zero date: the decoder's text)
R_TIMESTAMP2 = 13  # (R_TIMESTAMP2, fsp, 0, the zero timestamp's text): temporal.py's plan
R_DATE = 14  # (R_DATE, 3, 0, None): temporal.py's plan
Compiled = tuple[int, int, int, Any]


def no_meta(meta: bytes, pos: int) -> Any:
    return 0


def meta_byte(meta: bytes, pos: int) -> int:
    return meta[pos]


class ColumnType(NamedTuple):
    """What the row decoder knows of one type code: an entry of the registry."""

    decoder: Callable[[Column], Decoder]  # the column's decoder; may raise on bad metadata
    plan: Callable[[Column], Inline | None] | None = None  # its inline reading; None: call the decoder
    meta_size: int = 0  # bytes the type takes in the table map's metadata block
    read_meta: Callable[[bytes, int], Any] = no_meta  # (block, pos) -> the column's metadata entry
    signedness: frozenset[str] = frozenset()  # flavours whose SIGNEDNESS metadata has a bit for it
    character: frozenset[str] = frozenset()  # flavours whose charset metadata counts it
    compiled: Callable[[Column], Compiled | None] | None = None  # its kind in the compiled reader; None: a call


class Truncated(InputError):
    """A value runs past the end of the row data."""


def need(end: int, buf: bytes) -> None:
    raise Truncated(f"value needs bytes up to offset {end}, data ends at {len(buf)}")


u16 = struct.Struct("<H").unpack_from
u24 = struct.Struct("<HB").unpack_from  # (lo16, hi8): no 3-byte struct code exists
u32 = struct.Struct("<I").unpack_from


def prefix_unpacker(size: int) -> Callable[[bytes, int], int]:
    """Reads a little-endian length prefix of 1-4 bytes."""
    if size == 1:
        return lambda buf, pos: buf[pos]
    if size == 2:
        return lambda buf, pos: u16(buf, pos)[0]
    if size == 3:
        def read24(buf: bytes, pos: int) -> int:
            lo, hi = u24(buf, pos)
            return lo | hi << 16
        return read24
    if size == 4:
        return lambda buf, pos: u32(buf, pos)[0]
    raise ValueError(f"bad length-prefix size {size}")


def length_prefixed(prefix: int, convert: Callable[[bytes], Any] | None) -> Decoder:
    """Length-prefixed value: prefix bytes of length, then that many bytes."""
    if prefix == 1 and convert is None:
        def dec1(buf: bytes, pos: int) -> tuple[Any, int]:
            end = pos + 1 + buf[pos]
            if end > len(buf):
                need(end, buf)
            return buf[pos + 1:end], end
        return dec1
    length_at = prefix_unpacker(prefix)

    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        start = pos + prefix
        end = start + length_at(buf, pos)
        if end > len(buf):
            need(end, buf)
        raw = buf[start:end]
        return (raw if convert is None else convert(raw)), end
    return dec


def uint_decoder(size: int, byteorder: Literal["big", "little"]) -> Decoder:
    """An unsigned integer of size bytes (BIT: big-endian, a SET's bit mask: little)."""
    def dec(buf: bytes, pos: int) -> tuple[int, int]:
        end = pos + size
        if end > len(buf):
            need(end, buf)
        return int.from_bytes(buf[pos:end], byteorder), end
    return dec


def prefixed(build: Callable[[Column], Decoder]) -> Callable[[Column], Decoder]:
    """The decoder factory of a type whose metadata is the size of its length prefix."""
    def make(col: Column) -> Decoder:
        if not 1 <= col.meta <= 4:
            return unsupported(col.type, f"length-prefix size {col.meta}")
        return build(col)
    return make


def unsupported(col_type: int, why: str) -> Decoder:
    """A decoder that fails when used: a table map with such a column still parses."""
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        raise ValueError(f"cannot decode {type_name(col_type)}: {why}")
    return dec


def not_supported(col: Column) -> Decoder:
    """The decoder factory of a type nobody decodes yet."""
    return unsupported(col.type, "type not supported")


def lenenc_at(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, next pos) of the protocol's length-encoded integer at pos, read by the protocol's
    one reader; ValueError when it is malformed or the NULL marker."""
    return read_lenenc_count(buf, pos, ValueError)

"""Integers, floats, BIT and YEAR (sans-IO).

Python values:

=====================  =====================================================================
TINY..LONGLONG         int. Unsigned only if the table map's optional metadata (SIGNEDNESS,
                       ``binlog_row_metadata=MINIMAL|FULL``) says so; without it every
                       integer is read as SIGNED (the binlog itself does not say).
FLOAT / DOUBLE         float (FLOAT widened exactly from its 4 bytes).
BIT                    int.
YEAR                   int: 1900 + n, and 0 for the zero year ``0000``.
=====================  =====================================================================
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .base import (
    BOTH,
    MARIADB,
    R_DOUBLE,
    R_FLOAT,
    R_INT,
    R_UINT,
    R_YEAR,
    Column,
    ColumnType,
    Decoder,
    Inline,
    inline_same,
    meta_byte,
    u24,
    uint_decoder,
)
from .codes import BIT, DOUBLE, FLOAT, INT24, LONG, LONGLONG, SHORT, TINY, YEAR

_s24 = struct.Struct("<Hb").unpack_from  # (lo16, signed hi8)


def _fixed(unpack: Callable[[bytes, int], tuple], size: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + size
    return dec


def _int24(signed: bool) -> Decoder:
    unpack = _s24 if signed else u24

    def dec(buf: bytes, pos: int) -> tuple[int, int]:
        lo, hi = unpack(buf, pos)
        return lo | hi << 16, pos + 3
    return dec


def _by_struct(code: str, size: int) -> Decoder:
    return _fixed(struct.Struct("<" + code).unpack_from, size)


def _integer(codes: str, size: int) -> ColumnType:
    """A little-endian integer; codes: its struct codes, signed then unsigned."""
    decoders = (_by_struct(codes[0], size), _by_struct(codes[1], size))

    def plan(col: Column) -> Inline:
        code = codes[col.unsigned]
        return Inline(code, "" if code in "bB" else "<", inline_same, {}, False)
    return ColumnType(lambda col: decoders[col.unsigned], plan, signedness=BOTH, compiled=_compiled_int(size))


def _compiled_int(size: int) -> Callable[[Column], tuple[int, int, int, None]]:
    return lambda col: (R_UINT if col.unsigned else R_INT, size, 0, None)


def _float(code: str, size: int) -> ColumnType:
    """FLOAT or DOUBLE; their metadata byte is the pack length, which the type fixes anyway."""
    decoder = _by_struct(code, size)
    compiled = (R_FLOAT if size == 4 else R_DOUBLE, size, 0, None)
    return ColumnType(lambda col: decoder, lambda col: Inline(code, "<", inline_same, {}, False),
                      meta_size=1, read_meta=meta_byte, signedness=BOTH, compiled=lambda col: compiled)


def _int24_plan(col: Column) -> Inline:
    return Inline("HB" if col.unsigned else "Hb", "<", lambda v, t, c: [f"{v} = {t[0]} | {t[1]} << 16"],
                  {}, False)


def _year(buf: bytes, pos: int) -> tuple[int, int]:
    y = buf[pos]
    return (y + 1900 if y else 0), pos + 1


def _year_plan(col: Column) -> Inline:
    return Inline("B", "", lambda v, t, c: [f"{v} = {t[0]} + 1900 if {t[0]} else 0"], {}, False)


def _bit_meta(meta: bytes, pos: int) -> int:
    return meta[pos + 1] * 8 + meta[pos]  # bytes*8 + leftover bits


_INT24 = (_int24(True), _int24(False))  # by unsigned

TYPES: dict[int, ColumnType] = {
    TINY: _integer("bB", 1),
    SHORT: _integer("hH", 2),
    INT24: ColumnType(lambda col: _INT24[col.unsigned], _int24_plan, signedness=BOTH, compiled=_compiled_int(3)),
    LONG: _integer("iI", 4),
    LONGLONG: _integer("qQ", 8),
    FLOAT: _float("f", 4),
    DOUBLE: _float("d", 8),
    # MariaDB's SIGNEDNESS counts every Field_num, YEAR included (verified on 10.11);
    # MySQL's is_numeric_type() leaves YEAR out.
    YEAR: ColumnType(lambda col: _year, _year_plan, signedness=MARIADB, compiled=lambda col: (R_YEAR, 1, 0, None)),
    BIT: ColumnType(lambda col: uint_decoder((col.meta + 7) // 8, "big"), meta_size=2, read_meta=_bit_meta),
}
INLINE_GLOBALS: dict[str, Any] = {}

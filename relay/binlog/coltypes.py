"""Column types of row events and their value decoders (sans-IO).

A *decoder* is ``dec(buf: bytes, pos: int) -> (value, next_pos)``. One is built per
column when a table map is parsed, with everything that depends on the column
(metadata, signedness, charset, ENUM/SET names) already bound, so decoding a value
costs one call, one ``Struct.unpack_from`` or slice, and no lookups on the type.

Python values (the choices a caller must know about):

=====================  =====================================================================
TINY..LONGLONG         int. Unsigned only if the table map's optional metadata (SIGNEDNESS,
                       ``binlog_row_metadata=MINIMAL|FULL``) says so; without it every
                       integer is read as SIGNED (the binlog itself does not say).
NEWDECIMAL             decimal.Decimal with exactly ``scale`` fractional digits.
FLOAT / DOUBLE         float (FLOAT widened exactly from its 4 bytes).
BIT                    int.
YEAR                   int: 1900 + n, and 0 for the zero year ``0000``.
DATE                   datetime.date; a zero date or one with zero parts (``0000-00-00``,
                       ``2024-00-15``) is returned as str in the server's text form.
DATETIME(2)            naive datetime.datetime; zero/invalid as str, e.g.
                       ``'0000-00-00 00:00:00.000'`` (as many fraction digits as the fsp).
TIMESTAMP(2)           datetime.datetime, tz-aware in UTC (the binlog stores epoch seconds);
                       the zero timestamp as str like DATETIME.
TIME(2)                datetime.timedelta, negative and > 24 h allowed.
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
JSON (MySQL, 245)      the decoded Python value (dict/list/str/int/float/bool/None ...).
                       MariaDB stores JSON as LONGTEXT, so there it arrives as a str.
GEOMETRY               bytes as stored: 4-byte little-endian SRID followed by the WKB.
NULL type              None.
=====================  =====================================================================

Old-style TIME/DATETIME/TIMESTAMP (types 11, 12, 7) are decoded in their classic
fsp-0 formats. MariaDB's own pre-10.1 "hires" variants of those types (created with
``mysql56_temporal_format=OFF`` and fsp > 0) carry no metadata in the binlog, so their
size is unknowable from the binlog alone; they are not supported.
"""

from __future__ import annotations

import codecs
import copy
import datetime as _dt
import json
import re
import decimal
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, NamedTuple

from ..protocol.packets import ProtocolError, read_lenenc_int

Decoder = Callable[[bytes, int], tuple[Any, int]]

# enum_field_types (include/mysql_com.h / field_types.h)
DECIMAL = 0
TINY = 1
SHORT = 2
LONG = 3
FLOAT = 4
DOUBLE = 5
NULL = 6
TIMESTAMP = 7
LONGLONG = 8
INT24 = 9
DATE = 10
TIME = 11
DATETIME = 12
YEAR = 13
NEWDATE = 14
VARCHAR = 15
BIT = 16
TIMESTAMP2 = 17
DATETIME2 = 18
TIME2 = 19
VECTOR = 242  # MySQL 9.0+
JSON = 245
NEWDECIMAL = 246
ENUM = 247
SET = 248
TINY_BLOB = 249
MEDIUM_BLOB = 250
LONG_BLOB = 251
BLOB = 252
VAR_STRING = 253
STRING = 254
GEOMETRY = 255

TYPE_NAMES: dict[int, str] = {
    DECIMAL: "DECIMAL", TINY: "TINY", SHORT: "SHORT", LONG: "LONG", FLOAT: "FLOAT",
    DOUBLE: "DOUBLE", NULL: "NULL", TIMESTAMP: "TIMESTAMP", LONGLONG: "LONGLONG",
    INT24: "INT24", DATE: "DATE", TIME: "TIME", DATETIME: "DATETIME", YEAR: "YEAR",
    NEWDATE: "NEWDATE", VARCHAR: "VARCHAR", BIT: "BIT", TIMESTAMP2: "TIMESTAMP2",
    DATETIME2: "DATETIME2", TIME2: "TIME2", VECTOR: "VECTOR", JSON: "JSON", NEWDECIMAL: "NEWDECIMAL",
    ENUM: "ENUM", SET: "SET", TINY_BLOB: "TINY_BLOB", MEDIUM_BLOB: "MEDIUM_BLOB",
    LONG_BLOB: "LONG_BLOB", BLOB: "BLOB", VAR_STRING: "VAR_STRING", STRING: "STRING",
    GEOMETRY: "GEOMETRY",
}

BLOB_TYPES = frozenset({TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB})
# Types the SIGNEDNESS metadata has a bit for. MariaDB counts every Field_num, YEAR
# included (verified on 10.11); MySQL's is_numeric_type() leaves YEAR out.
NUMERIC_TYPES_MARIADB = frozenset(
    {DECIMAL, TINY, SHORT, INT24, LONG, LONGLONG, FLOAT, DOUBLE, NEWDECIMAL, YEAR})
NUMERIC_TYPES_MYSQL = NUMERIC_TYPES_MARIADB - {YEAR}

BINARY_CHARSET = 63


def type_name(col_type: int) -> str:
    return TYPE_NAMES.get(col_type, f"type {col_type}")


# --------------------------------------------------------------------------- metadata


def parse_column_meta(types: tuple[int, ...], meta: bytes) -> tuple[Any, ...]:
    """Split the table map's metadata block into one decoded entry per column.

    int for most types (FLOAT/DOUBLE pack length, BLOB/JSON/GEOMETRY length-prefix
    size, VARCHAR max byte length, temporal2 fsp, BIT total bits, 0 if none);
    (precision, scale) for NEWDECIMAL; (real_type, byte_length) for STRING/ENUM/SET.
    Raises ValueError/IndexError on a short block (the caller wraps it).
    """
    out: list[Any] = []
    pos = 0
    for t in types:
        if t in _META1:
            out.append(meta[pos])
            pos += 1
        elif t == VARCHAR or t == VAR_STRING:
            out.append(meta[pos] | meta[pos + 1] << 8)
            pos += 2
        elif t == NEWDECIMAL:
            out.append((meta[pos], meta[pos + 1]))
            pos += 2
        elif t == BIT:
            out.append(meta[pos + 1] * 8 + meta[pos])  # bytes*8 + leftover bits
            pos += 2
        elif t == STRING or t == ENUM or t == SET:
            out.append(_string_meta(meta[pos], meta[pos + 1]))
            pos += 2
        else:
            out.append(0)
    if pos != len(meta):
        raise ValueError(f"column metadata is {len(meta)} bytes, types need {pos}")
    return tuple(out)


_META1 = frozenset({FLOAT, DOUBLE, TIMESTAMP2, DATETIME2, TIME2, JSON, GEOMETRY, VECTOR}) | BLOB_TYPES


def _string_meta(b0: int, b1: int) -> tuple[int, int]:
    # CHAR(n) with n*mbmaxlen > 255 needs 10 bits of length; the server hides the two
    # high bits, inverted, in bits 4-5 of the real-type byte (Field_string::do_save_field_metadata).
    if (b0 & 0x30) != 0x30:
        return b0 | 0x30, b1 | (((b0 & 0x30) ^ 0x30) << 4)
    return b0, b1


# --------------------------------------------------------------------------- charsets


def _mysql_latin1_table() -> str:
    # MySQL's latin1 is cp1252, except that the 5 bytes cp1252 leaves undefined map to
    # the C1 control characters of the same value (strings/ctype-latin1.c).
    chars = []
    for b in range(256):
        try:
            chars.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(b))
    return "".join(chars)


_LATIN1_TABLE = _mysql_latin1_table()


def decode_mysql_latin1(raw: bytes) -> str:
    return codecs.charmap_decode(raw, "strict", _LATIN1_TABLE)[0]


def _charset_ids() -> dict[int, str]:
    # Collation id -> Python codec, for MySQL/MariaDB built-in collations.
    groups: dict[str, tuple[int, ...]] = {
        "utf-8": (33, 83, 45, 46, 76, *range(192, 216), 223, *range(224, 248),
                  *range(255, 324), 576, 577, 578, 608, 609, 610),
        "mysql-latin1": (5, 8, 15, 31, 47, 48, 49, 94),
        "ascii": (11, 65),
        "iso8859-2": (2, 9, 21, 27, 77),
        "iso8859-7": (25, 70),
        "iso8859-8": (16, 71),
        "iso8859-9": (30, 78),
        "iso8859-13": (20, 41, 42, 79),
        "koi8-r": (7, 74),
        "koi8-u": (22, 75),
        "cp850": (4, 80),
        "cp852": (40, 81),
        "cp866": (36, 68),
        "cp1250": (26, 34, 44, 66, 99),
        "cp1251": (14, 23, 50, 51, 52),
        "cp1256": (57, 67),
        "cp1257": (29, 58, 59),
        "mac-roman": (39, 53),
        "tis-620": (18, 89),
        "big5": (1, 84),
        "gbk": (28, 87),
        "gb2312": (24, 86),
        "gb18030": (248, 249, 250),
        "shift_jis": (13, 88),
        "cp932": (95, 96),
        "euc-jp": (12, 91),
        "euc_jis_2004": (97, 98),
        "euc-kr": (19, 85),
        "utf-16-be": (35, 90, *range(128, 152), 159, 54, 55, *range(101, 125),
                      640, 641, 642, 672, 673, 674),
        "utf-16-le": (56, 62),
        "utf-32-be": (60, 61, *range(160, 184), 736, 737, 738),
    }
    ids = {cid: codec for codec, cids in groups.items() for cid in cids}
    # MariaDB: NO PAD collations are the PAD ones + 1024; UCA-14.0.0 ones live at
    # 2048 + 256*k for utf8mb3, utf8mb4, ucs2, utf16, utf32 (ctype-uca.c).
    for cid, codec in list(ids.items()):
        if cid < 256:
            ids.setdefault(cid + 1024, codec)
    for k, codec in enumerate(("utf-8", "utf-8", "utf-16-be", "utf-16-be", "utf-32-be")):
        for cid in range(2048 + 256 * k, 2048 + 256 * (k + 1)):
            ids[cid] = codec
    return ids


_CHARSET_CODECS = _charset_ids()


def charset_codec(charset: int | None) -> str | None:
    """Python codec for a collation id; "binary" for 63; None when unknown."""
    if charset is None:
        return None
    if charset == BINARY_CHARSET:
        return "binary"
    return _CHARSET_CODECS.get(charset)


def text_converter(charset: int | None) -> Callable[[bytes], Any]:
    """bytes -> value for a character column (see the module docstring)."""
    codec = charset_codec(charset)
    if codec == "binary":
        return bytes
    if codec == "mysql-latin1":
        return decode_mysql_latin1
    if codec is None:
        return _utf8_or_bytes
    return lambda raw: raw.decode(codec)


def _utf8_or_bytes(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


# --------------------------------------------------------------------------- helpers


class Truncated(ValueError):
    """A value runs past the end of the row data."""


def _need(end: int, buf: bytes) -> None:
    raise Truncated(f"value needs bytes up to offset {end}, data ends at {len(buf)}")


_u8 = struct.Struct("<B").unpack_from
_s8 = struct.Struct("<b").unpack_from
_u16 = struct.Struct("<H").unpack_from
_s16 = struct.Struct("<h").unpack_from
_u32 = struct.Struct("<I").unpack_from
_s32 = struct.Struct("<i").unpack_from
_u64 = struct.Struct("<Q").unpack_from
_s64 = struct.Struct("<q").unpack_from
_f32 = struct.Struct("<f").unpack_from
_f64 = struct.Struct("<d").unpack_from
_u24 = struct.Struct("<HB").unpack_from  # (lo16, hi8): no 3-byte struct code exists
_s24 = struct.Struct("<Hb").unpack_from


def _fixed(unpack: Callable[[bytes, int], tuple], size: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + size
    return dec


def _int24(signed: bool) -> Decoder:
    unpack = _s24 if signed else _u24

    def dec(buf: bytes, pos: int) -> tuple[int, int]:
        lo, hi = unpack(buf, pos)
        return lo | hi << 16, pos + 3
    return dec


def _prefix_unpacker(size: int) -> Callable[[bytes, int], int]:
    """Reads a little-endian length prefix of 1-4 bytes."""
    if size == 1:
        return lambda buf, pos: buf[pos]
    if size == 2:
        return lambda buf, pos: _u16(buf, pos)[0]
    if size == 3:
        def u24(buf: bytes, pos: int) -> int:
            lo, hi = _u24(buf, pos)
            return lo | hi << 16
        return u24
    if size == 4:
        return lambda buf, pos: _u32(buf, pos)[0]
    raise ValueError(f"bad length-prefix size {size}")


def _var(prefix: int, convert: Callable[[bytes], Any] | None) -> Decoder:
    """Length-prefixed value: prefix bytes of length, then that many bytes."""
    if prefix == 1 and convert is None:
        def dec1(buf: bytes, pos: int) -> tuple[Any, int]:
            end = pos + 1 + buf[pos]
            if end > len(buf):
                _need(end, buf)
            return buf[pos + 1:end], end
        return dec1
    length_at = _prefix_unpacker(prefix)

    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        start = pos + prefix
        end = start + length_at(buf, pos)
        if end > len(buf):
            _need(end, buf)
        raw = buf[start:end]
        return (raw if convert is None else convert(raw)), end
    return dec


def _var_text(prefix: int, codec: str) -> Decoder:
    # The common case (utf8mb4 VARCHAR/CHAR/TEXT), specialised for 1- and 2-byte length
    # prefixes: one call per value, no convert/length_at indirection.
    if prefix == 1:
        def dec1(buf: bytes, pos: int) -> tuple[str, int]:
            end = pos + 1 + buf[pos]
            if end > len(buf):
                _need(end, buf)
            return buf[pos + 1:end].decode(codec), end
        return dec1
    if prefix == 2:
        def dec2(buf: bytes, pos: int) -> tuple[str, int]:
            end = pos + 2 + _u16(buf, pos)[0]
            if end > len(buf):
                _need(end, buf)
            return buf[pos + 2:end].decode(codec), end
        return dec2
    length_at = _prefix_unpacker(prefix)

    def dec(buf: bytes, pos: int) -> tuple[str, int]:
        start = pos + prefix
        end = start + length_at(buf, pos)
        if end > len(buf):
            _need(end, buf)
        return buf[start:end].decode(codec), end
    return dec


def _string_decoder(prefix: int, charset: int | None) -> Decoder:
    codec = charset_codec(charset)
    if codec == "binary":
        return _var(prefix, None)
    if codec is not None and codec != "mysql-latin1":
        return _var_text(prefix, codec)
    return _var(prefix, text_converter(charset))


# --------------------------------------------------------------------------- numbers

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_size(precision: int, scale: int) -> int:
    """Bytes of a NEWDECIMAL(precision, scale) in binary form (decimal_bin_size)."""
    intg = precision - scale
    return (intg // 9 * 4 + _DIG2BYTES[intg % 9]
            + scale // 9 * 4 + _DIG2BYTES[scale % 9])


def _decimal_groups(precision: int, scale: int) -> tuple[tuple[int, int], ...]:
    # (bytes, digits) per group, most significant first: a partial leading integer
    # group, full 9-digit groups, then fractional full groups and a partial last one.
    intg = precision - scale
    groups = []
    if intg % 9:
        groups.append((_DIG2BYTES[intg % 9], intg % 9))
    groups += [(4, 9)] * (intg // 9)
    groups += [(4, 9)] * (scale // 9)
    if scale % 9:
        groups.append((_DIG2BYTES[scale % 9], scale % 9))
    return tuple(groups)


def decode_decimal(raw: bytes, precision: int, scale: int) -> Decimal:
    """MySQL binary DECIMAL (strings/decimal.cc, decimal2bin) -> Decimal.

    Big-endian groups of 9 decimal digits in 4 bytes, partial groups in fewer; the
    sign bit (MSB of the first byte) is set for positive numbers, and a negative
    number is stored with every bit inverted.
    """
    if len(raw) != decimal_size(precision, scale):
        raise ValueError(f"DECIMAL({precision},{scale}) needs {decimal_size(precision, scale)} "
                         f"bytes, got {len(raw)}")
    return _decimal_reader(precision, scale)(raw)


def _decimal_reader(precision: int, scale: int) -> Callable[[bytes], Decimal]:
    """Precomputes the group layout of one DECIMAL(precision, scale)."""
    size = decimal_size(precision, scale)
    if size == 0:
        zero = Decimal(0).scaleb(-scale)
        return lambda raw: zero
    intg = precision - scale
    int_bytes = intg // 9 * 4 + _DIG2BYTES[intg % 9]
    plan = []  # (shift, mask, 10**digits, is_integer_part)
    shift = size * 8
    for nbytes, ndigits in _decimal_groups(precision, scale):
        shift -= nbytes * 8
        plan.append((shift, (1 << nbytes * 8) - 1, 10 ** ndigits, shift >= (size - int_bytes) * 8))
    sign_bit = 1 << (size * 8 - 1)
    flip_negative = ((1 << size * 8) - 1) ^ sign_bit
    frac_fmt = f"0{scale}d"

    def read(raw: bytes) -> Decimal:
        v = int.from_bytes(raw, "big")
        if v & sign_bit:
            v ^= sign_bit
            sign = ""
        else:
            v ^= flip_negative  # inverted bits; the sign bit was 0 and stays 0
            sign = "-"
        int_digits = frac_digits = 0
        for sh, mask, limit, is_int in plan:
            g = (v >> sh) & mask
            if g >= limit:
                raise ValueError(f"corrupt DECIMAL({precision},{scale}) digit group {g}")
            if is_int:
                int_digits = int_digits * limit + g
            else:
                frac_digits = frac_digits * limit + g
        if scale:
            return Decimal(f"{sign}{int_digits}.{frac_digits:{frac_fmt}}")
        return Decimal(f"{sign}{int_digits}")
    return read


def _decimal(meta: tuple[int, int]) -> Decoder:
    precision, scale = meta
    if scale > precision or precision > 65 or scale > 38:
        raise ValueError(f"bad DECIMAL metadata ({precision},{scale})")
    size = decimal_size(precision, scale)
    read = _decimal_reader(precision, scale)

    def dec(buf: bytes, pos: int) -> tuple[Decimal, int]:
        end = pos + size
        if end > len(buf):
            _need(end, buf)
        return read(buf[pos:end]), end
    return dec


def _bit(nbits: int) -> Decoder:
    size = (nbits + 7) // 8

    def dec(buf: bytes, pos: int) -> tuple[int, int]:
        end = pos + size
        if end > len(buf):
            _need(end, buf)
        return int.from_bytes(buf[pos:end], "big"), end
    return dec


def _year(buf: bytes, pos: int) -> tuple[int, int]:
    y = buf[pos]
    return (y + 1900 if y else 0), pos + 1


# --------------------------------------------------------------------------- temporal

UTC = _dt.timezone.utc
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_timedelta = _dt.timedelta
_datetime = _dt.datetime


def _frac_text(us: int, fsp: int) -> str:
    return "." + f"{us:06d}"[:fsp] if fsp else ""


def _datetime_or_text(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int,
                      fsp: int) -> _dt.datetime | str:
    try:
        return _datetime(y, mo, d, h, mi, s, us)
    except ValueError:
        # Zero dates, zero parts, or values Python cannot hold: the server's text form.
        return f"{_date_text(y, mo, d)} {h:02d}:{mi:02d}:{s:02d}" + _frac_text(us, fsp)


def _date(buf: bytes, pos: int) -> tuple[_dt.date | str, int]:
    lo, hi = _u24(buf, pos)
    v = lo | hi << 16
    d, mo, y = v & 31, (v >> 5) & 15, v >> 9
    try:
        return _dt.date(y, mo, d), pos + 3
    except ValueError:
        return _date_text(y, mo, d), pos + 3


def _date_text(y: int, mo: int, d: int) -> str:
    """A date Python cannot hold (zero dates, day 0), as MariaDB prints it."""
    return f"{y:04d}-{mo:02d}-{d:02d}"


def _time_from_hms(negative: bool, h: int, mi: int, s: int, us: int) -> _dt.timedelta:
    td = _timedelta(0, h * 3600 + mi * 60 + s, us)
    return -td if negative else td


def _time_old(buf: bytes, pos: int) -> tuple[_dt.timedelta, int]:
    # Classic TIME: signed 3-byte integer HHMMSS (Field_time::store_TIME).
    lo, hi = _s24(buf, pos)
    v = lo | hi << 16
    a = -v if v < 0 else v
    return _time_from_hms(v < 0, a // 10000, a // 100 % 100, a % 100, 0), pos + 3


def _datetime_old(buf: bytes, pos: int) -> tuple[_dt.datetime | str, int]:
    # Classic DATETIME: 8-byte integer YYYYMMDDhhmmss.
    v = _u64(buf, pos)[0]
    d, t = divmod(v, 1000000)
    return (_datetime_or_text(d // 10000, d // 100 % 100, d % 100,
                              t // 10000, t // 100 % 100, t % 100, 0, 0), pos + 8)


_ZERO_DATETIME = "0000-00-00 00:00:00"


def _timestamp_old(buf: bytes, pos: int) -> tuple[_dt.datetime | str, int]:
    secs = _u32(buf, pos)[0]
    return (_EPOCH + _timedelta(seconds=secs) if secs else _ZERO_DATETIME), pos + 4


def _packed_time(packed: int) -> _dt.timedelta:
    # MySQL "packed" time: (hour<<12 | minute<<6 | second) << 24 | microseconds, signed.
    negative = packed < 0
    if negative:
        packed = -packed
    hms = packed >> 24
    return _time_from_hms(negative, (hms >> 12) & 0x3FF, (hms >> 6) & 0x3F, hms & 0x3F,
                          packed & 0xFFFFFF)


_TIMEF_INT_OFS = 0x800000
_TIMEF_OFS = 0x800000000000


def _time2(fsp: int) -> Decoder:
    """TIME2 (compat56.cc, my_time_packed_from_binary): big-endian, offset-biased."""
    if fsp == 0:
        unpack0 = struct.Struct(">HB").unpack_from

        def dec0(buf: bytes, pos: int) -> tuple[_dt.timedelta, int]:
            hi, lo = unpack0(buf, pos)
            return _packed_time(((hi << 8 | lo) - _TIMEF_INT_OFS) << 24), pos + 3
        return dec0
    if fsp <= 4:
        one_byte = fsp <= 2
        unpack = struct.Struct(">HBB" if one_byte else ">HBH").unpack_from
        wrap, unit, size = (0x100, 10000, 4) if one_byte else (0x10000, 100, 5)

        def dec(buf: bytes, pos: int) -> tuple[_dt.timedelta, int]:
            hi, lo, frac = unpack(buf, pos)
            intpart = (hi << 8 | lo) - _TIMEF_INT_OFS
            if intpart < 0 and frac:
                # Negative values keep a negative fraction: borrow one second.
                intpart += 1
                frac -= wrap
            return _packed_time((intpart << 24) + frac * unit), pos + size
        return dec
    unpack6 = struct.Struct(">HI").unpack_from

    def dec6(buf: bytes, pos: int) -> tuple[_dt.timedelta, int]:
        hi, lo = unpack6(buf, pos)
        return _packed_time((hi << 32 | lo) - _TIMEF_OFS), pos + 6
    return dec6


def _frac_reader(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """(size, read) for the big-endian fraction of DATETIME2/TIMESTAMP2, in microseconds."""
    if fsp == 0:
        return 0, lambda buf, pos: 0
    if fsp <= 2:
        return 1, lambda buf, pos: buf[pos] * 10000
    if fsp <= 4:
        be16 = struct.Struct(">H").unpack_from
        return 2, lambda buf, pos: be16(buf, pos)[0] * 100
    be24 = struct.Struct(">BH").unpack_from

    def read3(buf: bytes, pos: int) -> int:
        hi, lo = be24(buf, pos)
        return hi << 16 | lo
    return 3, read3


_DATETIMEF_INT_OFS = 0x8000000000


def _datetime2(fsp: int) -> Decoder:
    """DATETIME2: 5 bytes big-endian, 1 sign bit, 17 bits year*13+month, then
    day(5) hour(5) minute(6) second(6); then 0-3 fraction bytes."""
    head = struct.Struct(">IB").unpack_from
    fsize, frac = _frac_reader(fsp)
    size = 5 + fsize

    def dec(buf: bytes, pos: int) -> tuple[_dt.datetime | str, int]:
        hi, lo = head(buf, pos)
        v = (hi << 8 | lo) - _DATETIMEF_INT_OFS
        us = frac(buf, pos + 5) if fsize else 0
        ymd = v >> 17
        ym = ymd >> 5
        hms = v & 0x1FFFF
        return (_datetime_or_text(ym // 13, ym % 13, ymd & 31, hms >> 12,
                                  (hms >> 6) & 0x3F, hms & 0x3F, us, fsp), pos + size)
    return dec


def _timestamp2(fsp: int) -> Decoder:
    """TIMESTAMP2: 4-byte big-endian epoch seconds, then 0-3 fraction bytes."""
    head = struct.Struct(">I").unpack_from
    fsize, frac = _frac_reader(fsp)
    size = 4 + fsize
    zero = _ZERO_DATETIME + _frac_text(0, fsp)

    def dec(buf: bytes, pos: int) -> tuple[_dt.datetime | str, int]:
        secs = head(buf, pos)[0]
        us = frac(buf, pos + 4) if fsize else 0
        if secs == 0:
            # Epoch second 0 is the zero timestamp (TIMESTAMP's range starts at 1 s).
            if pos + size > len(buf):
                _need(pos + size, buf)
            return zero, pos + size
        return _EPOCH + _timedelta(0, secs, us), pos + size
    return dec


# --------------------------------------------------------------------------- ENUM / SET


def _enum(size: int, names: tuple[str, ...] | None) -> Decoder:
    read = _prefix_unpacker(size)
    if names is None:
        def dec_index(buf: bytes, pos: int) -> tuple[int, int]:
            if pos + size > len(buf):
                _need(pos + size, buf)
            return read(buf, pos), pos + size
        return dec_index
    table = ("",) + tuple(names)

    def dec(buf: bytes, pos: int) -> tuple[str, int]:
        if pos + size > len(buf):
            _need(pos + size, buf)
        i = read(buf, pos)
        if i >= len(table):
            raise ValueError(f"ENUM index {i} beyond its {len(names)} values")
        return table[i], pos + size
    return dec


def _set(size: int, names: tuple[str, ...] | None) -> Decoder:
    if names is None:
        def dec_mask(buf: bytes, pos: int) -> tuple[int, int]:
            end = pos + size
            if end > len(buf):
                _need(end, buf)
            return int.from_bytes(buf[pos:end], "little"), end
        return dec_mask
    members = tuple(names)

    def dec(buf: bytes, pos: int) -> tuple[frozenset[str], int]:
        end = pos + size
        if end > len(buf):
            _need(end, buf)
        mask = int.from_bytes(buf[pos:end], "little")
        if mask >> len(members):
            raise ValueError(f"SET mask {mask:#x} beyond its {len(members)} members")
        return frozenset(m for i, m in enumerate(members) if mask >> i & 1), end
    return dec


# --------------------------------------------------------------------------- MySQL JSON

_JSON_INLINE_SMALL = frozenset({4, 5, 6})  # literal, int16, uint16
_JSON_INLINE_LARGE = frozenset({4, 5, 6, 7, 8})  # + int32, uint32
_J_SCALARS = {
    5: struct.Struct("<h"), 6: struct.Struct("<H"), 7: struct.Struct("<i"),
    8: struct.Struct("<I"), 9: struct.Struct("<q"), 10: struct.Struct("<Q"),
    11: struct.Struct("<d"),
}


def decode_mysql_json(data: bytes) -> Any:
    """MySQL's binary JSON (sql-common/json_binary.cc) -> Python value.

    Opaque values: DECIMAL -> Decimal, DATE -> date, DATETIME/TIMESTAMP -> naive
    datetime, TIME -> timedelta, anything else -> bytes. An empty document -> None.
    """
    if not data:
        return None
    return _json_value(data[0], data, 1, len(data), 0)


def _json_varlen(buf: bytes, pos: int) -> tuple[int, int]:
    n = 0
    for i in range(5):
        b = buf[pos + i]
        n |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return n, pos + i + 1
    raise ValueError("JSON variable-length integer longer than 5 bytes")


_JSON_MAX_DEPTH = 100  # MySQL's JSON_DOCUMENT_MAX_DEPTH; also stops offset cycles


def _json_value(t: int, buf: bytes, pos: int, end: int, depth: int) -> Any:
    if t <= 3:
        if depth >= _JSON_MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {_JSON_MAX_DEPTH}")
        return _json_container(t, buf, pos, end, depth + 1)
    if t == 4:
        lit = buf[pos]
        if lit > 2:
            raise ValueError(f"bad JSON literal {lit}")
        return (None, True, False)[lit]
    s = _J_SCALARS.get(t)
    if s is not None:
        if pos + s.size > end:
            _need(pos + s.size, buf)
        return s.unpack_from(buf, pos)[0]
    if t == 12:
        n, start = _json_varlen(buf, pos)
        if start + n > end:
            _need(start + n, buf)
        return buf[start:start + n].decode("utf-8")
    if t == 15:
        return _json_opaque(buf[pos], buf, pos + 1, end)
    raise ValueError(f"unknown JSON value type {t}")


def _json_container(t: int, buf: bytes, base: int, end: int, depth: int) -> Any:
    large = t & 1
    off = struct.Struct("<I" if large else "<H").unpack_from
    osz = 4 if large else 2
    count = off(buf, base)[0]
    size = off(buf, base + osz)[0]
    if base + size > end:
        _need(base + size, buf)
    end = base + size
    pos = base + 2 * osz
    keys = []
    if t <= 1:  # object: key entries (offset, u16 length) come first
        for _ in range(count):
            k_off = off(buf, pos)[0]
            k_len = _u16(buf, pos + osz)[0]
            if base + k_off + k_len > end:
                _need(base + k_off + k_len, buf)
            keys.append(buf[base + k_off:base + k_off + k_len].decode("utf-8"))
            pos += osz + 2
    inline = _JSON_INLINE_LARGE if large else _JSON_INLINE_SMALL
    values = []
    for _ in range(count):
        vt = buf[pos]
        if vt in inline:
            values.append(_json_value(vt, buf, pos + 1, pos + 1 + osz, depth))
        else:
            values.append(_json_value(vt, buf, base + off(buf, pos + 1)[0], end, depth))
        pos += 1 + osz
    return dict(zip(keys, values)) if t <= 1 else values


def _json_opaque(field_type: int, buf: bytes, pos: int, end: int) -> Any:
    n, start = _json_varlen(buf, pos)
    if start + n > end:
        _need(start + n, buf)
    raw = buf[start:start + n]
    if field_type == NEWDECIMAL and n >= 2:
        return decode_decimal(raw[2:], raw[0], raw[1])
    if field_type in (DATE, DATETIME, TIMESTAMP, TIME) and n == 8:
        packed = _s64(raw, 0)[0]
        if field_type == TIME:
            return _packed_time(packed)
        packed = abs(packed)
        ymdhms, us = packed >> 24, packed & 0xFFFFFF
        ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
        ym = ymd >> 5
        if field_type == DATE:
            return _dt.date(ym // 13, ym % 13, ymd & 31)
        return _datetime_or_text(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 0x3F,
                                 hms & 0x3F, us, 6)
    return raw


def _mysql_json(prefix: int) -> Decoder:
    length_at = _prefix_unpacker(prefix)

    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        start = pos + prefix
        end = start + length_at(buf, pos)
        if end > len(buf):
            _need(end, buf)
        return decode_mysql_json(buf[start:end]), end
    return dec


# --------------------------------------------------------------------------- inline plans
#
# Row readers (relay.binlog.rows) are generated Python source, one straight line per
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


_LE_CODES = {TINY: "bB", SHORT: "hH", LONG: "iI", LONGLONG: "qQ", FLOAT: "ff", DOUBLE: "dd"}
_DECIMAL_CONTEXT = decimal.Context(prec=100, Emax=999999, Emin=-999999)  # never rounds a column
_PREFIX_CODES = {1: "B", 2: "H", 3: "HB", 4: "I"}
_FRAC_CODES = {0: "", 1: "B", 2: "B", 3: "H", 4: "H", 5: "BH", 6: "BH"}
_FRAC_UNITS = {1: 10000, 2: 10000, 3: 100, 4: 100}


def inline_plan(col_type: int, meta: Any, *, unsigned: bool = False,
                charset: int | None = None) -> Inline | None:
    """The inline reading of a column whose decoder make_decoder builds from the same
    arguments, or None where the reader should call the decoder (rare types)."""
    try:
        if col_type in _LE_CODES:
            code = _LE_CODES[col_type][unsigned]
            return Inline(code, "" if code in "bB" else "<", inline_same, {}, False)
        if col_type == INT24:
            return Inline("HB" if unsigned else "Hb", "<",
                          lambda v, t, c: [f"{v} = {t[0]} | {t[1]} << 16"], {}, False)
        if col_type == YEAR:
            return Inline("B", "", lambda v, t, c: [f"{v} = {t[0]} + 1900 if {t[0]} else 0"], {},
                          False)
        if col_type == NEWDECIMAL:
            return _decimal_plan(*meta)
        if col_type == DATETIME2 and 0 <= meta <= 6:
            return _datetime2_plan(meta)
        if col_type == TIMESTAMP2 and 0 <= meta <= 6:
            return _timestamp2_plan(meta)
        if col_type == DATE or col_type == NEWDATE:
            return Inline("HB", "<", _date_lines, {}, False)
        if col_type == VARCHAR or col_type == VAR_STRING:
            return _string_plan(1 if meta < 256 else 2, charset, None)
        if col_type == STRING and meta[0] not in (ENUM, SET):
            length = meta[1]
            return _string_plan(1 if length < 256 else 2, charset,
                                length if charset == BINARY_CHARSET else None)
        if col_type in BLOB_TYPES and 1 <= meta <= 4:
            return _string_plan(meta, charset, None)
        if col_type == GEOMETRY and 1 <= meta <= 4:
            return _string_plan(meta, BINARY_CHARSET, None)
    except (TypeError, ValueError, IndexError):
        return None  # bad metadata: the decoder is an unsupported() one, let it raise
    return None


def _date_lines(v: str, t: list[str], c: str) -> list[str]:
    # Same as _date.
    return [f"x = {t[0]} | {t[1]} << 16",
            "try:",
            f"    {v} = _date(x >> 9, (x >> 5) & 15, x & 31)",
            "except ValueError:",
            f"    {v} = _date_text(x >> 9, (x >> 5) & 15, x & 31)"]


def _datetime2_plan(fsp: int) -> Inline:
    # Same value as _datetime2(fsp); the integer part is 5 big-endian bytes.
    if fsp >= 5:  # 5 + 3 bytes: one big-endian u64
        head, key = "Q", "{t0}"
        split = ["x = ({t0} >> 24) - 0x8000000000", "us = {t0} & 0xFFFFFF"]
    elif fsp == 0:
        head, key = "IB", "{t0} << 8 | {t1}"
        split = ["x = ({t0} << 8 | {t1}) - 0x8000000000", "us = 0"]
    else:
        head, key = "IB" + _FRAC_CODES[fsp], "({t0} << 8 | {t1}) << 16 | {t2}"
        split = ["x = ({t0} << 8 | {t1}) - 0x8000000000", f"us = {{t2}} * {_FRAC_UNITS[fsp]}"]

    def render(v: str, t: list[str], c: str) -> list[str]:
        names = {f"t{i}": name for i, name in enumerate(t)}
        return _same_as_last(v, key.format(**names), c, [line.format(**names) for line in split] + [
            "ymd = x >> 17",
            "ym = ymd >> 5",
            "hms = x & 0x1FFFF",
            "try:",
            f"    {v} = _datetime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 0x3F, "
            "hms & 0x3F, us)",
            "except ValueError:",
            f"    {v} = _datetime_or_text(ym // 13, ym % 13, ymd & 31, hms >> 12, "
            f"(hms >> 6) & 0x3F, hms & 0x3F, us, {fsp})"])
    return Inline(head, ">", render, {"last": (None, None)}, False)


def _same_as_last(v: str, key: str, c: str, compute: list[str]) -> list[str]:
    """Reuse the previous row's (immutable) value when the bytes are the same: the rows
    of one statement often share a timestamp (NOW(), DEFAULT CURRENT_TIMESTAMP), and
    building a datetime costs several times the comparison. The (key, value) pair is
    swapped as one tuple, so threads sharing the reader never see a mismatched pair."""
    return [f"global {c}last",
            f"k = {key}",
            f"if {c}last[0] == k:",
            f"    {v} = {c}last[1]",
            "else:",
            *("    " + line for line in compute),
            f"    {c}last = (k, {v})"]


def _timestamp2_plan(fsp: int) -> Inline:
    # Same value as _timestamp2(fsp).
    codes = "I" + _FRAC_CODES[fsp]
    zero = _ZERO_DATETIME + _frac_text(0, fsp)

    def render(v: str, t: list[str], c: str) -> list[str]:
        if fsp == 0:
            us, key = "0", t[0]
        elif fsp >= 5:
            us, key = f"{t[1]} << 16 | {t[2]}", f"({t[0]} << 8 | {t[1]}) << 16 | {t[2]}"
        else:
            us, key = f"{t[1]} * {_FRAC_UNITS[fsp]}", f"{t[0]} << 16 | {t[1]}"
        return _same_as_last(v, key, c, [
            f"{v} = _EPOCH + _timedelta(0, {t[0]}, {us}) if {t[0]} else {c}zero"])
    return Inline(codes, ">", render, {"zero": zero, "last": (None, None)}, False)


def _decimal_plan(precision: int, scale: int) -> Inline | None:
    """NEWDECIMAL as its digit groups: one struct code per group (a 3-byte group is two),
    the sign flip and range checks of _decimal_reader, and the Decimal built from the
    integer of all its digits (exact, ~4x cheaper than parsing text): that integer times
    10**-scale, multiplied by the context that never rounds. The context's methods take
    the int as it is, which saves building a Decimal of it first (a third of the cost);
    the product's exponent is the factor's, -scale, as the decoder's text gives."""
    _decimal((precision, scale))  # same metadata checks as the decoder
    groups = _decimal_groups(precision, scale)
    if not groups:
        return None
    codes = "".join({1: "B", 2: "H", 3: "BH", 4: "I"}[nbytes] for nbytes, _ in groups)
    sign = 1 << (groups[0][0] * 8 - 1)
    negative_zero = Decimal(f"-0.{'0' * scale}" if scale else "-0")
    unit = Decimal(1).scaleb(-scale)  # 1E-scale

    def render(v: str, t: list[str], c: str) -> list[str]:
        lines, names, it = [], [], iter(t)
        for i, (nbytes, _) in enumerate(groups):
            if nbytes == 3:
                hi, lo = next(it), next(it)
                lines.append(f"{hi} = {hi} << 16 | {lo}")
                names.append(hi)
            else:
                names.append(next(it))
        masks = [(1 << nbytes * 8) - 1 for nbytes, _ in groups]
        limits = [10 ** digits for _, digits in groups]
        out_of_range = " or ".join(f"{g} >= {lim}" for g, lim in zip(names, limits))
        digits = names[0]
        for g, lim in zip(names[1:], limits[1:]):
            digits = f"({digits}) * {lim} + {g}"

        def value(n: str) -> str:
            return f"_decimal_multiply({n}, {c}unit)" if scale else f"_Decimal({n})"
        return lines + [
            f"if {names[0]} & {sign}:",
            f"    {names[0]} ^= {sign}",
            f"    if {out_of_range}:",
            f"        _bad_decimal({precision}, {scale})",
            f"    {v} = {value(digits)}",
            "else:",
            *(f"    {g} ^= {m ^ (sign if i == 0 else 0)}" for i, (g, m) in enumerate(zip(names, masks))),
            f"    if {out_of_range}:",
            f"        _bad_decimal({precision}, {scale})",
            f"    x = {digits}",
            f"    {v} = {value('-x')} if x else {c}negzero"]
    return Inline(codes, ">", render, {"negzero": negative_zero, "unit": unit}, False)


def _bad_decimal(precision: int, scale: int) -> None:
    raise ValueError(f"corrupt DECIMAL({precision},{scale}) digit group")


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


# Names the lines of the plans use, for the reader's globals.
INLINE_GLOBALS: dict[str, Any] = {
    "_Decimal": Decimal, "_decimal_multiply": _DECIMAL_CONTEXT.multiply, "_bad_decimal": _bad_decimal,
    "_datetime": _datetime, "_datetime_or_text": _datetime_or_text, "_date": _dt.date,
    "_date_text": _date_text, "_EPOCH": _EPOCH, "_timedelta": _timedelta,
}


# --------------------------------------------------------------------------- factory


def _null(buf: bytes, pos: int) -> tuple[None, int]:
    return None, pos


def unsupported(col_type: int, why: str) -> Decoder:
    """A decoder that fails when used: a table map with such a column still parses."""
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        raise ValueError(f"cannot decode {type_name(col_type)}: {why}")
    return dec


_INTS: dict[int, tuple[Decoder, Decoder]] = {
    TINY: (_fixed(_s8, 1), _fixed(_u8, 1)),
    SHORT: (_fixed(_s16, 2), _fixed(_u16, 2)),
    INT24: (_int24(True), _int24(False)),
    LONG: (_fixed(_s32, 4), _fixed(_u32, 4)),
    LONGLONG: (_fixed(_s64, 8), _fixed(_u64, 8)),
}


def make_decoder(col_type: int, meta: Any, *, unsigned: bool = False,
                 charset: int | None = None,
                 names: tuple[str, ...] | None = None) -> Decoder:
    """Build the value decoder of one column.

    meta: the entry of parse_column_meta for the column; charset: its collation id if
    known; names: ENUM/SET member names if known.
    """
    if col_type in _INTS:
        return _INTS[col_type][1 if unsigned else 0]
    if col_type == NEWDECIMAL:
        return _decimal(meta)
    if col_type == FLOAT:
        return _fixed(_f32, 4)
    if col_type == DOUBLE:
        return _fixed(_f64, 8)
    if col_type == YEAR:
        return _year
    if col_type == BIT:
        return _bit(meta)
    if col_type == DATE or col_type == NEWDATE:
        return _date
    if col_type == TIME:
        return _time_old
    if col_type == DATETIME:
        return _datetime_old
    if col_type == TIMESTAMP:
        return _timestamp_old
    if col_type == TIME2:
        return _time2(meta)
    if col_type == DATETIME2:
        return _datetime2(meta)
    if col_type == TIMESTAMP2:
        return _timestamp2(meta)
    if col_type == VARCHAR or col_type == VAR_STRING:
        return _string_decoder(1 if meta < 256 else 2, charset)
    if col_type in (STRING, ENUM, SET):
        return _fixed_string(meta, charset, names)
    if col_type in BLOB_TYPES:
        if not 1 <= meta <= 4:
            return unsupported(col_type, f"length-prefix size {meta}")
        return _string_decoder(meta, charset)
    if col_type == GEOMETRY:
        if not 1 <= meta <= 4:
            return unsupported(col_type, f"length-prefix size {meta}")
        return _var(meta, None)
    if col_type == JSON:
        if not 1 <= meta <= 4:
            return unsupported(col_type, f"length-prefix size {meta}")
        return _mysql_json(meta)
    if col_type == VECTOR:
        if not 1 <= meta <= 4:
            return unsupported(col_type, f"length-prefix size {meta}")
        return _vector(meta)
    if col_type == NULL:
        return _null
    return unsupported(col_type, "type not supported")


def _vector(prefix: int) -> Decoder:
    """MySQL 9 VECTOR (Field_vector, a blob of float32): a little-endian length prefix of
    ``prefix`` bytes (the column metadata), then the length / 4 floats, little-endian."""
    length_at = _prefix_unpacker(prefix)

    def dec(buf: bytes, pos: int) -> tuple[tuple[float, ...], int]:
        start = pos + prefix
        n = length_at(buf, pos)
        end = start + n
        if end > len(buf):
            _need(end, buf)
        if n % 4:
            raise ValueError(f"VECTOR of {n} bytes is not a whole number of float32 values")
        return struct.unpack_from(f"<{n // 4}f", buf, start), end
    return dec


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


# --------------------------------------------------------------------------- MySQL JSON diffs
#
# PARTIAL_UPDATE_ROWS_EVENT (binlog_row_value_options=PARTIAL_JSON) logs a JSON column of
# the after image as the list of changes made to it (Json_diff_vector::write_binary): each
# is an operation byte, the path as text (lenenc length + text), and for all but REMOVE the
# new value (lenenc length + binary JSON: type byte and data).

JSON_DIFF_OPERATIONS = ("REPLACE", "INSERT", "REMOVE")  # enum_json_diff_operation


@dataclass(frozen=True)
class JsonDiff:
    operation: str  # REPLACE | INSERT | REMOVE
    path: str  # MySQL JSON path text, e.g. '$.age', '$[2]', '$."a key"'
    value: Any = None  # the new value (None for REMOVE)


@dataclass(frozen=True)
class JsonPartialUpdate:
    """A partial JSON update whose before value the event does not carry
    (binlog_row_image=MINIMAL): the diffs, as MySQL logged them, in order."""

    diffs: tuple[JsonDiff, ...]


def _lenenc_at(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        value, pos = read_lenenc_int(buf, pos)
    except ProtocolError as bad:
        raise ValueError(str(bad)) from None
    if value is None:
        raise ValueError(f"a NULL marker where a length-encoded integer belongs at {pos - 1}")
    return value, pos


def decode_json_diffs(data: bytes) -> tuple[JsonDiff, ...]:
    """The diffs of one partially updated JSON column (the bytes after its length prefix)."""
    diffs = []
    pos = 0
    while pos < len(data):
        op = data[pos]
        if op >= len(JSON_DIFF_OPERATIONS):
            raise ValueError(f"unknown JSON diff operation {op}")
        n, pos = _lenenc_at(data, pos + 1)
        if pos + n > len(data):
            _need(pos + n, data)
        path = data[pos:pos + n].decode("utf-8")
        pos += n
        value = None
        if op != 2:
            n, pos = _lenenc_at(data, pos)
            if pos + n > len(data) or n == 0:
                _need(pos + max(n, 1), data)
            value = decode_mysql_json(data[pos:pos + n])
            pos += n
        diffs.append(JsonDiff(JSON_DIFF_OPERATIONS[op], path, value))
    return tuple(diffs)


def partial_json_decoder(prefix: int) -> Decoder:
    """The decoder of a JSON column in partial form: its length prefix, then its diffs."""
    length_at = _prefix_unpacker(prefix)

    def dec(buf: bytes, pos: int) -> tuple[tuple[JsonDiff, ...], int]:
        start = pos + prefix
        end = start + length_at(buf, pos)
        if end > len(buf):
            _need(end, buf)
        return decode_json_diffs(buf[start:end]), end
    return dec


_PATH_MEMBER = re.compile(r'\.(?:([A-Za-z_$][A-Za-z0-9_$]*)|("(?:[^"\\]|\\.)*"))')
_PATH_CELL = re.compile(r"\[([0-9]+)\]")


def parse_json_path(path: str) -> tuple[str | int, ...]:
    """The legs of a path as MySQL writes them in diffs (Json_path::to_string): '$', then
    .member (double-quoted when not an identifier) or [index]. Wildcards and ranges never
    appear in a diff: the server logs the concrete location it changed."""
    if not path.startswith("$"):
        raise ValueError(f"JSON path {path!r} does not start with $")
    legs: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _PATH_MEMBER.match(path, pos)
        if m:
            legs.append(m.group(1) if m.group(1) is not None else json.loads(m.group(2)))
        else:
            m = _PATH_CELL.match(path, pos)
            if not m:
                raise ValueError(f"unsupported JSON path {path!r} at character {pos}")
            legs.append(int(m.group(1)))
        pos = m.end()
    return tuple(legs)


def apply_json_diffs(document: Any, diffs: tuple[JsonDiff, ...]) -> Any:
    """The document after the diffs, as the server applied them (Json_diff_vector::apply):
    REPLACE sets an existing location, INSERT adds an object member or inserts into an
    array (past its end: appends), REMOVE deletes. ``document`` is not modified."""
    doc = copy.deepcopy(document)
    for diff in diffs:
        legs = parse_json_path(diff.path)
        if not legs:
            if diff.operation == "REMOVE":
                raise ValueError("a JSON diff removes the whole document")
            doc = copy.deepcopy(diff.value)
            continue
        parent = doc
        for leg in legs[:-1]:
            parent = parent[leg]
        leg = legs[-1]
        if diff.operation == "REMOVE":
            del parent[leg]
        elif diff.operation == "INSERT" and isinstance(parent, list):
            parent.insert(leg, copy.deepcopy(diff.value))  # type: ignore[arg-type]
        else:
            if diff.operation == "REPLACE" and isinstance(parent, dict) and leg not in parent:
                raise ValueError(f"JSON diff replaces {diff.path}, which the before image lacks")
            parent[leg] = copy.deepcopy(diff.value)
    return doc

"""Dates and times (sans-IO): DATE, TIME, DATETIME and TIMESTAMP in their classic forms and
their fractional ("2") forms, with the inline plans of the common ones.

Python values:

=====================  =====================================================================
DATE                   datetime.date; a zero date or one with zero parts (``0000-00-00``,
                       ``2024-00-15``) is returned as str in the server's text form.
DATETIME(2)            naive datetime.datetime; zero/invalid as str, e.g.
                       ``'0000-00-00 00:00:00.000'`` (as many fraction digits as the fsp).
TIMESTAMP(2)           datetime.datetime, tz-aware in UTC (the binlog stores epoch seconds);
                       the zero timestamp as str like DATETIME.
TIME(2)                datetime.timedelta, negative and > 24 h allowed.
=====================  =====================================================================

Old-style TIME/DATETIME/TIMESTAMP (types 11, 12, 7) are decoded in their classic
fsp-0 formats. MariaDB's own pre-10.1 "hires" variants of those types (created with
``mysql56_temporal_format=OFF`` and fsp > 0) carry no metadata in the binlog, so their
size is unknowable from the binlog alone; they are not supported.
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable
from typing import Any

from .base import (
    R_DATE,
    R_DATETIME2,
    R_TIMESTAMP2,
    Column,
    ColumnType,
    Compiled,
    Decoder,
    Inline,
    meta_byte,
    need,
    u24,
    u32,
)
from .codes import DATE, DATETIME, DATETIME2, NEWDATE, TIME, TIME2, TIMESTAMP, TIMESTAMP2

_s24 = struct.Struct("<Hb").unpack_from  # (lo16, signed hi8)
_u64 = struct.Struct("<Q").unpack_from

UTC = _dt.UTC
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=UTC)
_timedelta = _dt.timedelta
_datetime = _dt.datetime


def _frac_text(us: int, fsp: int) -> str:
    return "." + f"{us:06d}"[:fsp] if fsp else ""


def datetime_or_text(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int,
                     fsp: int) -> _dt.datetime | str:
    """The datetime of these parts, or the server's text of it where Python has none."""
    try:
        return _datetime(y, mo, d, h, mi, s, us)
    except ValueError:
        # Zero dates, zero parts, or values Python cannot hold: the server's text form.
        return f"{_date_text(y, mo, d)} {h:02d}:{mi:02d}:{s:02d}" + _frac_text(us, fsp)


def _date(buf: bytes, pos: int) -> tuple[_dt.date | str, int]:
    lo, hi = u24(buf, pos)
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
    return (datetime_or_text(d // 10000, d // 100 % 100, d % 100,
                             t // 10000, t // 100 % 100, t % 100, 0, 0), pos + 8)


_ZERO_DATETIME = "0000-00-00 00:00:00"


def _timestamp_old(buf: bytes, pos: int) -> tuple[_dt.datetime | str, int]:
    secs = u32(buf, pos)[0]
    return (_EPOCH + _timedelta(seconds=secs) if secs else _ZERO_DATETIME), pos + 4


def packed_time(packed: int) -> _dt.timedelta:
    """MySQL's "packed" time: (hour<<12 | minute<<6 | second) << 24 | microseconds, signed."""
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
            return packed_time(((hi << 8 | lo) - _TIMEF_INT_OFS) << 24), pos + 3
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
            return packed_time((intpart << 24) + frac * unit), pos + size
        return dec
    unpack6 = struct.Struct(">HI").unpack_from

    def dec6(buf: bytes, pos: int) -> tuple[_dt.timedelta, int]:
        hi, lo = unpack6(buf, pos)
        return packed_time((hi << 32 | lo) - _TIMEF_OFS), pos + 6
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
        return (datetime_or_text(ym // 13, ym % 13, ymd & 31, hms >> 12,
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
                need(pos + size, buf)
            return zero, pos + size
        return _EPOCH + _timedelta(0, secs, us), pos + size
    return dec


_FRAC_CODES = {0: "", 1: "B", 2: "B", 3: "H", 4: "H", 5: "BH", 6: "BH"}
_FRAC_UNITS = {1: 10000, 2: 10000, 3: 100, 4: 100}


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


def _fsp_plan(build: Callable[[int], Inline]) -> Callable[[Column], Inline | None]:
    """The plan of a fractional type, for the precisions the server allows (0-6)."""
    return lambda col: build(col.meta) if 0 <= col.meta <= 6 else None


def _fsp_compiled(kind: int) -> Callable[[Column], Compiled | None]:
    """The compiled reader's DATETIME2 or TIMESTAMP2, for the precisions the plans take (0-6)."""
    def compiled(col: Column) -> Compiled | None:
        if not 0 <= col.meta <= 6:
            return None
        return (kind, col.meta, 0, _ZERO_DATETIME + _frac_text(0, col.meta) if kind == R_TIMESTAMP2 else None)
    return compiled


TYPES: dict[int, ColumnType] = {
    DATE: ColumnType(lambda col: _date, lambda col: Inline("HB", "<", _date_lines, {}, False),
                     compiled=lambda col: (R_DATE, 3, 0, None)),
    TIME: ColumnType(lambda col: _time_old),
    DATETIME: ColumnType(lambda col: _datetime_old),
    TIMESTAMP: ColumnType(lambda col: _timestamp_old),
    # metadata: the fractional-second precision (fsp)
    TIME2: ColumnType(lambda col: _time2(col.meta), meta_size=1, read_meta=meta_byte),
    DATETIME2: ColumnType(lambda col: _datetime2(col.meta), _fsp_plan(_datetime2_plan), meta_size=1,
                          read_meta=meta_byte, compiled=_fsp_compiled(R_DATETIME2)),
    TIMESTAMP2: ColumnType(lambda col: _timestamp2(col.meta), _fsp_plan(_timestamp2_plan), meta_size=1,
                           read_meta=meta_byte, compiled=_fsp_compiled(R_TIMESTAMP2)),
}
TYPES[NEWDATE] = TYPES[DATE]
# Names the lines of the plans use, for the reader's globals.
INLINE_GLOBALS: dict[str, Any] = {
    "_datetime": _datetime, "_datetime_or_text": datetime_or_text, "_date": _dt.date,
    "_date_text": _date_text, "_EPOCH": _EPOCH, "_timedelta": _timedelta,
}

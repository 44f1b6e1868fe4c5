"""MySQL's JSON type (sans-IO): the binary JSON of its column values, and the diffs of its
partial updates (PARTIAL_UPDATE_ROWS_EVENT).

Python values: JSON (MySQL, 245) is the decoded Python value (dict/list/str/int/float/bool/
None ...); a partial update is applied to the before value (relay.rows.rows), or is a
JsonPartialUpdate when the event lacks it. MariaDB stores JSON as LONGTEXT, so there it
arrives as a str (relay.rows.coltypes.strings).
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import re
import struct
from dataclasses import dataclass
from typing import Any

from .base import ColumnType, Decoder, lenenc_at, length_prefixed, meta_byte, need, prefixed, u16
from .codes import DATE, DATETIME, JSON, NEWDECIMAL, TIME, TIMESTAMP
from .decimal import decode_decimal
from .temporal import datetime_or_text, packed_time

_JSON_INLINE_SMALL = frozenset({4, 5, 6})  # literal, int16, uint16
_JSON_INLINE_LARGE = frozenset({4, 5, 6, 7, 8})  # + int32, uint32
_J_SCALARS = {
    5: struct.Struct("<h"), 6: struct.Struct("<H"), 7: struct.Struct("<i"),
    8: struct.Struct("<I"), 9: struct.Struct("<q"), 10: struct.Struct("<Q"),
    11: struct.Struct("<d"),
}
_s64 = _J_SCALARS[9].unpack_from  # also the packed form of opaque temporal values


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
            need(pos + s.size, buf)
        return s.unpack_from(buf, pos)[0]
    if t == 12:
        n, start = _json_varlen(buf, pos)
        if start + n > end:
            need(start + n, buf)
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
        need(base + size, buf)
    end = base + size
    pos = base + 2 * osz
    keys = []
    if t <= 1:  # object: key entries (offset, u16 length) come first
        for _ in range(count):
            k_off = off(buf, pos)[0]
            k_len = u16(buf, pos + osz)[0]
            if base + k_off + k_len > end:
                need(base + k_off + k_len, buf)
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
        need(start + n, buf)
    raw = buf[start:start + n]
    if field_type == NEWDECIMAL and n >= 2:
        return decode_decimal(raw[2:], raw[0], raw[1])
    if field_type in (DATE, DATETIME, TIMESTAMP, TIME) and n == 8:
        packed = _s64(raw, 0)[0]
        if field_type == TIME:
            return packed_time(packed)
        packed = abs(packed)
        ymdhms, us = packed >> 24, packed & 0xFFFFFF
        ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
        ym = ymd >> 5
        if field_type == DATE:
            return _dt.date(ym // 13, ym % 13, ymd & 31)
        return datetime_or_text(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 0x3F,
                                hms & 0x3F, us, 6)
    return raw


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


def decode_json_diffs(data: bytes) -> tuple[JsonDiff, ...]:
    """The diffs of one partially updated JSON column (the bytes after its length prefix)."""
    diffs = []
    pos = 0
    while pos < len(data):
        op = data[pos]
        if op >= len(JSON_DIFF_OPERATIONS):
            raise ValueError(f"unknown JSON diff operation {op}")
        n, pos = lenenc_at(data, pos + 1)
        if pos + n > len(data):
            need(pos + n, data)
        path = data[pos:pos + n].decode("utf-8")
        pos += n
        value = None
        if op != 2:
            n, pos = lenenc_at(data, pos)
            if pos + n > len(data) or n == 0:
                need(pos + max(n, 1), data)
            value = decode_mysql_json(data[pos:pos + n])
            pos += n
        diffs.append(JsonDiff(JSON_DIFF_OPERATIONS[op], path, value))
    return tuple(diffs)


def partial_json_decoder(prefix: int) -> Decoder:
    """The decoder of a JSON column in partial form: its length prefix, then its diffs."""
    return length_prefixed(prefix, decode_json_diffs)


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


TYPES: dict[int, ColumnType] = {
    # metadata: the size of the length prefix
    JSON: ColumnType(prefixed(lambda col: length_prefixed(col.meta, decode_mysql_json)), meta_size=1,
                     read_meta=meta_byte),
}
INLINE_GLOBALS: dict[str, Any] = {}

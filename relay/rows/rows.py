"""Row-based replication events, decoded to Python values (sans-IO).

    tm = parse_table_map(table_map_body, post_header_len=phl[19 - 1])
    ev = parse_rows_event(event_type, rows_body, tm, post_header_len=phl[event_type - 1])
    for row in iter_rows(event_type, rows_body, tm, phl[event_type - 1]): ...

Bodies are event bytes after the 19-byte header and without the 4-byte CRC32 trailer.
Supported: TABLE_MAP (19) with MySQL/MariaDB optional metadata; WRITE/UPDATE/DELETE
rows v1 (23-25), v2 (30-32, extra data skipped but kept), MariaDB compressed v1
(166-168) and compressed v2 (169-171). In MariaDB's compressed events only the row
images are compressed: the post-header, extra data, column count and column bitmaps
stay plain (Rows_log_event ctor + uncompress_buf, verified against MariaDB 10.11).
A row is a dict {column name: value}; columns absent from the event's
columns-present bitmap (binlog_row_image=MINIMAL/NOBLOB) are missing from it.
Value types are documented in relay.rows.coltypes (per type family, in its modules); the
table map (parse_table_map, TableMap) is relay.rows.tablemap's.

Errors in the bytes raise RowDecodeError naming database.table, column, type and
byte offset; never IndexError/struct.error.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from relay.rows import coltypes as ct
from relay.rows.coltypes.readers import Body, Row, Run, compile_body, compile_run
from relay.rows.tablemap import _DECODE_ERRORS, RowDecodeError, TableMap

__all__ = ["RowsEvent", "parse_rows_event", "iter_rows", "uncompress_rows", "ROWS_EVENT_TYPES"]

# event type -> (kind, v2 post-header with extra data, MariaDB compressed)
_ROWS_EVENTS: dict[int, tuple[str, bool, bool]] = {
    23: ("insert", False, False), 24: ("update", False, False), 25: ("delete", False, False),
    30: ("insert", True, False), 31: ("update", True, False), 32: ("delete", True, False),
    166: ("insert", False, True), 167: ("update", False, True), 168: ("delete", False, True),
    169: ("insert", True, True), 170: ("update", True, True), 171: ("delete", True, True),
    39: ("update", True, False),  # MySQL PARTIAL_UPDATE_ROWS_EVENT: see _partial_rows
}
PARTIAL_UPDATE_ROWS_EVENT = 39
ROWS_EVENT_TYPES = frozenset(_ROWS_EVENTS)
STMT_END_F = 0x0001


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class RowsEvent:
    """A decoded WRITE/UPDATE/DELETE rows event.

    rows: for 'insert'/'delete' a tuple of dicts; for 'update' a tuple of
    (before, after) dict pairs. columns_present(_after) are column numbers.
    """

    table_id: int
    flags: int
    stmt_end: bool
    kind: str
    rows: tuple[Any, ...]
    columns_present: tuple[int, ...]
    columns_present_after: tuple[int, ...] | None
    extra_data: bytes
    database: str
    table: str


class _Image:
    """How to read one row image for a given columns-present bitmap.

    read(buf, pos) -> (row dict, next pos). It reads the null bitmap, then hands the rest
    of the row to a reader generated for that pattern of NULLs (see compile_body): a bulk
    statement's rows mostly share one pattern, and knowing which columns are NULL lets one
    Struct.unpack_from read the fixed-width heads of all adjacent columns with no test per
    column. Past _MAX_VARIANTS patterns (a table with many nullable columns), the further
    ones share one reader that tests each column's NULL bit.

    run(nulls) is the bulk form of the same (images of up to 8 columns, one null bitmap
    byte): it reads row after row while they have that pattern of NULLs.
    """

    __slots__ = ("indexes", "null_bytes", "read", "runs", "_tm", "_variants", "_generic")

    def __init__(self, tm: TableMap, indexes: tuple[int, ...]) -> None:
        self.indexes = indexes
        self.null_bytes = (len(indexes) + 7) // 8
        self._tm = tm
        self._variants: dict[int, Body] = {}
        self.runs: dict[int, Run] = {}  # nulls -> run reader, filled by run()
        self._generic: dict[Callable[..., Any], Any] = {}  # compile function -> reader for any NULLs
        self.read = _dispatcher(self)

    def variant(self, nulls: int) -> Body:
        """The reader of the columns after the null bitmap, for this pattern of NULLs."""
        return self._reader(self._variants, nulls, compile_body)

    def run(self, nulls: int) -> Run:
        """The reader of consecutive rows (null bitmap included) with this pattern of NULLs."""
        assert self.null_bytes == 1
        return self._reader(self.runs, nulls, compile_run)

    def _reader(self, cache: dict[int, Any], nulls: int, compile_reader: Callable[..., Any]) -> Any:
        """The cached reader for nulls; past _MAX_VARIANTS patterns, one that tests each NULL bit."""
        reader = cache.get(nulls)
        if reader is None:
            if len(cache) < _MAX_VARIANTS:
                reader = compile_reader(self._tm, self.indexes, nulls)
            else:
                reader = self._generic.get(compile_reader)
                if reader is None:
                    reader = self._generic[compile_reader] = compile_reader(self._tm, self.indexes, None)
            cache[nulls] = reader
        return reader


_MAX_VARIANTS = 8


def _image(tm: TableMap, bitmap: bytes) -> _Image:
    img = tm._images.get(bitmap)
    if img is None:
        idx = tuple(i for i in range(tm.column_count) if bitmap[i >> 3] >> (i & 7) & 1)
        img = _Image(tm, idx)
        if len(tm._images) >= 64:  # bounded: MINIMAL images vary per statement
            tm._images.clear()
        tm._images[bitmap] = img
    return img


def _dispatcher(img: _Image) -> Callable[[bytes, int], tuple[Row, int]]:
    """read(buf, pos): the null bitmap, then the body reader of its pattern."""
    # The null bitmap has one bit per *present* column (not per table column).
    nb, mask = img.null_bytes, (1 << len(img.indexes)) - 1
    known = img._variants
    learn = img.variant

    if nb == 0:
        def read0(buf: bytes, pos: int) -> tuple[Row, int]:
            return (known.get(0) or learn(0))(buf, pos, 0)
        return read0
    if nb == 1:
        def read1(buf: bytes, pos: int) -> tuple[Row, int]:
            nulls = buf[pos] & mask  # IndexError when truncated
            return (known.get(nulls) or learn(nulls))(buf, pos + 1, nulls)
        return read1

    def read(buf: bytes, pos: int) -> tuple[Row, int]:
        end = pos + nb
        if end > len(buf):
            _short(end, buf)
        nulls = int.from_bytes(buf[pos:end], "little") & mask
        return (known.get(nulls) or learn(nulls))(buf, end, nulls)
    return read


def _short(end: int, buf: bytes) -> None:
    raise ct.Truncated(f"null bitmap needs bytes up to offset {end}, data ends at {len(buf)}")


def uncompress_rows(data: bytes) -> bytes:
    """MariaDB binlog compression (log_event.cc binlog_buf_uncompress).

    One header byte 0x80 | n (bits 4-6: algorithm, 0 = zlib; low 3 bits: n), then the
    uncompressed length in n big-endian bytes, then a zlib stream.
    """
    if not data or data[0] & 0xE0 != 0x80:
        raise ValueError(f"bad compressed-rows header byte {data[:1].hex() or 'missing'}")
    n = data[0] & 0x07
    if not 1 <= n <= 4 or len(data) < 1 + n:
        raise ValueError(f"bad compressed-rows length size {n}")
    size = int.from_bytes(data[1:1 + n], "big")
    z = zlib.decompressobj()
    out = z.decompress(data[1 + n:], size + 1)  # max_length: refuse to inflate a bomb
    if len(out) != size or not z.eof:
        raise ValueError(f"compressed rows inflate to {len(out)} bytes"
                         f"{'' if z.eof else '+ (stream not ended)'}, header says {size}")
    return out


_HEAD = struct.Struct("<IHH")  # table id low 32 bits, high 16 bits, flags
_HEAD4 = struct.Struct("<IH")  # post_header_len 6: u32 table id, flags


class _RowsHeader(NamedTuple):
    table_id: int
    flags: int
    kind: str
    extra_data: bytes
    before: _Image
    after: _Image | None
    buf: bytes  # row images live in buf[start:]
    start: int
    compressed: bool
    partial: bool  # PARTIAL_UPDATE_ROWS_EVENT: after images may hold JSON diffs


def _rows_header(event_type: int, data: bytes, tm: TableMap,
                 post_header_len: int) -> _RowsHeader:
    spec = _ROWS_EVENTS.get(event_type)
    if spec is None:
        raise RowDecodeError(f"event type {event_type} is not a supported rows event",
                             database=tm.database, table=tm.table)
    kind, v2, compressed = spec
    pos = 0
    try:
        if post_header_len == 6:
            table_id, flags = _HEAD4.unpack_from(data, 0)
            pos = 6
        else:
            lo, hi, flags = _HEAD.unpack_from(data, 0)
            table_id, pos = lo | hi << 32, 8
        extra = b""
        if v2:
            # v2: u16 length of the extra-data block, counting its own 2 bytes.
            var_len = _u16(data, pos)[0]
            if var_len < 2 or pos + var_len > len(data):
                raise ValueError(f"bad extra-data length {var_len}")
            extra = data[pos + 2:pos + var_len]
            pos += var_len
        width = data[pos]
        if width >= 0xFB:  # rare: more than 250 columns, a longer lenenc integer
            width, pos = ct.lenenc_at(data, pos)
        else:
            pos += 1
        if width != len(tm.column_types):
            raise ValueError(f"event has {width} columns, table map {tm.column_count}")
        nbit = (width + 7) // 8
        if pos + nbit * (2 if kind == "update" else 1) > len(data):
            raise ct.Truncated("columns-present bitmap runs past the end")
        before = _image(tm, data[pos:pos + nbit])
        pos += nbit
        after = None
        if kind == "update":
            after = _image(tm, data[pos:pos + nbit])
            pos += nbit
        buf, start = data, pos
        if compressed:
            buf, start = uncompress_rows(data[pos:]), 0
        if not before.indexes and (after is None or not after.indexes) and start < len(buf):
            # Rows without a single column take no bytes: the data could never end.
            raise ValueError("row data follows an empty columns-present bitmap")
    except _DECODE_ERRORS as e:
        raise RowDecodeError(f"bad rows event header: {e}", database=tm.database,
                             table=tm.table, offset=pos) from None
    if table_id != tm.table_id:
        raise RowDecodeError(f"rows event is for table id {table_id}, table map is for "
                             f"{tm.table_id}", database=tm.database, table=tm.table)
    # tuple.__new__: NamedTuple's own __new__ is a Python call, a cost per rows event
    return _new_tuple(_RowsHeader, (table_id, flags, kind, extra, before, after, buf, start, compressed,
                                    event_type == PARTIAL_UPDATE_ROWS_EVENT))


_u16 = struct.Struct("<H").unpack_from
_new_tuple = tuple.__new__


def _diagnose(h: _RowsHeader, tm: TableMap, row_start: int, err: Exception) -> RowDecodeError:
    """Re-read the rows from row_start (the failing row, or the first of the run of rows
    it was read with) column by column to say exactly where it broke."""
    where = " (offset in the uncompressed row data)" if h.compressed else ""
    images = (h.before,) if h.after is None else (h.before, h.after)
    pos = row_start
    while pos < len(h.buf):  # each row moves pos on: an image with columns has a null bitmap
        for img in images:
            end = pos + img.null_bytes
            if end > len(h.buf):
                return RowDecodeError(f"truncated null bitmap{where}", database=tm.database,
                                      table=tm.table, offset=pos)
            nulls = int.from_bytes(h.buf[pos:end], "little")
            pos = end
            for bit, i in enumerate(img.indexes):
                if nulls >> bit & 1:
                    continue
                try:
                    _, pos = tm.decoders[i](h.buf, pos)
                except _DECODE_ERRORS as e:
                    return RowDecodeError(f"{e}{where}", database=tm.database, table=tm.table,
                                          column_index=i, column_name=tm.column_names[i],
                                          column_type=tm.column_types[i], offset=pos)
    return RowDecodeError(f"{err}{where}", database=tm.database, table=tm.table,
                          offset=row_start)


def _iter(h: _RowsHeader, tm: TableMap) -> Iterator[Any]:
    if h.partial:
        yield from _partial_rows(h, tm)
        return
    buf, pos, end = h.buf, h.start, len(h.buf)
    read = h.before.read
    read_after = h.after.read if h.after is not None else None
    row: Row | tuple[Row, Row]  # an UPDATE's: (before, after)
    while pos < end:
        row_start = pos
        try:
            row, pos = read(buf, pos)
            if read_after is not None:
                after, pos = read_after(buf, pos)
                row = (row, after)
        except _DECODE_ERRORS as e:
            raise _diagnose(h, tm, row_start, e) from None
        yield row


def _all_rows(h: _RowsHeader, tm: TableMap) -> tuple[Any, ...]:
    # _iter without a generator frame per row: parse_rows_event's hot path.
    if h.partial:
        return _partial_rows(h, tm)
    buf, pos, end = h.buf, h.start, len(h.buf)
    rows: list[Any] = []
    append = rows.append
    row_start = pos
    try:
        if h.after is None and h.before.null_bytes == 1:
            # Up to 8 columns present (inserts/deletes of most tables): each run of rows
            # with the same NULLs costs one call (row_start: the run's first row).
            img = h.before
            mask = (1 << len(img.indexes)) - 1
            runs, learn = img.runs, img.run
            while pos < end:
                row_start = pos
                nulls = buf[pos] & mask
                pos = (runs.get(nulls) or learn(nulls))(buf, pos, end, append)
        elif h.after is None:
            read = h.before.read
            while pos < end:
                row_start = pos
                row, pos = read(buf, pos)
                append(row)
        else:
            read, read_after = h.before.read, h.after.read
            while pos < end:
                row_start = pos
                before, pos = read(buf, pos)
                after, pos = read_after(buf, pos)
                append((before, after))
    except _DECODE_ERRORS as e:
        raise _diagnose(h, tm, row_start, e) from None
    return tuple(rows)


def _partial_rows(h: _RowsHeader, tm: TableMap) -> tuple[Any, ...]:
    """The (before, after) pairs of a PARTIAL_UPDATE_ROWS_EVENT (rpl_record.cc pack_row).

    The before image is a plain one. The after image starts with value_options (lenenc;
    bit 0 = PARTIAL_JSON_UPDATES) and, when that bit is set, one bit per JSON column of the
    table (all of them, in column order, least significant bit first) saying which are
    logged as diffs; then the usual null bitmap and values. A column in diff form gets the
    diffs applied to its before value when the before image has it (binlog_row_image=FULL),
    else a coltypes.JsonPartialUpdate. Rare and small: read column by column, not compiled."""
    buf, pos, end = h.buf, h.start, len(h.buf)
    json_columns = [i for i, t in enumerate(tm.column_types) if t == ct.JSON]
    rows = []
    while pos < end:
        row_start = pos
        try:
            before, pos = _slow_image(tm, h.before.indexes, buf, pos, frozenset(), None)
            options, pos = ct.lenenc_at(buf, pos)
            partial: frozenset[int] = frozenset()
            if options & 1:
                nbytes = (len(json_columns) + 7) // 8
                bits = buf[pos:pos + nbytes]
                if len(bits) < nbytes:
                    raise ct.Truncated("partial-update bitmap runs past the end")
                pos += nbytes
                partial = frozenset(c for k, c in enumerate(json_columns) if bits[k >> 3] >> (k & 7) & 1)
            after, pos = _slow_image(tm, h.after.indexes, buf, pos, partial, before)  # type: ignore[union-attr]
        except _DECODE_ERRORS as e:
            raise RowDecodeError(f"PARTIAL_UPDATE_ROWS row: {e}", database=tm.database, table=tm.table,
                                 offset=row_start) from None
        rows.append((before, after))
    return tuple(rows)


def _slow_image(tm: TableMap, indexes: tuple[int, ...], buf: bytes, pos: int, partial: frozenset[int],
                before: Row | None) -> tuple[Row, int]:
    nbytes = (len(indexes) + 7) // 8
    if pos + nbytes > len(buf):
        raise ct.Truncated(f"null bitmap needs bytes up to offset {pos + nbytes}, data ends at {len(buf)}")
    nulls = int.from_bytes(buf[pos:pos + nbytes], "little")
    pos += nbytes
    row: Row = {}
    for bit, i in enumerate(indexes):
        name = tm.column_names[i]
        if nulls >> bit & 1:
            row[name] = None
        elif i in partial:
            diffs, pos = ct.partial_json_decoder(tm.column_meta[i])(buf, pos)
            if before is not None and before.get(name) is not None:
                row[name] = ct.apply_json_diffs(before[name], diffs)
            else:
                row[name] = ct.JsonPartialUpdate(diffs)
        else:
            row[name], pos = tm.decoders[i](buf, pos)
    return row, pos


def iter_rows(event_type: int, body: bytes | memoryview, table_map: TableMap,
              post_header_len: int = 8) -> Iterator[Any]:
    """Stream the rows of a rows event: dicts, or (before, after) pairs for updates.

    The header is checked eagerly (errors raise here); rows are decoded one at a time.
    """
    h = _rows_header(event_type, bytes(body), table_map, post_header_len)
    return _iter(h, table_map)


def parse_rows_event(event_type: int, body: bytes | memoryview, table_map: TableMap,
                     post_header_len: int = 8) -> RowsEvent:
    """Decode a whole rows event (see iter_rows for streaming)."""
    h = _rows_header(event_type, bytes(body), table_map, post_header_len)
    return _frozen(
        RowsEvent, table_id=h.table_id, flags=h.flags, stmt_end=bool(h.flags & STMT_END_F),
        kind=h.kind, rows=_all_rows(h, table_map), columns_present=h.before.indexes,
        columns_present_after=h.after.indexes if h.after is not None else None,
        extra_data=h.extra_data, database=table_map.database, table=table_map.table)


def _frozen(cls: type, **values: Any) -> Any:
    """Instantiate a frozen dataclass (no defaults, no __post_init__) without its
    __init__, which pays an object.__setattr__ per field: ~1.2 us for RowsEvent, a
    fifth of decoding a typical one-row event."""
    obj: Any = object.__new__(cls)
    obj.__dict__.update(values)
    return obj

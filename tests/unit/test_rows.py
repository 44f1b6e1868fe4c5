"""Row decoding: binlog files captured from a real MariaDB 10.11 against the values the
server itself reported via SELECT (tests/fixtures/make_rows_fixtures.py), plus
hand-made bytes for what MariaDB never writes (v2 rows events) and for malformed input.
Each column type's decoder on its own: tests/unit/test_coltypes.py."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import struct
import zlib
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.rows import coltypes as ct
from relay.rows import rows as rows_module
from relay.rows import tablemap as tablemap_module
from relay.rows.rows import (
    ROWS_EVENT_TYPES,
    RowsEvent,
    iter_rows,
    parse_rows_event,
    uncompress_rows,
)
from relay.rows.tablemap import RowDecodeError, TableMap, parse_table_map

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rows"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
VARIANTS = list(EXPECTED["variants"])


# --------------------------------------------------------------------------- binlog walking


@dataclass(frozen=True)
class Event:
    pos: int
    type: int
    body: bytes  # after the 19-byte header, CRC stripped


@dataclass(frozen=True)
class Binlog:
    events: tuple[Event, ...]
    post_header_len: bytes

    def phl(self, event_type: int) -> int:
        return self.post_header_len[event_type - 1]


@cache
def read_binlog(name: str) -> Binlog:
    """Minimal binlog file walker: magic, then 19-byte headers; the FDE gives the
    checksum algorithm (5th byte from the end of its body) and post-header lengths."""
    data = (FIXTURES / name).read_bytes()
    assert data[:4] == b"\xfebin"
    pos, alg, phl, events = 4, 0, b"", []
    while pos < len(data):
        _, etype, _, length, _, _ = struct.unpack_from("<IBIIIH", data, pos)
        body = data[pos + 19:pos + length]
        if etype == 15:
            alg, phl = body[-5], body[57:-5]
        if alg == 1:
            body = body[:-4]
        events.append(Event(pos, etype, body))
        pos += length
    assert pos == len(data)
    return Binlog(tuple(events), phl)


@dataclass(frozen=True)
class Statement:
    table_map: TableMap
    events: tuple[RowsEvent, ...]

    @property
    def rows(self) -> list:
        return [r for ev in self.events for r in ev.rows]


@cache
def decoded_statements(variant: str) -> tuple[Statement, ...]:
    """Rows events of the variant's database, grouped per statement (STMT_END_F)."""
    info = EXPECTED["variants"][variant]
    log = read_binlog(info["binlog"])
    maps: dict[int, TableMap] = {}
    out, pending = [], []
    for ev in log.events:
        if ev.type == 19:
            tm = parse_table_map(ev.body, log.phl(19))
            maps[tm.table_id] = tm
        elif ev.type in ROWS_EVENT_TYPES:
            table_id = int.from_bytes(ev.body[:6], "little")
            tm = maps[table_id]
            if tm.database != info["database"]:
                continue
            rows_ev = parse_rows_event(ev.type, ev.body, tm, log.phl(ev.type))
            pending.append(rows_ev)
            if rows_ev.stmt_end:
                out.append(Statement(tm, tuple(pending)))
                pending = []
    assert not pending
    return tuple(out)


# --------------------------------------------------------------------------- comparison


def frac(us: int, fsp: int) -> str:
    return "." + f"{us:06d}"[:fsp] if fsp else ""


def datetime_text(v, fsp: int) -> str:
    if isinstance(v, str):
        return v
    assert isinstance(v, dt.datetime)
    return (f"{v.year:04d}-{v.month:02d}-{v.day:02d} "
            f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}" + frac(v.microsecond, fsp))


def time_text(v: dt.timedelta, fsp: int) -> str:
    assert isinstance(v, dt.timedelta)
    us = v // dt.timedelta(microseconds=1)
    sign = "-" if us < 0 else ""
    secs, us = divmod(abs(us), 1_000_000)
    return f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}" + frac(us, fsp)


def raw_bytes(v) -> bytes:
    # Without charset metadata text arrives as str if it is valid UTF-8, else bytes.
    return v.encode("utf-8") if isinstance(v, str) else v


def check_value(spec: dict, tm: TableMap, idx: int, expected, got) -> None:
    kind = spec["kind"]
    if expected is None:
        assert got is None
        return
    if kind == "int":
        want = int(expected)
        if tm.unsigned is None and want >= 1 << (spec["bits"] - 1):
            want -= 1 << spec["bits"]  # documented: no SIGNEDNESS metadata -> signed
        assert type(got) is int and got == want
    elif kind in ("bit", "year"):
        assert type(got) is int and got == int(expected)
    elif kind == "decimal":
        assert isinstance(got, Decimal) and format(got, "f") == expected
    elif kind == "float":
        # The server prints the shortest text that round-trips through float32.
        assert got == struct.unpack("<f", struct.pack("<f", float(expected)))[0]
    elif kind == "double":
        assert got == float(expected)
    elif kind == "date":
        assert (got if isinstance(got, str) else got.isoformat()) == expected
        assert isinstance(got, str) or type(got) is dt.date
    elif kind == "datetime":
        assert isinstance(got, str) or got.tzinfo is None
        assert datetime_text(got, spec["fsp"]) == expected
    elif kind == "timestamp":
        assert isinstance(got, str) or got.tzinfo == dt.UTC
        assert datetime_text(got, spec["fsp"]) == expected
    elif kind == "time":
        assert time_text(got, spec["fsp"]) == expected
    elif kind == "text":
        if tm.column_charsets is not None:
            assert got == expected
        else:
            assert raw_bytes(got) == expected.encode(spec["charset"])
    elif kind == "binary":
        want = bytes.fromhex(expected)
        if tm.column_charsets is None and "length" in spec:
            # Without charset metadata BINARY(n) cannot be told from CHAR(n): the
            # binlog's stripped trailing NULs are not restored (documented).
            want = want.rstrip(b"\0")
        assert raw_bytes(got) == want
        assert tm.column_charsets is None or type(got) is bytes
    elif kind == "digest":
        digest, length = expected.split(":")
        assert type(got) is bytes
        assert (hashlib.sha256(got).hexdigest(), len(got)) == (digest, int(length))
    elif kind == "enum":
        text, number = expected
        assert got == (text if tm.enum_values is not None else int(number))
    elif kind == "set":
        text, number = expected
        if tm.set_values is not None:
            assert got == frozenset(text.split(",") if text else ())
        else:
            assert got == int(number)
    else:
        raise AssertionError(f"unknown kind {kind}")


def columns_of(table: str) -> list[dict]:
    return [{"name": "id", "kind": "int", "bits": 32, "unsigned": False}] + \
        EXPECTED["tables"][table]


def check_image(table: str, tm: TableMap, expected: dict, got: dict, where: str) -> None:
    assert got, where
    for idx, spec in enumerate(columns_of(table)):
        name = tm.column_names[idx]
        if name not in got:
            continue
        try:
            check_value(spec, tm, idx, expected[spec["name"]], got[name])
        except AssertionError as e:
            raise AssertionError(f"{where} column {spec['name']}: expected "
                                 f"{expected[spec['name']]!r}, decoded {got[name]!r}") from e


def row_id(tm: TableMap, row: dict) -> int:
    return row[tm.column_names[0]]


def is_blob(tm: TableMap, i: int) -> bool:
    return tm.column_types[i] in ct.BLOB_TYPES or tm.column_types[i] == ct.GEOMETRY


def check_presence(variant: str, tm: TableMap, kind: str, change: dict, row) -> None:
    """Which columns an image holds, per binlog_row_image."""
    image = EXPECTED["variants"][variant]["settings"]["binlog_row_image"]
    n = tm.column_count
    before = row[0] if kind == "update" else row if kind == "delete" else None
    after = row[1] if kind == "update" else row if kind == "insert" else None
    names = tm.column_names
    if image == "FULL":
        for img in (before, after):
            assert img is None or len(img) == n
    elif image == "MINIMAL" and before is not None:
        # The primary key identifies the row; without one, every column does.
        assert set(before) == (set(names) if tm.table == "nopk" else {names[0]})
    elif image == "NOBLOB" and before is not None:
        assert {names[i] for i in range(n) if not is_blob(tm, i)} <= set(before)
    if kind == "update" and image != "FULL":
        specs = columns_of(tm.table)
        changed = {names[i] for i, s in enumerate(specs)
                   if change["before"][s["name"]] != change["after"][s["name"]]}
        assert changed <= set(after)


# --------------------------------------------------------------------------- fixture tests


def test_fixture_files_are_small_and_from_mariadb():
    assert "MariaDB" in EXPECTED["server_version"]
    assert sum(p.stat().st_size for p in FIXTURES.iterdir()) < 2_000_000


@pytest.mark.parametrize("variant", VARIANTS)
def test_decoded_rows_match_server(variant):
    info = EXPECTED["variants"][variant]
    statements = decoded_statements(variant)
    assert len(statements) == len(info["statements"])
    for n, (got, want) in enumerate(zip(statements, info["statements"])):
        tm = got.table_map
        where = f"{variant} statement {n} ({want['sql'][:80]})"
        assert tm.table == want["table"], where
        kinds = {ch["kind"] for ch in want["changes"]}
        assert {ev.kind for ev in got.events} == kinds, where
        (kind,) = kinds
        rows = got.rows
        assert len(rows) == len(want["changes"]), where
        key = (lambda r, tm=tm: row_id(tm, r[0])) if kind == "update" else (lambda r, tm=tm: row_id(tm, r))
        for row, change in zip(sorted(rows, key=key), want["changes"]):
            w = f"{where} id {change['id']}"
            check_presence(variant, tm, kind, change, row)
            if kind == "update":
                check_image(tm.table, tm, change["before"], row[0], w + " before")
                check_image(tm.table, tm, change["after"], row[1], w + " after")
            else:
                image = change["after"] if kind == "insert" else change["before"]
                check_image(tm.table, tm, image, row, w)


def table_maps(variant: str) -> dict[str, TableMap]:
    return {s.table_map.table: s.table_map for s in decoded_statements(variant)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_table_map_metadata(variant):
    info = EXPECTED["variants"][variant]
    metadata = info["settings"]["binlog_row_metadata"]
    facts = EXPECTED["variants"]["full"]["columns"]  # information_schema, per column
    for table, tm in table_maps(variant).items():
        cols = sorted(facts[table].items(), key=lambda kv: kv[1]["position"])
        assert tm.database == info["database"]
        assert tm.column_count == len(cols)
        if metadata == "FULL":
            assert tm.has_column_names
            assert list(tm.column_names) == [name for name, _ in cols]
            assert tm.primary_key == (None if table == "nopk" else (0,))
        else:
            assert not tm.has_column_names
            assert tm.column_names == tuple(f"col_{i}" for i in range(len(cols)))
            assert tm.primary_key is None and tm.enum_values is None
        if metadata == "NO_LOG":
            assert tm.unsigned is None and tm.column_charsets is None
            continue
        for i, (name, fact) in enumerate(cols):
            assert tm.unsigned[i] == ("unsigned" in fact["column_type"]
                                      or fact["column_type"].startswith("year")), name
            if fact["collation_id"] is not None and "enum" not in fact["column_type"] \
                    and "set(" not in fact["column_type"]:
                assert tm.column_charsets is not None, name
            if tm.column_charsets is not None and tm.column_charsets[i] is not None:
                assert tm.column_charsets[i] == (fact["collation_id"] or ct.BINARY_CHARSET)
        assert tm.nullable[0] is False and all(tm.nullable[1:])


def test_table_map_enum_set_and_geometry_metadata():
    full = table_maps("full")["enums"]
    assert full.enum_values[1] == ("a", "b", "ç😀")
    assert full.enum_values[2] == ("x", "é")
    assert full.enum_values[3] == tuple(f"v{i}" for i in range(1, 301))
    assert full.set_values[4] == ("a", "b", "c")
    assert full.set_values[6] == tuple(f"m{i}" for i in range(64))
    assert full.column_meta[3] == (ct.ENUM, 2) and full.column_meta[6] == (ct.SET, 8)
    assert full.enum_set_charsets[2] == 8  # latin1_swedish_ci
    strs = table_maps("full")["strs"]
    # CHAR(100) utf8mb4 is 400 bytes: its length hides in the real-type byte.
    assert strs.column_meta[2] == (ct.STRING, 400)
    # MariaDB writes GEOMETRY_TYPE with MINIMAL metadata (0 GEOMETRY, 1 POINT, ...).
    assert table_maps("minimal")["geo"].geometry_types == (None, 0, 1, 2, 3)


def test_variants_contain_what_they_claim():
    types = {v: {e.type for e in read_binlog(EXPECTED["variants"][v]["binlog"]).events}
             for v in VARIANTS}
    assert {166, 167, 168} <= types["compressed"]
    assert not {166, 167, 168} & types["full"]
    assert {23, 24, 25} <= types["full"]
    # MINIMAL images really are partial.
    partial = [ev for s in decoded_statements("minimal") for ev in s.events
               if ev.kind == "update" and len(ev.columns_present) < s.table_map.column_count]
    assert partial


def strip_db(statements) -> list:
    return [(s.table_map.table, [(e.kind, e.rows) for e in s.events]) for s in statements]


def test_compressed_decodes_like_uncompressed():
    assert strip_db(decoded_statements("compressed")) == strip_db(decoded_statements("full"))


def test_temporal_representations():
    stmt = next(s for s in decoded_statements("full") if s.table_map.table == "temporal")
    rows = {r["id"]: r for r in stmt.rows}
    assert rows[1]["t0"] == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert rows[1]["ts6"] == dt.datetime(1970, 1, 1, 0, 0, 1, 555555, tzinfo=dt.UTC)
    assert rows[4]["dd"] == "0000-00-00" and rows[4]["dt3"] == "0000-00-00 00:00:00.000"
    assert rows[4]["ts0"] == "0000-00-00 00:00:00"
    assert rows[5]["dd"] == "2024-00-15"
    assert rows[2]["dt6"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)


# --------------------------------------------------------------------------- event variants


def all_rows_events(variant: str):
    """(event type, body, table map, post_header_len) for every rows event."""
    log = read_binlog(EXPECTED["variants"][variant]["binlog"])
    maps = {}
    for ev in log.events:
        if ev.type == 19:
            tm = parse_table_map(ev.body, log.phl(19))
            maps[tm.table_id] = tm
        elif ev.type in ROWS_EVENT_TYPES:
            yield ev.type, ev.body, maps[int.from_bytes(ev.body[:6], "little")], log.phl(ev.type)


def to_v2(etype: int, body: bytes, extra: bytes) -> tuple[int, bytes]:
    # v2 = v1 + u16 extra-data length (counting itself) + extra data after the flags.
    return etype + 7 if etype < 30 else etype + 3, \
        body[:8] + struct.pack("<H", 2 + len(extra)) + extra + body[8:]


@pytest.mark.parametrize("variant", ["full", "minimal", "compressed"])
def test_v2_events_decode_like_v1(variant):
    for etype, body, tm, phl in all_rows_events(variant):
        v1 = parse_rows_event(etype, body, tm, phl)
        for extra in (b"", b"\x00\x01\x02\x03\x04"):
            t2, b2 = to_v2(etype, body, extra)
            v2 = parse_rows_event(t2, b2, tm, 10)
            assert (v2.kind, v2.rows, v2.flags, v2.extra_data) == (v1.kind, v1.rows, v1.flags,
                                                                   extra)


def compress(rows: bytes, length_bytes: int) -> bytes:
    return bytes([0x80 | length_bytes]) + len(rows).to_bytes(length_bytes, "big") + \
        zlib.compress(rows)


def split_rows(etype: int, body: bytes, tm: TableMap) -> tuple[bytes, bytes]:
    """(plain head, row images) of an uncompressed v1 rows event."""
    nbit = (tm.column_count + 7) // 8
    assert tm.column_count < 251
    head = 8 + 1 + nbit * (2 if etype == 24 else 1)
    return body[:head], body[head:]


@pytest.mark.parametrize("length_bytes", [3, 4])
def test_compressed_rows_length_sizes(length_bytes):
    for etype, body, tm, phl in all_rows_events("full"):
        head, rows = split_rows(etype, body, tm)
        if len(rows) >= 1 << (8 * 2) and length_bytes < 3:
            continue
        z = head + compress(rows, length_bytes)
        assert parse_rows_event(etype + 143, z, tm, phl).rows == \
            parse_rows_event(etype, body, tm, phl).rows


def test_uncompress_rows_rejects_bad_input():
    good = compress(b"hello world", 1)
    assert uncompress_rows(good) == b"hello world"
    for bad in (b"", b"\x00" + good[1:], b"\x85" + good[1:], good[:1] + b"\x0c" + good[2:],
                good[:-3], good[:5]):
        with pytest.raises(ValueError):
            uncompress_rows(bad)


def test_iter_rows_streams_the_same_rows():
    for etype, body, tm, phl in all_rows_events("full"):
        it = iter_rows(etype, memoryview(body), tm, phl)
        assert tuple(it) == parse_rows_event(etype, body, tm, phl).rows


def test_table_map_with_four_byte_table_id():
    log = read_binlog("full.binlog")
    body = next(e.body for e in log.events if e.type == 19)
    tm = parse_table_map(body)
    short = body[:4] + body[6:]  # post_header_len 6: u32 table id
    tm4 = parse_table_map(short, post_header_len=6)
    assert tm4.table_id == tm.table_id and tm4.column_names == tm.column_names


def test_identical_table_maps_are_shared():
    log = read_binlog("full.binlog")
    body = next(e.body for e in log.events if e.type == 19)
    assert parse_table_map(body) is parse_table_map(bytearray(body))


# --------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize("variant", ["full", "compressed", "minimal"])
def test_truncated_rows_events_raise_row_decode_error(variant):
    rng = random.Random(7)
    for etype, body, tm, phl in all_rows_events(variant):
        full = parse_rows_event(etype, body, tm, phl).rows
        cuts = sorted(rng.sample(range(len(body)), min(len(body), 25)))
        for cut in cuts:
            try:
                ev = parse_rows_event(etype, body[:cut], tm, phl)
            except RowDecodeError:
                continue
            # A cut exactly between two rows is indistinguishable from a shorter event.
            assert ev.rows == full[:len(ev.rows)]


def _fixed_part_end(body: bytes) -> int:
    """Where a TABLE_MAP body's required fields end (after the NULL bitmap): read here by
    hand, so that the test does not lean on the parser it checks."""
    pos = 8  # table id (6) and flags (2)
    pos += 1 + body[pos] + 1  # database name, NUL
    pos += 1 + body[pos] + 1  # table name, NUL
    columns = body[pos]  # fewer than 251 columns in the fixtures: a one-byte length
    assert columns < 251
    pos += 1 + columns
    meta_length = body[pos]
    assert meta_length < 251
    pos += 1 + meta_length
    return pos + (columns + 7) // 8


def test_truncated_table_maps_raise_row_decode_error():
    """A cut inside the required fields is an error that says where; past them (the optional
    metadata) a cut at a field boundary may still parse, and then names the same table and
    columns, otherwise it is the same error."""
    log = read_binlog("full.binlog")
    bodies = {e.body for e in log.events if e.type == 19}
    assert len(bodies) > 5
    for body in bodies:
        whole = parse_table_map(body)
        fixed_end = _fixed_part_end(body)
        for cut in range(len(body)):
            try:
                partial = parse_table_map(body[:cut])
            except RowDecodeError as error:
                assert str(error).split(": ")[-2:][0].startswith("bad TABLE_MAP event") or \
                    "bad TABLE_MAP event" in str(error), str(error)
                assert error.offset is not None and error.offset <= cut, (cut, error.offset)
                continue
            assert cut >= fixed_end, f"a cut at {cut} inside the required fields (to {fixed_end}) parsed"
            assert (partial.table_id, partial.database, partial.table, partial.column_types) == (
                whole.table_id, whole.database, whole.table, whole.column_types)


@cache
def small_rows_events() -> tuple:
    return tuple(e for v in ("full", "minimal", "compressed") for e in all_rows_events(v)
                 if len(e[1]) < 4000)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_rows_events_fail_cleanly(data):
    """One byte of a rows event changed: it decodes to rows of the right table, or fails with
    RowDecodeError naming that table; nothing else escapes."""
    etype, body, tm, phl = data.draw(st.sampled_from(small_rows_events()))
    pos = data.draw(st.integers(0, len(body) - 1))
    corrupted = bytearray(body)
    corrupted[pos] = data.draw(st.integers(0, 255))
    try:
        decoded = parse_rows_event(etype, bytes(corrupted), tm, phl)
    except RowDecodeError as error:
        if error.table is not None:
            assert (error.database, error.table) == (tm.database, tm.table)
            assert f"{tm.database}.{tm.table}" in str(error)
        else:
            assert str(error), "an error without a message"
        return
    assert (decoded.database, decoded.table) == (tm.database, tm.table)
    images = [image for row in decoded.rows for image in (row if isinstance(row, tuple) else (row,))]
    assert decoded.rows and all(set(image) <= set(tm.column_names) for image in images)


def test_error_names_table_column_type_and_offset():
    strs = next(s for s in decoded_statements("full") if s.table_map.table == "strs")
    log = read_binlog("full.binlog")
    body = next(e.body for e in log.events if e.type == 23 and e.body[:6] ==
                strs.table_map.table_id.to_bytes(6, "little"))
    with pytest.raises(RowDecodeError) as err:
        parse_rows_event(23, body[:60], strs.table_map, 8)
    e = err.value
    assert e.database == "rows_full" and e.table == "strs"
    assert e.column_name is not None and e.offset is not None
    msg = str(e)
    assert "rows_full.strs" in msg and repr(e.column_name) in msg
    assert ct.type_name(e.column_type) in msg and f"byte offset {e.offset}" in msg


def test_rows_event_for_another_table_is_rejected():
    maps = list(table_maps("full").values())
    etype, body, tm, phl = next(all_rows_events("full"))
    other = next(m for m in maps if m.table_id != tm.table_id)
    with pytest.raises(RowDecodeError):
        parse_rows_event(etype, body, other, phl)
    with pytest.raises(RowDecodeError):
        parse_rows_event(39, body, tm, phl)  # MySQL PARTIAL_UPDATE_ROWS: unsupported


# --------------------------------------------------------------------------- table map charsets


def test_mysql_flavor_table_map_charsets():
    # db "d", table "t", columns GEOMETRY, VARCHAR(10); COLUMN_CHARSET lists only the
    # VARCHAR for MySQL, both for MariaDB.
    head = bytes(6) + b"\x01\x00" + b"\x01d\x00\x01t\x00"
    cols = b"\x02" + bytes([ct.GEOMETRY, ct.VARCHAR]) + b"\x03" + b"\x04\x0a\x00" + b"\x03"
    mysql = head + cols + b"\x03\x01\x2d"
    tm = parse_table_map(mysql, flavor="mysql")
    assert tm.column_charsets == (None, 45)
    mariadb = head + cols + b"\x03\x02\x3f\x2d"
    assert parse_table_map(mariadb).column_charsets == (63, 45)
    with pytest.raises(RowDecodeError):
        parse_table_map(mysql)  # one charset for two MariaDB character columns


# --------------------------------------------------------------------------- hand-made events


def lenenc(n: int) -> bytes:
    return bytes([n]) if n < 0xFB else b"\xfc" + struct.pack("<H", n)


def table_map_body(table_id: int, types: bytes, meta: bytes, nullable: bytes,
                   optional: bytes = b"") -> bytes:
    return (table_id.to_bytes(6, "little") + b"\x01\x00" + b"\x01d\x00" + b"\x01t\x00"
            + lenenc(len(types)) + types + lenenc(len(meta)) + meta + nullable + optional)


def test_wide_table_and_empty_image():
    # 300 TINYINT NOT NULL columns: the column count needs a 3-byte lenenc integer.
    n = 300
    tm = parse_table_map(table_map_body(5, bytes([ct.TINY]) * n, b"", bytes((n + 7) // 8)))
    assert tm.column_count == n and tm.column_names[299] == "col_299"
    values = bytes(i % 128 for i in range(n))
    all_cols, no_cols = b"\xff" * 38, bytes(38)
    head = (5).to_bytes(6, "little") + b"\x01\x00" + lenenc(n)
    ev = parse_rows_event(23, head + all_cols + bytes(38) + values, tm)
    assert ev.rows == ({f"col_{i}": i % 128 for i in range(n)},)
    # An update whose after image holds no column at all: an empty null bitmap too.
    upd = parse_rows_event(24, head + all_cols + no_cols + bytes(38) + values, tm)
    assert upd.rows == (({f"col_{i}": i % 128 for i in range(n)}, {}),)
    assert upd.columns_present_after == ()


def test_rows_event_dataclass_is_complete():
    ev = decoded_statements("full")[0].events[0]
    from dataclasses import fields, replace
    assert {f.name for f in fields(RowsEvent)} == set(vars(ev))
    assert replace(ev) == ev and hash(ev.kind) and ev.stmt_end
    with pytest.raises(AttributeError):
        ev.kind = "delete"


def test_null_type_column_consumes_nothing():
    tm = parse_table_map(table_map_body(9, bytes([ct.NULL, ct.LONG]), b"", b"\x01"))
    head = (9).to_bytes(6, "little") + b"\x01\x00" + b"\x02" + b"\x03"
    assert parse_rows_event(23, head + b"\x00" + struct.pack("<i", -5), tm).rows == \
        ({"col_0": None, "col_1": -5},)


def test_empty_columns_present_bitmap_with_row_data_is_an_error():
    # Found by fuzzing: rows with no columns take no bytes, so a decoder that
    # accepted them would loop forever on the remaining data.
    tm = parse_table_map(table_map_body(7, bytes([ct.LONG]), b"", b"\x00"))
    head = (7).to_bytes(6, "little") + b"\x01\x00" + b"\x01"
    assert parse_rows_event(25, head + b"\x00", tm).rows == ()
    with pytest.raises(RowDecodeError, match="empty columns-present"):
        parse_rows_event(25, head + b"\x00" + b"\x00\x01\x00\x00\x00", tm)


# --------------------------------------------------------------------------- generated readers


def rows_by_decoders(event_type: int, body: bytes, tm: TableMap, phl: int) -> list:
    """The reference: each value read by its column's decoder, NULL bits tested one by one."""
    h = rows_module._rows_header(event_type, body, tm, phl)
    buf, pos, out = h.buf, h.start, []
    while pos < len(buf):
        images = []
        for img in (h.before, h.after) if h.after is not None else (h.before,):
            nulls = int.from_bytes(buf[pos:pos + img.null_bytes], "little")
            pos += img.null_bytes
            row = {}
            for bit, i in enumerate(img.indexes):
                if nulls >> bit & 1:
                    row[tm.column_names[i]] = None
                else:
                    row[tm.column_names[i]], pos = tm.decoders[i](buf, pos)
            images.append(row)
        out.append(tuple(images) if h.after is not None else images[0])
    return out


@pytest.mark.parametrize("max_variants", [8, 0])
@pytest.mark.parametrize("binlog", sorted({info["binlog"] for info in EXPECTED["variants"].values()}))
def test_generated_readers_match_the_column_decoders(binlog, max_variants, monkeypatch):
    """Every rows event of the captured files: the generated readers (per pattern of NULLs,
    or past _MAX_VARIANTS the one testing each bit) give the very values of the decoders:
    same types, same Decimal exponents, same text for zero dates (compared by repr)."""
    monkeypatch.setattr(rows_module, "_MAX_VARIANTS", max_variants)
    log = read_binlog(binlog)
    maps: dict[int, TableMap] = {}
    checked = 0
    for ev in log.events:
        if ev.type == 19:
            # a new TableMap each time (not the cached one): readers compiled afresh
            tm = tablemap_module._parse_table_map.__wrapped__(ev.body, log.phl(19), "mariadb")
            maps[tm.table_id] = tm
        elif ev.type in ROWS_EVENT_TYPES:
            tm = maps[int.from_bytes(ev.body[:6], "little")]
            got = parse_rows_event(ev.type, ev.body, tm, log.phl(ev.type)).rows
            want = rows_by_decoders(ev.type, ev.body, tm, log.phl(ev.type))
            assert repr(list(got)) == repr(want), f"{binlog} event at {ev.pos}"
            checked += len(want)
    assert checked >= 50


def test_rows_of_a_statement_sharing_a_timestamp_share_its_value():
    """DATETIME2/TIMESTAMP2 readers reuse the previous row's value when the bytes repeat
    (NOW() in a bulk statement), and only then."""
    types = bytes([ct.LONG, ct.DATETIME2, ct.TIMESTAMP2])
    meta = bytes([6, 3])
    body = (b"\x01\x00\x00\x00\x00\x00" + b"\x00\x00" + b"\x01d\x00" + b"\x01t\x00" + b"\x03" + types
            + bytes([len(meta)]) + meta + b"\x06")
    tm = parse_table_map(body, 8)

    def dt2(y, us):
        return ((((y * 13 + 5) << 5 | 6) << 17 | (7 << 12 | 8 << 6 | 9)) + 0x8000000000).to_bytes(5, "big") \
            + us.to_bytes(3, "big")

    def ts2(secs, us):
        return secs.to_bytes(4, "big") + (us // 100).to_bytes(2, "big")

    values = [(2024, 1, 1000, 100), (2024, 1, 1000, 100), (2024, 2, 1000, 100), (2025, 2, 0, 0)]
    data = b"".join(b"\x00" + struct.pack("<i", n) + dt2(y, us) + ts2(secs, us2)
                    for n, (y, us, secs, us2) in enumerate(values))
    rows_body = b"\x01\x00\x00\x00\x00\x00" + b"\x00\x00" + b"\x03" + b"\x07" + data
    got = parse_rows_event(23, rows_body, tm, 8).rows
    utc = dt.UTC
    assert [r["col_1"] for r in got] == [dt.datetime(2024, 5, 6, 7, 8, 9, 1), dt.datetime(2024, 5, 6, 7, 8, 9, 1),
                                         dt.datetime(2024, 5, 6, 7, 8, 9, 2), dt.datetime(2025, 5, 6, 7, 8, 9, 2)]
    assert [r["col_2"] for r in got] == [dt.datetime(1970, 1, 1, 0, 16, 40, 100, tzinfo=utc)] * 3 \
        + ["0000-00-00 00:00:00.000"]
    assert got[0]["col_1"] is got[1]["col_1"] and got[0]["col_2"] is got[2]["col_2"]
    assert repr(list(got)) == repr(rows_by_decoders(23, rows_body, tm, 8))

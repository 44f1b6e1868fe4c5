"""Change rows (relay.rows.changes): binlogs captured from MariaDB 10.11 (tests/fixtures/rows)
against the values the server reported via SELECT, and transaction envelopes recomposed
from those real events (rollback, savepoints, large groups read again from the file, DDL,
filters), plus the partition planner's group-aligned splits (relay.pipeline.plan)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import struct
import zlib
from functools import partial
from itertools import accumulate
from pathlib import Path

import pytest

from relay.binlog import events as ev
from relay.pipeline import plan as pl
from relay.pipeline.jsonform import row_json
from relay.pipeline.read import iter_changes
from relay.rows.changes import (
    Change,
    ChangeDecodeError,
    ChangeDecoder,
    GtidRange,
    TableFilter,
    _classify,
)
from relay.rows.rows import ROWS_EVENT_TYPES
from relay.storage.scan import iter_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rows"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the server's text


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_value(spec: dict, expected, got) -> None:
    """A value of row_json's JSON against the server's CAST(... AS CHAR) / HEX() text."""
    kind = spec["kind"]
    if expected is None:
        assert got is None
        return
    if kind in ("int", "bit", "year"):
        assert type(got) is int and got == int(expected)
    elif kind == "decimal":
        assert got == expected  # a string with exactly the scale's digits
    elif kind == "float":
        assert f32(got) == f32(float(expected))
        assert repr(got) == repr(float(expected)) or float(expected) == 0  # shortest form
    elif kind == "double":
        assert got == float(expected)
    elif kind in ("date", "datetime", "timestamp", "time", "text"):
        assert got == expected
    elif kind == "binary":
        assert base64.b64decode(got).hex().upper() == expected
    elif kind == "digest":
        digest, length = expected.split(":")
        raw = base64.b64decode(got)
        assert (hashlib.sha256(raw).hexdigest(), len(raw)) == (digest, int(length))
    elif kind in ("enum", "set"):
        assert got == expected[0]
    else:
        raise AssertionError(kind)


def check_image(table: str, expected: dict | None, got_json: str | None, partial: bool = False) -> None:
    if expected is None:
        assert got_json is None
        return
    got = json.loads(got_json)
    assert got["id"] == int(expected["id"])
    specs = {c["name"]: c for c in EXPECTED["tables"][table]}
    if not partial:
        assert set(got) == set(expected)
    for name, value in got.items():
        if name != "id":
            check_value(specs[name], expected[name], value)


def changes_by_gtid(path: Path, **kw) -> dict[str, list[Change]]:
    out: dict[str, list[Change]] = {}
    for c in iter_changes(path, **kw):
        out.setdefault(c.gtid, []).append(c)
    return out


@pytest.mark.parametrize("variant", ["full", "compressed"])
def test_fixture_changes_match_the_server(variant: str) -> None:
    info = EXPECTED["variants"][variant]
    groups = [g for g in changes_by_gtid(FIXTURES / info["binlog"]).values() if g[0].op != "ddl"]
    groups = [g for g in groups if g[0].database == info["database"]]
    assert len(groups) == len(info["statements"])
    for group, stmt in zip(groups, info["statements"]):
        assert [c.seq for c in group] == list(range(len(group)))
        assert len({(c.gtid, c.txn_pos, c.commit_ts) for c in group}) == 1
        assert all(c.table == stmt["table"] and c.query == stmt["sql"] for c in group)
        by_id = {}
        for c in group:
            image = c.after if c.after is not None else c.before
            by_id[image["id"]] = c
        assert sorted(by_id) == [ch["id"] for ch in stmt["changes"]]
        for ch in stmt["changes"]:
            c = by_id[ch["id"]]
            assert c.op == ch["kind"]
            check_image(stmt["table"], ch["before"], row_json(c.before, c.table_map))
            check_image(stmt["table"], ch["after"], row_json(c.after, c.table_map))


def test_minimal_row_images_carry_the_present_columns_only() -> None:
    # binlog_row_metadata=MINIMAL: no names (col_0 = id); binlog_row_image=MINIMAL: before
    # images hold the primary key, after images the columns the statement set.
    info = EXPECTED["variants"]["minimal"]
    groups = [g for g in changes_by_gtid(FIXTURES / info["binlog"]).values()
              if g[0].op != "ddl" and g[0].database == info["database"]]
    assert len(groups) == len(info["statements"])
    for group, stmt in zip(groups, info["statements"]):
        assert [c.op for c in group] == [ch["kind"] for ch in stmt["changes"]]
        for c, ch in zip(group, stmt["changes"]):
            if c.op in ("update", "delete") and stmt["table"] != "nopk":
                assert json.loads(row_json(c.before, c.table_map)) == {"col_0": ch["id"]}
            if c.op == "update":
                changed = [k for k in ch["after"] if ch["after"][k] != ch["before"][k]]
                assert 0 < len(json.loads(row_json(c.after, c.table_map))) <= len(changed) + 1


def test_ddl_rows_carry_statement_gtid_and_database() -> None:
    ddl = [c for c in iter_changes(FIXTURES / "full.binlog") if c.op == "ddl"]
    assert ddl[0].query == "DROP DATABASE IF EXISTS rows_full"
    assert ddl[1].query == "CREATE DATABASE rows_full"
    create = [c for c in ddl if c.query.startswith("CREATE TABLE ints")]
    assert len(create) == 1 and create[0].database == "rows_full" and create[0].table is None
    assert create[0].gtid and create[0].gtid.startswith("0-1-") and create[0].pos > create[0].txn_pos
    assert all(c.before is None and c.after is None and c.seq == 0 for c in ddl)
    assert list(iter_changes(FIXTURES / "full.binlog", with_ddl=False, tables="nothing.here")) == []


# --------------------------------------------------------------------------- envelopes from real events


def fixture_events(name: str = "full.binlog") -> list[tuple[int, bytes]]:
    with open(FIXTURES / name, "rb") as f:
        return [(off, bytes(e)) for off, e in iter_events(f, 4, 1 << 30)]


def make_event(etype: int, body: bytes, server_id: int = 1, timestamp: int = 1_700_000_000) -> bytes:
    head = ev.HEADER.pack(timestamp, etype, server_id, ev.HEADER_LEN + len(body) + 4, 0, 0)
    return ev.with_checksum(head + body)


def query_event(text: str, db: str = "rows_full", timestamp: int = 1_700_000_000) -> bytes:
    post = struct.pack("<IIBHH", 7, 0, len(db), 0, 0)
    return make_event(ev.QUERY_EVENT, post + db.encode() + b"\0" + text.encode(), timestamp=timestamp)


def gtid_event(seq: int, domain: int = 0, standalone: bool = False) -> bytes:
    return make_event(ev.GTID_EVENT, struct.pack("<QIB", seq, domain, 1 if standalone else 0) + b"\0" * 6)


def xid_event(timestamp: int = 1_700_000_100) -> bytes:
    return make_event(ev.XID_EVENT, struct.pack("<Q", 99), timestamp=timestamp)


def statement_parts(table: str = "ints") -> list[list[bytes]]:
    """The (annotate, table map, rows...) event lists of each of the fixture's statements on table."""
    out, current = [], []
    wanted = False
    for _, e in fixture_events():
        if e[4] == ev.ANNOTATE_ROWS_EVENT:
            current = [e]
        elif e[4] == ev.TABLE_MAP_EVENT:
            wanted = b"\x04" + table.encode() + b"\0" in e or (bytes([len(table)]) + table.encode() + b"\0") in e
            current.append(e)
        elif e[4] in ROWS_EVENT_TYPES:
            current.append(e)
            if e[ev.HEADER_LEN + 6] & 1:  # STMT_END_F
                if wanted:
                    out.append(current)
                current = []
    return out


def binlog_of(events: list[bytes]) -> io.BytesIO:
    """The file these events would be in (run feeds them at these offsets)."""
    return io.BytesIO(ev.BINLOG_MAGIC + b"".join(events))


def decoder_for(events: list[bytes], **kw) -> ChangeDecoder:
    return ChangeDecoder("f", partial(iter_events, binlog_of(events)), **kw)


def run(decoder: ChangeDecoder, events: list[bytes]) -> list[Change]:
    out: list[Change] = []
    offset = 4
    for e in events:
        out.extend(decoder.feed(offset, e))
        offset += len(e)
    return out


def fde() -> bytes:
    return fixture_events()[0][1]


def ids(changes: list[Change]) -> list[tuple[str, int]]:
    return [(c.op, (c.after or c.before)["id"]) for c in changes]


def test_rollback_discards_the_group_and_commit_keeps_it() -> None:
    insert, update, *_ = statement_parts("ints")
    events = [fde(), gtid_event(10), *insert, query_event("ROLLBACK"),
              gtid_event(11), *insert, *update, xid_event(1_700_000_555)]
    got = run(decoder_for(events), events)
    assert ids(got) == [("insert", 1), ("insert", 2), ("insert", 3), ("insert", 4), ("update", 1)]
    assert {c.gtid for c in got} == {"0-1-11"}
    assert {c.commit_ts for c in got} == {1_700_000_555}
    assert [c.seq for c in got] == [0, 1, 2, 3, 4]
    assert got[0].query.startswith("INSERT INTO ints") and got[4].query.startswith("UPDATE ints")


def savepoint_group() -> list[bytes]:
    """A transaction with savepoints, a statement-based query and an INTVAR event."""
    insert, update, update2, delete = statement_parts("ints")[:4]
    intvar = make_event(ev.INTVAR_EVENT, b"\x02" + struct.pack("<Q", 5))
    return [fde(), gtid_event(20), *insert, query_event("SAVEPOINT `a`"), *update,
            query_event("SAVEPOINT `b`"), *update2, query_event("ROLLBACK TO b"), *update2,
            query_event("ROLLBACK TO `a`"),
            *delete, intvar, query_event("INSERT INTO notes VALUES (1)"), query_event("SAVEPOINT `c`"),
            *update, query_event("RELEASE SAVEPOINT c"), query_event("SAVEPOINT `d`"), *update2,
            query_event("ROLLBACK TO d"), query_event("COMMIT")]


def test_savepoints_drop_what_rollback_to_undid() -> None:
    events = savepoint_group()
    expected = [("insert", 1), ("insert", 2), ("insert", 3), ("insert", 4), ("delete", 2), ("delete", 4),
                ("statement", "INSERT INTO notes VALUES (1)"), ("update", 1)]
    # Every segment size, so that each ROLLBACK TO meets its undone events in memory, in
    # the span to read again, or straddling both, and the span later grows over the hole.
    total = sum(map(len, events))
    for segment_bytes in [*range(32, total, 32), 1 << 20]:
        decoder = decoder_for(events, segment_bytes=segment_bytes)
        got = run(decoder, events)
        assert [(c.op, c.query if c.op == "statement" else (c.after or c.before)["id"])
                for c in got] == expected, segment_bytes
        assert [c.seq for c in got] == list(range(8))
        if segment_bytes <= 256:  # smaller than one statement's events
            assert decoder.reread_groups == 1
    assert decoder.reread_groups == 0  # 1 << 20: all in memory


def test_big_group_is_read_again_from_the_file_in_order() -> None:
    insert = statement_parts("ints")[0]
    events = [fde(), gtid_event(30)] + insert * 500 + [xid_event()]
    decoder = decoder_for(events, segment_bytes=4096)
    got = run(decoder, events)
    assert len(got) == 2000 and [c.seq for c in got] == list(range(2000))
    assert decoder.reread_groups == 1
    plain = run(decoder_for(events), events)
    assert [c[:13] for c in got] == [c[:13] for c in plain]
    # a rollback after letting go of the events drops them too
    rolled_back = events[:-1] + [query_event("ROLLBACK")]
    assert run(decoder_for(rolled_back, segment_bytes=4096), rolled_back) == []


def test_group_memory_stays_within_a_segment() -> None:
    insert = statement_parts("ints")[0]
    events = [fde(), gtid_event(31)] + insert * 200
    decoder = decoder_for(events, segment_bytes=2048)
    peak = 0
    for offset, e in zip(accumulate([4] + [len(e) for e in events]), events):
        assert list(decoder.feed(offset, e)) == []
        peak = max(peak, decoder._group.mem_bytes if decoder._group else 0)
    assert 0 < peak <= 2048 + max(map(len, insert))


@pytest.mark.parametrize("name", ["full.binlog", "compressed.binlog"])
def test_fixture_groups_read_again_from_the_file_match(name: str) -> None:
    # Real binlogs: every group outgrows a 64-byte segment and is read from the file again.
    decoders: list[ChangeDecoder] = []
    small = list(iter_changes(FIXTURES / name, segment_bytes=64, decoder_out=decoders))
    assert decoders[0].reread_groups > 10
    assert small == list(iter_changes(FIXTURES / name))


def test_binlog_shorter_than_the_group_is_an_error() -> None:
    insert = statement_parts("ints")[0]
    events = [fde(), gtid_event(32)] + insert * 60
    binlog = binlog_of(events)
    decoder = ChangeDecoder("f", partial(iter_events, binlog), segment_bytes=2048)
    run(decoder, events)
    end = len(binlog.getvalue())
    assert decoder._group is not None and decoder._group.span is not None
    binlog.truncate(end - 10)
    with pytest.raises(ChangeDecodeError, match="ends before"):
        list(decoder.feed(end, xid_event()))


def test_standalone_ddl_nontransactional_commit_and_unfinished_group() -> None:
    insert = statement_parts("ints")[0]
    events = [fde(), gtid_event(40, standalone=True), query_event("ALTER TABLE ints ADD x INT", timestamp=5),
              gtid_event(41), *insert, query_event("COMMIT"),  # MyISAM: the group ends with a COMMIT query
              gtid_event(42), *insert]  # no commit yet
    decoder = decoder_for(events)
    got = run(decoder, events)
    assert [(c.op, c.gtid) for c in got] == [("ddl", "0-1-40")] + [("insert", "0-1-41")] * 4
    assert got[0].query == "ALTER TABLE ints ADD x INT" and got[0].commit_ts == 5
    assert got[0].database == "rows_full"
    assert decoder.inside_group
    decoder.close()


def test_gtid_and_table_filters() -> None:
    insert = statement_parts("ints")[0]
    decs = statement_parts("decs")[0]
    events = [fde(), gtid_event(50), *insert, *decs, xid_event(),
              gtid_event(51), *insert, xid_event(),
              gtid_event(52, domain=1), *decs, xid_event()]
    got = run(decoder_for(events, gtids=GtidRange(since={0: 50})), events)
    assert [c.gtid for c in got] == ["0-1-51"] * 4 + ["1-1-52"] * 5
    got = run(decoder_for(events, gtids=GtidRange(until={0: 50, 1: 0})), events)
    assert {c.gtid for c in got} == {"0-1-50"}
    got = run(decoder_for(events, tables=TableFilter("rows_full.decs")), events)
    assert [(c.table, c.seq) for c in got[:5]] == [("decs", s) for s in range(4, 9)]  # seq counts all tables
    assert {c.table for c in got} == {"decs"}
    assert len(run(decoder_for(events, tables=TableFilter("rows_*.*")), events)) == 4 + 5 + 4 + 5


def test_table_filter_on_statements() -> None:
    f = TableFilter("shop.items, shop2.*")
    assert f.wants_table("shop", "items") and not f.wants_table("shop", "items2")
    assert f.wants_statement("shop", "ALTER TABLE `items` ADD c INT")
    assert f.wants_statement(None, "CREATE TABLE shop.items (id INT)")
    assert not f.wants_statement("shop", "CREATE TABLE other (id INT)")
    assert f.wants_statement("x", "DROP DATABASE shop2")
    with pytest.raises(ValueError):
        TableFilter("nodot")


def test_query_classification() -> None:
    assert _classify("BEGIN") == ("begin", None)
    assert _classify("COMMIT") == ("commit", None)
    assert _classify("ROLLBACK") == ("rollback", None)
    assert _classify("ROLLBACK TO `s1`") == ("rollback_to", "s1")
    assert _classify("rollback work to savepoint S1") == ("rollback_to", "s1")
    assert _classify("SAVEPOINT `a``b`") == ("savepoint", "a`b")
    assert _classify("RELEASE SAVEPOINT x") == ("release", "x")
    assert _classify("XA START X'01',X'',1") == ("begin", None)
    assert _classify("XA COMMIT X'01'") == ("xa_end_group", None)
    assert _classify("  /* c */ COMMIT") == ("commit", None)
    assert _classify("CREATE TABLE t (id INT)") == ("statement", None)


def test_mysql_gtid_and_begin_groups() -> None:
    insert = statement_parts("ints")[0]
    sid = bytes(range(16))
    mysql_gtid = make_event(ev.GTID_LOG_EVENT, b"\x01" + sid + struct.pack("<q", 77) + b"\x02" + b"\0" * 16)
    events = [fde(), mysql_gtid, query_event("BEGIN"), *insert, xid_event(),
              mysql_gtid, query_event("CREATE TABLE z (id INT)"),
              query_event("BEGIN"), *insert, query_event("COMMIT")]  # no GTID at all
    got = run(decoder_for(events), events)
    assert got[0].gtid == "00010203-0405-0607-0809-0a0b0c0d0e0f:77"
    assert [c.op for c in got] == ["insert"] * 4 + ["ddl"] + ["insert"] * 4
    assert got[-1].gtid is None and got[-1].txn_pos < got[-1].pos


def test_range_reads_need_only_the_fde() -> None:
    whole = list(iter_changes(FIXTURES / "full.binlog"))
    data = (FIXTURES / "full.binlog").read_bytes()
    middle = [c for c in whole if c.op != "ddl"][20].txn_pos
    tail = list(iter_changes(data, middle, file="full.binlog"))
    assert [c[:13] for c in tail] == [c[:13] for c in whole if c.txn_pos >= middle]


# --------------------------------------------------------------------------- planning


def make_data_dir(tmp_path: Path, names: list[str]) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for i, name in enumerate(names, 1):
        shutil.copyfile(FIXTURES / name, data / f"mysql-bin.{i:06d}")
    (data / "binlog.index").write_text("".join(f"./mysql-bin.{i:06d}\n" for i in range(1, len(names) + 1)))
    return data


def read_plan(p: pl.Plan) -> list[tuple]:
    out = []
    for r in p.ranges:
        out.extend(c[:13] for c in iter_changes(r.path, r.start, r.end, file=r.name, gtids=p.gtids))
    return out


def test_plan_splits_at_group_boundaries(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path, ["full.binlog", "minimal.binlog", "compressed.binlog"])
    whole = pl.plan_ranges(data)
    assert [r.name for r in whole.ranges] == ["mysql-bin.000001", "mysql-bin.000002", "mysql-bin.000003"]
    split = pl.plan_ranges(data, split_bytes=20_000)
    assert len(split.ranges) >= 6  # groups are never cut: the 100 KB blob groups stay whole
    for a, b in zip(split.ranges, split.ranges[1:]):
        assert a.end == b.start or (a.name != b.name and b.start == 4)
    assert read_plan(split) == read_plan(whole)


def test_plan_since_until(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path, ["full.binlog", "minimal.binlog", "compressed.binlog"])
    rows = read_plan(pl.plan_ranges(data))
    files = ["mysql-bin.000001", "mysql-bin.000002", "mysql-bin.000003"]
    key = lambda r: (files.index(r[0]), r[12])  # noqa: E731 - (file, txn_pos)
    pivot = rows[len(rows) // 2]
    since = pl.parse_bound(f"{pivot[0]}:{pivot[12] + 1}")
    got = read_plan(pl.plan_ranges(data, since=since))
    assert got == [r for r in rows if key(r) > key(pivot)]
    until = pl.parse_bound(f"{pivot[0]}:{pivot[12]}")
    assert read_plan(pl.plan_ranges(data, until=until)) == [r for r in rows if key(r) < key(pivot)]
    seq = int(pivot[2].split("-")[2])
    got = read_plan(pl.plan_ranges(data, since=pl.parse_bound(f"0-1-{seq}")))
    assert got == [r for r in rows if int(r[2].split("-")[2]) > seq]
    got = read_plan(pl.plan_ranges(data, until=pl.parse_bound(f"0-1-{seq}")))
    assert got == [r for r in rows if int(r[2].split("-")[2]) <= seq]
    with pytest.raises(pl.PlanError):
        pl.parse_bound("yesterday")
    with pytest.raises(pl.PlanError):
        pl.plan_ranges(data, since=pl.parse_bound("mysql-bin.000009:4"))


def test_readable_end_of_a_growing_file(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path, ["full.binlog"])
    path = data / "mysql-bin.000001"
    full = path.read_bytes()
    ends = pl.group_boundaries(str(path), len(full))
    cut = (ends[-3] + ends[-2]) // 2  # in the middle of a group, maybe of an event
    path.write_bytes(full[:cut])
    tail = pl.TailScanner(data)
    assert pl.latest_position(data, tail) == pl.FilePos("mysql-bin.000001", ends[-3])
    path.write_bytes(full)
    assert tail.readable_end("mysql-bin.000001") == len(full)
    assert zlib.crc32(full)  # the file itself is untouched by reading

"""The transactions view (relay.rows.transactions), sans-IO, on real binlogs: the fixtures MariaDB
10.11 and MySQL 8.0-9.6 wrote (tests/fixtures), against what `mariadb-binlog` prints of them
(tests/support/binlogtext.py) or, where it cannot read a file, against the event headers, the
GTID events' bytes and python-mysql-replication; and against the change view summed per
transaction, under every option (since/until/tables/ddl, groups read again from the file).
Envelopes recomposed from real events (test_changes' helpers) cover rollbacks, savepoints,
statements, DDL, empty and unfinished groups. Then the Spark source's executor side and the
export's --view, without Spark."""

from __future__ import annotations

import argparse
import struct
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import zstandard
from pymysqlreplication import row_event as pmr_rows

from relay.binlog import events as ev
from relay.pipeline import export, source
from relay.pipeline import plan as pl
from relay.pipeline.read import iter_changes, iter_transactions
from relay.rows.changes import Change, GtidRange, TableFilter
from relay.rows.transactions import TableChanges, Transaction, TransactionDecoder
from relay.storage.scan import iter_events
from tests.support.binlogs import file_events
from tests.support.binlogtext import binlog_transactions
from tests.unit.test_changes import (
    binlog_of,
    fde,
    make_data_dir,
    make_event,
    query_event,
    savepoint_group,
    statement_parts,
    xid_event,
)
from tests.unit.test_mysql_rows import pmr_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MARIADB = ["rows/full.binlog", "rows/minimal.binlog", "rows/noblob.binlog", "rows/compressed.binlog",
           "wire/mariadb-10.11-mixed.000001"]
# MySQL files mariadb-binlog reads to the end
MYSQL_READABLE = ["binlog-invisible-columns.000001", "binlog_transaction_previous_GTID_no_tag.000001",
                  "minimal_row_metadata.000001", "mysql-enum-string-set.000001", "mysql_type_bit.000001",
                  "rpl_unfiltered_hidden_gcol.000001", "time_issue.000001"]
# ... and those it stops in (a JSON charset, VECTOR, a tagged GTID, a compressed transaction)
MYSQL_OTHERS = ["json.binlog.000001", "json-opaque.binlog", "vector.binlog",
                "binlog_transaction_with_GTID_TAG.000001", "transaction_compression.000001"]
ALL = MARIADB + [f"mysql/{n}" for n in MYSQL_READABLE + MYSQL_OTHERS]

GTID_EVENTS = {ev.GTID_EVENT, ev.GTID_LOG_EVENT, ev.ANONYMOUS_GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT}
COMMIT_EVENTS = {ev.XID_EVENT, ev.QUERY_EVENT, ev.XA_PREPARE_LOG_EVENT, ev.TRANSACTION_PAYLOAD_EVENT}


def fields(t: Transaction) -> tuple:
    changes = tuple((c.database, c.table, c.inserts, c.updates, c.deletes) for c in t.changes)
    return (t.gtid, t.server_id, t.pos, t.end_pos, t.first_ts, t.commit_ts, t.size, changes, t.statements)


def header_time(event: bytes) -> int:
    return struct.unpack_from("<I", event, 0)[0]


def header_server_id(event: bytes) -> int:
    return struct.unpack_from("<I", event, 5)[0]


# --------------------------------------------------------------------------- against mariadb-binlog


@pytest.mark.parametrize("name", MARIADB + [f"mysql/{n}" for n in MYSQL_READABLE])
def test_fixture_transactions_match_mariadb_binlog(name: str) -> None:
    path = FIXTURES / name
    expected = binlog_transactions(path)
    got = list(iter_transactions(path))
    assert all(t.file == path.name for t in got)
    mine = [fields(t) for t in got]
    theirs = [(t.gtid, t.server_id, t.pos, t.end_pos, t.first_ts, t.commit_ts, t.size, t.changes, t.statements)
              for t in expected]
    if name.startswith("mysql/"):
        # mariadb-binlog prints a MySQL GTID event as "Ignorable": its GTID is read from its bytes here
        theirs = [(mysql_gtid(path, t[2]), *t[1:]) for t in theirs]
    assert mine == theirs
    if name.startswith("rows/"):
        assert len(got) > 30 and sum(len(t.changes) for t in got) >= 30


def mysql_gtid(path: Path, pos: int) -> str | None:
    """The GTID of the MySQL GTID event at pos, read from its bytes: flags (1), the source
    uuid (16), the transaction number (8); None for an anonymous one."""
    event = dict(file_events(path.read_bytes()))[pos]
    if event[4] == ev.ANONYMOUS_GTID_LOG_EVENT:
        return None
    assert event[4] == ev.GTID_LOG_EVENT
    body = event[ev.HEADER_LEN:]
    return f"{uuid.UUID(bytes=bytes(body[1:17]))}:{struct.unpack_from('<q', body, 17)[0]}"


def test_the_mixed_fixture_has_xa_ddl_and_non_transactional_groups() -> None:
    # the file mariadb-binlog is compared on above holds the cases worth naming
    got = list(iter_transactions(FIXTURES / "wire/mariadb-10.11-mixed.000001"))
    gtids = [t.gtid for t in got]
    assert "0-7-8" in gtids  # XA: a transaction at XA PREPARE ...
    assert "0-7-9" not in gtids  # ... and XA COMMIT is not one of its own
    ddl = [t for t in got if not t.changes]
    assert [t.gtid for t in ddl] == ["0-7-1", "0-7-2", "0-7-3", "0-7-11"]
    assert {c.table for t in got for c in t.changes} == {"i", "m"}


# --------------------------------------------------------------------------- MySQL files it cannot read


@pytest.mark.parametrize("name", MYSQL_OTHERS)
def test_mysql_transactions_match_their_event_headers(name: str) -> None:
    path = FIXTURES / "mysql" / name
    data = path.read_bytes()
    events = dict(file_events(data))
    ends = {offset + len(event): event for offset, event in events.items()}
    got = list(iter_transactions(path))
    assert got
    for previous, t in zip([None, *got], got):
        first = events[t.pos]
        assert first[4] in GTID_EVENTS, t
        assert (t.first_ts, t.server_id) == (header_time(first), header_server_id(first))
        last = ends[t.end_pos]
        assert last[4] in COMMIT_EVENTS, t
        if last[4] == ev.TRANSACTION_PAYLOAD_EVENT:
            assert t.commit_ts == header_time(payload_events(last)[-1])  # the XID inside
        else:
            assert t.commit_ts == header_time(last)
        assert previous is None or t.pos >= previous.end_pos
    if name == "binlog_transaction_with_GTID_TAG.000001":  # tests/fixtures/mysql/README.md
        assert [t.gtid for t in got] == ["55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"]
    else:
        assert [t.gtid for t in got] == [mysql_gtid(path, t.pos) for t in got]


def payload_events(payload: bytes) -> list[bytes]:
    """A TRANSACTION_PAYLOAD event's events, decompressed here on their own (the zstd frame
    is the tail of the event before its CRC32)."""
    data = zstandard.ZstdDecompressor().decompressobj().decompress(payload[payload.index(b"\x28\xb5\x2f\xfd"):-4])
    out, pos = [], 0
    while pos < len(data):
        length = struct.unpack_from("<I", data, pos + 9)[0]
        out.append(data[pos:pos + length])
        pos += length
    return out


def test_compressed_transaction_counts_the_rows_inside() -> None:
    path = FIXTURES / "mysql" / "transaction_compression.000001"
    events = file_events(path.read_bytes())
    payload_at, payload = next((o, e) for o, e in events if e[4] == ev.TRANSACTION_PAYLOAD_EVENT)
    inner = list(enumerate(payload_events(payload)))
    [write] = [e for _, e in pmr_events(inner, crc=False) if isinstance(e, pmr_rows.WriteRowsEvent)]
    [t] = list(iter_transactions(path))
    gtid_at, gtid = max((o, e) for o, e in events if o < payload_at)
    assert gtid[4] == ev.ANONYMOUS_GTID_LOG_EVENT
    assert (t.pos, t.end_pos) == (gtid_at, payload_at + len(payload))
    assert t.changes == (TableChanges(write.schema, write.table, len(write.rows), 0, 0),)


def test_json_rows_counted_as_python_mysql_replication_reads_them() -> None:
    # PARTIAL_UPDATE_ROWS (JSON diffs) count as updates, one per row
    path = FIXTURES / "mysql" / "json.binlog.000001"
    theirs = [(o, e) for o, e in pmr_events(file_events(path.read_bytes())) if isinstance(e, pmr_rows.RowsEvent)]
    kinds = {pmr_rows.WriteRowsEvent: 2, pmr_rows.UpdateRowsEvent: 3, pmr_rows.DeleteRowsEvent: 4,
             pmr_rows.PartialUpdateRowsEvent: 3}
    for t in iter_transactions(path):
        expected: dict[tuple[str, str], list[int]] = {}
        for offset, e in theirs:
            if t.pos <= offset < t.end_pos:
                counts = expected.setdefault((e.schema, e.table), [e.schema, e.table, 0, 0, 0])
                counts[kinds[type(e)]] += len(e.rows)
        assert [(c.database, c.table, c.inserts, c.updates, c.deletes) for c in t.changes] == [
            tuple(v) for v in expected.values()]
    assert sum(c.updates for t in iter_transactions(path) for c in t.changes) == 12


# --------------------------------------------------------------------------- the change view, summed


def summed(changes: Iterator[Change]) -> list[tuple]:
    """Per transaction (file, txn_pos): gtid, server_id, commit_ts, rows per table and op in
    the order tables first appear, statements - what the transactions view must say."""
    out: dict[tuple[str, int], dict] = {}
    for c in changes:
        t = out.setdefault((c.file, c.txn_pos), {"gtid": c.gtid, "ts": c.commit_ts, "sid": c.server_id,
                                                 "tables": {}, "statements": 0, "ops": set()})
        t["ops"].add(c.op)
        if c.op == "statement":
            t["statements"] += 1
        elif c.op != "ddl":
            counts = t["tables"].setdefault((c.database, c.table), [0, 0, 0])
            counts[("insert", "update", "delete").index(c.op)] += 1
    return [(pos, t["gtid"], t["ts"], tuple((*k, *v) for k, v in t["tables"].items()), t["statements"])
            for (_, pos), t in out.items()]


def compact(txns: Iterator[Transaction]) -> list[tuple]:
    return [(t.pos, t.gtid, t.commit_ts, fields(t)[7], t.statements) for t in txns]


OPTIONS = [{}, {"with_ddl": False}, {"segment_bytes": 64}, {"tables": "rows_full.ints,rows_*.decs"},
           {"tables": "mysql.t*,test.*,d.m"}, {"tables": "nothing.here"}]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_transactions_are_the_change_view_summed(name: str, options: dict) -> None:
    path = FIXTURES / name
    txns = compact(iter_transactions(path, **options))
    expected = summed(iter_changes(path, **options))
    if options.get("tables"):
        assert txns == expected  # exactly the transactions the change view has rows of
    else:
        # those, and the committed groups that kept no change (e.g. all undone by ROLLBACK TO)
        in_changes = {e[0] for e in expected}
        assert [t for t in txns if t[0] in in_changes] == expected
        assert all(not t[3] and not t[4] for t in txns if t[0] not in in_changes)
    server_ids = {c.txn_pos: c.server_id for c in iter_changes(path, **options)}
    assert all(server_ids.get(t.pos, t.server_id) == t.server_id for t in iter_transactions(path, **options))


def test_gtid_range_keeps_the_groups_the_change_view_keeps() -> None:
    path = FIXTURES / "rows/full.binlog"
    seqs = [int(t.gtid.split("-")[2]) for t in iter_transactions(path)]
    low, high = seqs[5], seqs[-5]
    everything = list(iter_transactions(path))
    for gtids in (GtidRange(since={0: low}), GtidRange(until={0: high}), GtidRange({0: low}, {0: high}),
                  GtidRange(since={1: 0})):
        got = list(iter_transactions(path, gtids=gtids))
        assert got == [t for t in everything if gtids.wants(0, int(t.gtid.split("-")[2]))]
        assert compact(got) == summed(iter_changes(path, gtids=gtids))  # no empty groups in this file
    assert [int(t.gtid.split("-")[2]) for t in iter_transactions(path, gtids=GtidRange({0: low}, {0: high}))] == [
        s for s in seqs if low < s <= high]


def test_plan_since_until_over_a_data_dir(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path, ["full.binlog", "minimal.binlog", "compressed.binlog"])
    files = pl.stored_files(data)

    def read(p: pl.Plan) -> list[Transaction]:
        return [t for r in p.ranges for t in iter_transactions(r.path, r.start, r.end, file=r.name, gtids=p.gtids)]

    everything = read(pl.plan_ranges(data, split_bytes=20_000))
    assert everything == read(pl.plan_ranges(data))  # ranges cut at group ends lose nothing
    assert [t.file for t in everything] == sorted(t.file for t in everything)
    assert len({t.file for t in everything}) == 3

    def key(t):
        return files.index(t.file), t.pos

    pivot = everything[len(everything) // 2]
    since = read(pl.plan_ranges(data, since=pl.parse_bound(f"{pivot.file}:{pivot.pos + 1}")))
    assert since == [t for t in everything if key(t) > key(pivot)]  # from the next group
    since = read(pl.plan_ranges(data, since=pl.parse_bound(f"{pivot.file}:{pivot.pos}")))
    assert since == [t for t in everything if key(t) >= key(pivot)]
    until = read(pl.plan_ranges(data, until=pl.parse_bound(f"{pivot.file}:{pivot.end_pos}")))
    assert until == [t for t in everything if key(t) <= key(pivot)]  # a group ending at until is in
    seq = int(pivot.gtid.split("-")[2])
    got = read(pl.plan_ranges(data, since=pl.parse_bound(f"0-1-{seq - 3}"), until=pl.parse_bound(pivot.gtid)))
    assert got == [t for t in everything if seq - 3 < int(t.gtid.split("-")[2]) <= seq]
    assert got[-1] == pivot and len(got) == 3


# --------------------------------------------------------------------------- envelopes from real events


def gtid_at(seq: int, timestamp: int, domain: int = 0, server_id: int = 1, standalone: bool = False) -> bytes:
    return make_event(ev.GTID_EVENT, struct.pack("<QIB", seq, domain, 1 if standalone else 0) + b"\0" * 6,
                      server_id=server_id, timestamp=timestamp)


def decode(events: list[bytes], **kw) -> tuple[list[Transaction], list[int], TransactionDecoder]:
    """The transactions of these events, and each event's offset in the file they make."""
    decoder = TransactionDecoder("f", partial(iter_events, binlog_of(events)), **kw)
    out, offsets, offset = [], [], 4
    for e in events:
        offsets.append(offset)
        out.extend(decoder.feed(offset, e))
        offset += len(e)
    return out, offsets, decoder


def end_of(events: list[bytes], offsets: list[int], i: int) -> int:
    return offsets[i] + len(events[i])


def test_rollback_is_not_a_transaction_and_tables_come_in_order() -> None:
    ints_insert, ints_update, *_ = statement_parts("ints")
    decs_insert = statement_parts("decs")[0]
    events = [fde(), gtid_at(10, 100), *ints_insert, query_event("ROLLBACK"),
              gtid_at(11, 200, domain=1, server_id=2), *decs_insert, *ints_insert, *ints_update,
              xid_event(timestamp=300)]
    got, offsets, _ = decode(events)
    assert got == [Transaction("f", offsets[len(ints_insert) + 3], end_of(events, offsets, len(events) - 1),
                               "1-2-11", 2, 200, 300,
                               (TableChanges("rows_full", "decs", 5, 0, 0), TableChanges("rows_full", "ints", 4, 1, 0)),
                               0)]
    assert got[0].size == sum(map(len, events[len(ints_insert) + 3:]))


def test_savepoints_statements_and_rereads() -> None:
    events = savepoint_group()  # rows undone by ROLLBACK TO, a statement-based INSERT, an INTVAR
    expected = [(TableChanges("rows_full", "ints", 4, 1, 2),), 1]
    total = sum(map(len, events))
    for segment_bytes in [*range(64, total, 128), 1 << 20]:
        got, offsets, decoder = decode(events, segment_bytes=segment_bytes)
        assert [[t.changes, t.statements] for t in got] == [expected], segment_bytes
        assert (got[0].pos, got[0].end_pos) == (offsets[1], end_of(events, offsets, len(events) - 1))
        if segment_bytes <= 256:
            assert decoder.reread_groups == 1  # counted from the file, read again
    # with a filter, the statement counts when it names a selected table (the change view's rule)
    got, _, _ = decode(events, tables=TableFilter("rows_full.notes"))
    assert [(t.changes, t.statements) for t in got] == [((), 1)]


def test_ddl_unfinished_and_empty_groups() -> None:
    insert = statement_parts("ints")[0]
    events = [fde(), gtid_at(40, 10, standalone=True), query_event("ALTER TABLE ints ADD x INT", timestamp=11),
              gtid_at(41, 12), xid_event(timestamp=13),  # committed with nothing in it
              gtid_at(42, 14), *insert, query_event("COMMIT", timestamp=15),  # MyISAM: a COMMIT query
              gtid_at(43, 16), *insert]  # no commit yet
    got, offsets, decoder = decode(events)
    assert [fields(t) for t in got] == [
        ("0-1-40", 1, offsets[1], end_of(events, offsets, 2), 10, 11, len(events[1]) + len(events[2]), (), 0),
        ("0-1-41", 1, offsets[3], end_of(events, offsets, 4), 12, 13, len(events[3]) + len(events[4]), (), 0),
        ("0-1-42", 1, offsets[5], end_of(events, offsets, 6 + len(insert)), 14, 15,
         sum(map(len, events[5:7 + len(insert)])), (("rows_full", "ints", 4, 0, 0),), 0)]
    assert decoder.inside_group
    decoder.close()
    assert [t.gtid for t in decode(events, with_ddl=False)[0]] == ["0-1-41", "0-1-42"]
    # with tables: the DDL naming one, and groups with its rows; not the empty group
    assert [t.gtid for t in decode(events, tables=TableFilter("rows_full.ints"))[0]] == ["0-1-40", "0-1-42"]
    assert [t.gtid for t in decode(events, tables=TableFilter("rows_full.decs"))[0]] == []


def test_tables_filter_keeps_only_the_selected_tables() -> None:
    ints_insert = statement_parts("ints")[0]
    decs_insert = statement_parts("decs")[0]
    events = [fde(), gtid_at(50, 1), *decs_insert, xid_event(),
              gtid_at(51, 2), *decs_insert, *ints_insert, xid_event()]
    got, offsets, _ = decode(events, tables=TableFilter("rows_full.ints"))
    assert [(t.gtid, t.changes, t.pos) for t in got] == [
        ("0-1-51", (TableChanges("rows_full", "ints", 4, 0, 0),), offsets[len(decs_insert) + 3])]
    both, _, _ = decode(events, tables=TableFilter("rows_full.*"))
    assert [len(t.changes) for t in both] == [1, 2]


def test_mysql_gtid_begin_and_groups_without_gtids() -> None:
    insert = statement_parts("ints")[0]
    sid = bytes(range(16))
    mysql_gtid = make_event(ev.GTID_LOG_EVENT, b"\x01" + sid + struct.pack("<q", 77) + b"\x02" + b"\0" * 16,
                            timestamp=20)
    events = [fde(), mysql_gtid, query_event("BEGIN", timestamp=21), *insert, xid_event(timestamp=22),
              query_event("BEGIN", timestamp=23), *insert, query_event("COMMIT", timestamp=24),
              *insert]  # rows outside any transaction, committed by their statement's last rows event
    got, offsets, _ = decode(events)
    n = len(insert)
    assert [fields(t)[:7] for t in got] == [
        ("00010203-0405-0607-0809-0a0b0c0d0e0f:77", 1, offsets[1], end_of(events, offsets, 3 + n), 20, 22,
         end_of(events, offsets, 3 + n) - offsets[1]),
        (None, 1, offsets[4 + n], end_of(events, offsets, 5 + 2 * n), 23, 24,
         end_of(events, offsets, 5 + 2 * n) - offsets[4 + n]),
        (None, 1, offsets[6 + 2 * n], end_of(events, offsets, len(events) - 1), header_time(insert[0]),
         header_time(insert[-1]), end_of(events, offsets, len(events) - 1) - offsets[6 + 2 * n])]
    assert all(t.changes == (TableChanges("rows_full", "ints", 4, 0, 0),) for t in got)


def test_big_transaction_is_counted_in_bounded_memory() -> None:
    insert = statement_parts("ints")[0]
    events = [fde(), gtid_at(30, 1)] + insert * 500 + [xid_event()]
    got, _, decoder = decode(events, segment_bytes=4096)
    assert decoder.reread_groups == 1
    assert [t.changes for t in got] == [(TableChanges("rows_full", "ints", 2000, 0, 0),)]
    assert got == decode(events)[0]


# --------------------------------------------------------------------------- the Spark source and the export


def test_read_partition_gives_the_transactions_as_arrow_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    path = FIXTURES / "rows/full.binlog"
    rng = pl.FileRange(path.name, str(path), 4, path.stat().st_size)
    monkeypatch.setattr(source, "BATCH_ROWS", 7)
    part = source.BinlogPartition(rng, {}, {}, "rows_full.*", 4 << 20, True, "transactions")
    batches = list(source.read_partition(part))
    assert len(batches) > 3 and all(b.num_rows <= 7 for b in batches)
    rows = [r for b in batches for r in b.to_pylist()]
    expected = list(iter_transactions(path, tables="rows_full.*"))
    assert [list(r) for r in rows] == [source.TRANSACTIONS_COLUMNS] * len(expected)
    assert [(r["gtid"], r["server_id"], r["file"], r["pos"], r["end_pos"], int(r["first_ts"].timestamp()),
             int(r["commit_ts"].timestamp()), r["size"], r["changes"], r["statements"]) for r in rows] == [
        (t.gtid, t.server_id, t.file, t.pos, t.end_pos, t.first_ts, t.commit_ts, t.size,
         [{"database": c.database, "table": c.table, "inserts": c.inserts, "updates": c.updates,
           "deletes": c.deletes} for c in t.changes], t.statements) for t in expected]


def test_view_option_and_schemas() -> None:
    assert source.Options.parse({"path": "/d"}).view == "changes"
    assert source.Options.parse({"path": "/d", "VIEW": " Transactions "}).view == "transactions"
    with pytest.raises(pl.PlanError, match=r"unknown view 'txn'.*valid views: changes, transactions"):
        source.Options.parse({"path": "/d", "view": "txn"})
    assert source.BinlogDataSource({"view": "transactions"}).schema() == source.TRANSACTIONS_SCHEMA
    assert source.BinlogDataSource({}).schema() == source.SCHEMA
    assert source.TRANSACTIONS_SCHEMA.simpleString() == (
        "struct<gtid:string,server_id:bigint,file:string,pos:bigint,end_pos:bigint,first_ts:timestamp,"
        "commit_ts:timestamp,size:bigint,changes:array<struct<database:string,table:string,inserts:bigint,"
        "updates:bigint,deletes:bigint>>,statements:bigint>")


def test_export_has_a_view_option_documented_in_its_help() -> None:
    assert export.VIEWS == source.VIEWS
    parser = argparse.ArgumentParser(prog="binlog-relay export")
    export.add_arguments(parser)
    assert parser.parse_args(["--data-dir", "d", "--out", "o"]).view == "changes"
    assert parser.parse_args(["--data-dir", "d", "--out", "o", "--view", "transactions"]).view == "transactions"
    help_text = parser.format_help()
    for column in source.TRANSACTIONS_COLUMNS:
        assert column in help_text, column
    with pytest.raises(SystemExit):
        parser.parse_args(["--data-dir", "d", "--out", "o", "--view", "rows"])

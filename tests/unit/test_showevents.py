"""SHOW BINLOG EVENTS rows over binlog files MySQL servers wrote (tests/fixtures/mysql): no MySQL
server runs here, so each row is checked against an independent reading of the same event.

Positions, server ids and End_log_pos come from the events' headers (tests/support/binlogs.py);
the values inside the Info texts from python-mysql-replication's decoding of the event (its own
event classes, fed the same bytes), from the fixtures' documented GTIDs, or from zstd itself;
the texts around them are MySQL 8's ``pack_info`` formats (sql/log_event.cc).  The MariaDB
texts are compared with a real MariaDB primary's in tests/integration/test_show_binlog_events.py.
The statement's parts follow MariaDB's grammar (IN, FROM, LIMIT in that order; MySQL's column
lengths its ``Log_event::init_show_field_list``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard
from pymysql.connections import MysqlPacket
from pymysqlreplication import event as pmr
from pymysqlreplication import row_event as pmr_rows
from pymysqlreplication.packet import BinLogPacketWrapper

from relay.downstream.queries import (
    BinlogEventsRequest,
    ServerFacts,
    SessionVariables,
    StreamedRows,
    answer,
    parse_binlog_events,
)
from relay.replication.showevents import EventLister
from tests.support.binlogs import file_events

MYSQL = Path(__file__).resolve().parent.parent / "fixtures" / "mysql"
FIXTURES = sorted(path.name for path in MYSQL.iterdir() if path.name != "README.md")

# What the fixtures' README documents of their PREVIOUS_GTIDS and tagged GTIDs.
DOCUMENTED_PREVIOUS_GTIDS = {
    "binlog-invisible-columns.000001": "",
    "binlog_transaction_previous_GTID_no_tag.000001": "b9b88c66-0755-11f1-9899-4a9da94c4d71:1-2",
}
DOCUMENTED_TAGGED_GTID = "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"


def rows_of(name: str, **walk: int | None) -> tuple[list, str | None]:
    lister = EventLister(name, (MYSQL / name).read_bytes(), **walk)  # type: ignore[arg-type]
    rows = []
    while not lister.done:
        rows += lister.next_rows(max_rows=3)
    return rows, lister.error


class _OfflineConnection:
    """What python-mysql-replication asks of its control connection: no query is sent."""

    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mysql"


def pmr_event(event: bytes, table_map: dict) -> object:
    """python-mysql-replication's decoding of one event, as a dump packet would carry it."""
    allowed = set(BinLogPacketWrapper._BinLogPacketWrapper__event_map.values())
    wrapped = BinLogPacketWrapper(MysqlPacket(b"\x00" + event, "utf8"), table_map, _OfflineConnection(), (8, 0, 0),
                                  True, allowed, None, None, None, None, False, False, False, True, False)
    if isinstance(wrapped.event, pmr_rows.TableMapEvent):
        table_map[wrapped.event.table_id] = wrapped.event.get_table()
    return wrapped.event


def expected_info(decoded: object, event: bytes) -> str | None:
    """MySQL's Info of an event python-mysql-replication decoded; None for those it does not."""
    if isinstance(decoded, pmr.FormatDescriptionEvent):
        return f"Server ver: {decoded.mysql_version_str}, Binlog ver: {decoded.binlog_version[0]}"
    if isinstance(decoded, pmr.QueryEvent):
        suppress_use = int.from_bytes(event[17:19], "little") & 0x8  # LOG_EVENT_SUPPRESS_USE_F (BEGIN)
        use = f"use `{decoded.schema.decode()}`; " if decoded.schema and not suppress_use else ""
        xid = getattr(decoded, "ddl_xid", None)
        return use + decoded.query + (f" /* xid={xid} */" if xid is not None else "")
    if isinstance(decoded, pmr.XidEvent):
        return f"COMMIT /* xid={decoded.xid} */"
    if isinstance(decoded, pmr.RotateEvent):
        return f"{decoded.next_binlog};pos={decoded.position}"
    if isinstance(decoded, pmr_rows.TableMapEvent):
        return f"table_id: {decoded.table_id} ({decoded.schema}.{decoded.table})"
    if isinstance(decoded, pmr_rows.RowsEvent):
        return f"table_id: {decoded.table_id}" + (" flags: STMT_END_F" if decoded.flags & 1 else "")
    if isinstance(decoded, pmr.GtidEvent):
        return f"SET @@SESSION.GTID_NEXT= '{'ANONYMOUS' if event[4] == 34 else decoded.gtid}'"
    if isinstance(decoded, pmr.StopEvent):
        return ""
    return None


@pytest.mark.parametrize("name", FIXTURES)
def test_every_event_is_a_row_at_its_place(name):
    data = (MYSQL / name).read_bytes()
    rows, error = rows_of(name)
    assert error is None
    events = file_events(data)
    assert [(row.log_name, row.pos, row.end_log_pos) for row in rows] == [
        (name, offset, int.from_bytes(event[13:17], "little")) for offset, event in events]
    assert [row.server_id for row in rows] == [int.from_bytes(event[5:9], "little") for _, event in events]


@pytest.mark.parametrize("name", FIXTURES)
def test_info_texts_match_an_independent_decoder(name):
    rows, _ = rows_of(name)
    table_map: dict = {}
    checked = 0
    for row, (_offset, event) in zip(rows, file_events((MYSQL / name).read_bytes()), strict=True):
        if event[4] in (35, 40, 42):  # PREVIOUS_GTIDS, TRANSACTION_PAYLOAD, GTID_TAGGED: below
            continue
        try:
            decoded = pmr_event(event, table_map)
        except (ValueError, AssertionError):  # MySQL 9's VECTOR: python-mysql-replication stops at it
            continue
        expected = expected_info(decoded, event)
        if expected is not None:
            assert row.info.decode() == expected, (row.pos, row.event_type)
            checked += 1
    assert checked >= 2


def test_event_type_names_are_mysqls():
    names = {row.event_type for name in FIXTURES for row in rows_of(name)[0]}
    assert {"Format_desc", "Previous_gtids", "Gtid", "Anonymous_Gtid", "Query", "Table_map", "Write_rows",
            "Update_rows", "Delete_rows", "Update_rows_partial", "Xid", "Rotate", "Stop",
            "Transaction_payload"} <= names, names
    assert not any(name.startswith("MySQL ") or name.endswith("_v1") for name in names), names


def test_previous_gtids_and_a_tagged_gtid():
    for name, gtids in DOCUMENTED_PREVIOUS_GTIDS.items():
        previous = [row for row in rows_of(name)[0] if row.event_type == "Previous_gtids"]
        assert [row.info.decode() for row in previous] == [gtids]
    tagged = [row for row in rows_of("binlog_transaction_with_GTID_TAG.000001")[0] if row.event_type == "Gtid_tagged"]
    assert [row.info.decode() for row in tagged] == [f"SET @@SESSION.GTID_NEXT= '{DOCUMENTED_TAGGED_GTID}'"]


def test_a_compressed_transaction_says_its_algorithm_and_size():
    name = "transaction_compression.000001"
    rows, _ = rows_of(name)
    [(offset, event)] = [(offset, event) for offset, event in file_events((MYSQL / name).read_bytes())
                         if event[4] == 40]
    body = event[19:-4]
    frame_at = body.index(b"\x28\xb5\x2f\xfd")  # the zstd frame's magic number
    decompressed = zstandard.ZstdDecompressor().decompressobj().decompress(body[frame_at:])
    [row] = [row for row in rows if row.pos == offset]
    assert row.event_type == "Transaction_payload"
    assert row.info.decode() == f"compression='ZSTD', decompressed_size={len(decompressed)} bytes"


def test_batches_and_limits_walk_the_same_rows():
    name = "mysql-enum-string-set.000001"
    everything, _ = rows_of(name)
    for offset, count in ((0, 1), (2, 3), (0, 0), (4, 0), (len(everything) - 1, 10), (len(everything) + 5, 2)):
        rows, error = rows_of(name, offset=offset, count=count)
        assert error is None
        expected = everything[:1] if count == 0 else everything[offset:offset + count]
        assert rows == expected, (offset, count)
    middle = everything[len(everything) // 2].pos
    rows, _ = rows_of(name, position=middle)
    assert rows == [row for row in everything if row.pos >= middle]


def test_positions_a_primary_refuses():
    name = "mysql-enum-string-set.000001"
    size = (MYSQL / name).stat().st_size
    everything, _ = rows_of(name)
    assert rows_of(name, position=size + 1) == (
        [], f"Invalid pos specified. Requested from pos:{size + 1} is greater than actual file size:{size}")
    assert rows_of(name, position=size) == ([], None)
    # inside an event: the checksum of what is read there fails
    assert rows_of(name, position=everything[2].pos + 1) == ([], "Wrong offset or I/O error")


# --------------------------------------------------------------------------- the statement


@pytest.mark.parametrize(("sql", "expected"), [
    ("SHOW BINLOG EVENTS", BinlogEventsRequest(None)),
    ("show  binlog\nevents in 'mysql-bin.000002' from 256 limit 2", BinlogEventsRequest("mysql-bin.000002", 256, 0, 2)),
    ("SHOW BINLOG EVENTS LIMIT 2, 3", BinlogEventsRequest(None, 0, 2, 3)),
    ("SHOW BINLOG EVENTS LIMIT 3 OFFSET 2", BinlogEventsRequest(None, 0, 2, 3)),
    ("SHOW BINLOG EVENTS IN 'it''s \\'x\\''", BinlogEventsRequest("it's 'x'")),
    ('SHOW BINLOG EVENTS IN "mysql-bin.000001" FROM 4', BinlogEventsRequest("mysql-bin.000001", 4)),
])
def test_the_statement_s_parts(sql, expected):
    assert parse_binlog_events(sql) == expected


def test_a_mysql_flavoured_history_gets_mysqls_columns():
    """Log_event::init_show_field_list: MySQL's Pos and End_log_pos are 11 digits, MariaDB's 21."""
    facts = ServerFacts(version="8.0.26", server_id=1001, server_uuid="", binlog_checksum="CRC32", is_mariadb=False,
                        gtid_domain_id=0, master_status=lambda: ("", 0, ""), binary_logs=list, slave_hosts=list,
                        binlog_gtid_pos=lambda name, pos: None, gtid_binlog_pos=str)
    reply = answer("SHOW BINLOG EVENTS", SessionVariables(), facts)
    assert isinstance(reply, StreamedRows)
    assert [(c.name, c.column_type, c.length) for c in reply.columns] == [
        ("Log_name", 253, 80), ("Pos", 8, 11), ("Event_type", 253, 80), ("Server_id", 3, 10), ("End_log_pos", 8, 11),
        ("Info", 253, 80)]

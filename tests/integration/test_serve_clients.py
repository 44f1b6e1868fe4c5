"""Binlog clients other than a replica, through the relay: mariadb-binlog --raw and
mysql-replication's BinLogStreamReader see exactly what they see from the primary."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from relay.sandbox.compare import copy_differences
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, find_program
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE, wait_binlog_settled
from tests.support.mariadb import MariaDB
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    dump_events,
    mixed_workload,
)


def _binlog_command(port: int, result_dir: Path, *options: str) -> list[str]:
    return [find_program("mariadb-binlog"), "--read-from-remote-server", "--raw", "--host=127.0.0.1",
            f"--port={port}", f"--user={REPL_USER}", f"--password={REPL_PASSWORD}",
            f"--result-file={result_dir}/", *options, FIRST_FILE]


def _raw_differences(primary: MariaDB, result_dir: Path) -> list[str]:
    """How the files mariadb-binlog wrote differ from the primary's binlogs (empty = identical)."""
    files = [name for name, _ in primary.binlog_files()]
    written = sorted(path.name for path in result_dir.iterdir())
    problems = [] if written == files else [f"files written {written} != primary's {files}"]
    return problems + copy_differences([primary.binlog_path(name) for name in files], result_dir)


# mariadb-binlog --stop-never dumps as server_id 1 unless --stop-never-slave-server-id is given, and 1 is
# also the primary's server_id here (as on many real primaries): a primary sends it everything all the same.
@pytest.mark.parametrize("stop_never_options", [[], ["--stop-never-slave-server-id=77"]],
                         ids=["default-server-id", "own-server-id"])
def test_mariadb_binlog_stop_never_through_the_relay_is_byte_identical(mariadb_factory, relay_factory, tmp_path,
                                                                        stop_never_options):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16384"])
    relay = relay_factory("relay", primary.port)
    result_dir = tmp_path / "follow"
    result_dir.mkdir()
    follower = subprocess.Popen(_binlog_command(relay.port, result_dir, "--stop-never", *stop_never_options),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    last: list[str] = []

    def identical() -> bool:
        nonlocal last
        assert follower.poll() is None, f"mariadb-binlog --stop-never exited: {follower.communicate()[0]!r}"
        last = _raw_differences(primary, result_dir)
        return not last

    def wait_identical(message: str) -> None:
        try:
            wait_for(identical, 30, message)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {last}\nrelay log:\n{relay.log_text()[-2000:]}") from None

    try:
        mixed_workload(primary, batches=6)
        assert len(primary.binlog_files()) >= 5
        wait_identical("the files of mariadb-binlog --stop-never never matched the primary's")
        # it follows live: a write after it caught up arrives too
        primary.sql("INSERT INTO shop.kv VALUES ('live', 'tail', 1)")
        wait_identical("a live write did not reach mariadb-binlog --stop-never")
        assert follower.poll() is None
    finally:
        follower.kill()
        follower.wait(10)
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_mariadb_binlog_to_last_log_ends_by_itself(mariadb_factory, relay_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16384"])
    relay = relay_factory("relay", primary.port)
    mixed_workload(primary, batches=6)
    wait_binlog_settled(primary)  # the primary is done writing ...
    wait_for_mirror(primary, relay)  # ... and the relay has everything it wrote
    result_dir = tmp_path / "once"
    result_dir.mkdir()
    once = subprocess.run(_binlog_command(relay.port, result_dir, "--to-last-log"), capture_output=True,
                          timeout=60)
    assert once.returncode == 0, once.stdout + once.stderr
    assert _raw_differences(primary, result_dir) == []
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


# --------------------------------------------------------------------------- pymysqlreplication


def _normalise(value: object) -> object:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):  # JSON columns
        return sorted((str(k), _normalise(v)) for k, v in value.items())
    return value


def _row_values(event: object) -> list[object]:
    if not isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
        return []
    rows = []
    for row in event.rows:
        rows.append(tuple((key, [_normalise(v) for v in row[key].values()])
                          for key in ("values", "before_values", "after_values") if key in row))
    return rows


def _read_events(port: int, server_id: int) -> list[tuple[str, int, object]]:
    settings = {"host": "127.0.0.1", "port": port, "user": REPL_USER, "password": REPL_PASSWORD}
    stream = BinLogStreamReader(connection_settings=settings, server_id=server_id, blocking=False,
                                resume_stream=True, log_file=FIRST_FILE, log_pos=4)
    try:
        return [(type(event).__name__, event.packet.log_pos, _row_values(event)) for event in stream]
    finally:
        stream.close()


def _typed_workload(primary: MariaDB) -> None:
    primary.execute_many([
        "CREATE DATABASE typed",
        "CREATE TABLE typed.t (id INT PRIMARY KEY, i BIGINT, s VARCHAR(50), d DECIMAL(12,3), f DOUBLE,"
        " dt DATETIME, ts TIMESTAMP(3) NULL, b VARBINARY(20), e ENUM('x','y','z'), txt TEXT, n INT NULL)",
        "INSERT INTO typed.t VALUES (1, -9000000000, 'one', 123.456, 1.5, '2024-02-29 12:34:56',"
        " '2024-03-01 00:00:00.125', X'00FF10', 'y', 'long text', NULL),"
        " (2, 42, 'two', -0.001, -2.25e10, '1999-12-31 23:59:59', NULL, '', 'z', '', 7),"
        " (3, 0, 'three', 0, 0, '2000-01-01 00:00:00', '2030-01-01 01:02:03.004', X'41', 'x', NULL, 3)",
        "UPDATE typed.t SET s = CONCAT(s, '!'), n = IFNULL(n, 0) + 1 WHERE id < 3",
        "BEGIN",
        "INSERT INTO typed.t (id, i, s) VALUES (10, 10, 'ten')",
        "UPDATE typed.t SET d = d + 1 WHERE id = 3",
        "DELETE FROM typed.t WHERE id = 2",
        "COMMIT",
        "FLUSH BINARY LOGS",
        "DELETE FROM typed.t WHERE id = 1",
        "INSERT INTO typed.t (id, txt) VALUES (11, REPEAT('w', 3000))",
    ])


@pytest.mark.parametrize("checksum", ["CRC32", "NONE"])
def test_mysql_replication_reader_sees_what_the_primary_sends(mariadb_factory, relay_factory, checksum):
    primary = mariadb_factory(server_id=1, extra_args=[f"--binlog-checksum={checksum}", "--binlog-row-metadata=FULL"])
    assert primary.sql("SELECT @@GLOBAL.binlog_checksum")[0][0] == checksum
    relay = relay_factory("relay", primary.port)
    _typed_workload(primary)
    wait_binlog_settled(primary)  # (else the direct and the relayed read may differ by a late checkpoint)
    wait_for_mirror(primary, relay)
    conn = pymysql.connect(host="127.0.0.1", port=relay.port, user=REPL_USER, password=REPL_PASSWORD)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'BINLOG_CHECKSUM'")
            assert cur.fetchall() == (("binlog_checksum", checksum),)
    finally:
        conn.close()

    direct = _read_events(primary.port, server_id=91)
    relayed = _read_events(relay.port, server_id=92)
    rows_events = [e for e in direct if e[2]]
    assert len(rows_events) == 7, [e[:2] for e in direct]  # the workload's row events were decoded
    assert {name for name, _, _ in direct} >= {"WriteRowsEvent", "UpdateRowsEvent", "DeleteRowsEvent",
                                               "QueryEvent", "XidEvent", "RotateEvent", "FormatDescriptionEvent"}
    assert relayed == direct
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


# mariadb_slave_capability -> what a MariaDB primary does to the events such a replica cannot parse
GTID_EVENT, GTID_LIST_EVENT, BINLOG_CHECKPOINT_EVENT, ANNOTATE_ROWS_EVENT, QUERY_EVENT = 162, 163, 161, 160, 2


@pytest.mark.parametrize("capability", [None, 1, 2, 3])
def test_replicas_without_gtid_support_get_what_the_primary_sends_them(mariadb_factory, relay_factory,
                                                                        capability):
    """GTID events become BEGIN (or same-sized dummies), events the replica cannot parse become
    dummies or, from capability 2 on, are left out: byte for byte as the primary does it."""
    primary = mariadb_factory(server_id=1, extra_args=["--binlog-format=ROW"])
    relay = relay_factory("relay", primary.port)
    mixed_workload(primary, batches=2)
    primary.execute_many(["CREATE TABLE shop.standalone (id INT) ENGINE=MyISAM",
                          "INSERT INTO shop.standalone VALUES (1)"])  # a GTID without BEGIN/COMMIT
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    sent_types: set[int] = set()
    for file, _ in primary.binlog_files():
        direct = dump_events(primary.port, file, 4, 77, register=False, capability=capability)
        relayed = dump_events(relay.port, file, 4, 78, register=False, capability=capability)
        stored = [(e.log_pos, e.data) for e in direct if e.log_pos]  # not the fake ROTATE
        assert [(e.log_pos, e.data) for e in relayed if e.log_pos] == stored, file
        sent_types |= {e.type for e in direct}
    assert GTID_EVENT not in sent_types and GTID_LIST_EVENT not in sent_types and QUERY_EVENT in sent_types
    assert (ANNOTATE_ROWS_EVENT in sent_types) == (capability == 1)  # (the dump did not ask for them)
    assert (BINLOG_CHECKPOINT_EVENT in sent_types) == (capability == 3)
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()

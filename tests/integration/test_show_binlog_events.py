"""SHOW BINLOG EVENTS answered by the relay from its stored files as the primary answers it from
its own: for the same statement, the same column definitions (name, type, length, flags,
decimals, character set), the same rows, or the same error.

One primary writes a varied history (DDL with awkward names, row-based inserts, updates and
deletes, a statement cut into many rows events, a multi-statement transaction, statement-based
ones with user variables of every type, INSERT_ID, LAST_INSERT_ID, RAND and session options,
LOAD DATA, XA, three GTID domains, compressed events, MyISAM, a restart of the primary (STOP)
and several files), the relay ingests it, and every statement below goes to both.  The positions
and file sizes the statements use are read from the primary's own answers, never from the relay's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess, start_relay
from tests.support.mariadb import MariaDB, MariaDBFactory
from tests.support.relay import wait_for_mirror
from tests.support.s3 import REGION, S3Server

ER_ERROR_WHEN_EXECUTING_COMMAND = 1220
ER_PARSE_ERROR = 1064
MANY_EVENTS = 600  # autocommit inserts in one file: more events than one batch of the relay's walk


@dataclass
class World:
    primary: MariaDB
    relay: RelayProcess
    files: list[tuple[str, int]]  # the primary's SHOW BINARY LOGS
    primary_conn: pymysql.connections.Connection
    relay_conn: pymysql.connections.Connection


def _workload(primary: MariaDB, load_file: Path) -> None:
    conn = primary.connect()
    try:
        with conn.cursor() as cur:
            def run(*statements: str) -> None:
                for statement in statements:
                    cur.execute(statement)

            run("CREATE DATABASE `we``ird`", "USE `we``ird`",
                "CREATE TABLE `t``1` (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(200), n BIGINT UNSIGNED,"
                " d DOUBLE, e DECIMAL(20,6)) ENGINE=InnoDB",
                "CREATE TABLE m (id INT) ENGINE=MyISAM",
                # row-based: insert, update, delete, a statement of many rows events, a transaction
                "INSERT INTO `t``1` (v, n) VALUES ('a', 1), ('b', 2)",
                "UPDATE `t``1` SET n = n + 1", "DELETE FROM `t``1` WHERE v = 'a'",
                "INSERT INTO `t``1` (v) SELECT REPEAT('z', 100) FROM seq_1_to_3000",
                "BEGIN", "INSERT INTO `t``1` (v) VALUES ('in a transaction')",
                "UPDATE `t``1` SET v = 'updated' WHERE v = 'b'", "DELETE FROM `t``1` WHERE id > 100", "COMMIT",
                "INSERT INTO m VALUES (1)",
                # statement-based, with every kind of user variable and logged session setting
                "SET SESSION binlog_format = STATEMENT",
                "SET @s = 'h\u00e9llo', @l = _latin1 'x', @b = _binary 'ab\\0c', @i = -5,"
                " @u = CAST(18446744073709551615 AS UNSIGNED), @r1 = 1.5e-7, @r2 = 0.1, @r3 = 1e100, @r4 = -2.5,"
                " @r5 = 123456789012345680000, @r6 = 1e-20, @d1 = 123.456, @d2 = -0.000100, @d3 = 98765432109876.5,"
                " @nothing = NULL",
                "INSERT INTO `t``1` (v, n, d, e) VALUES (@s, @u, @r1, @d1), (@l, @i + 10, @r2, @d2), (@b, 7, @r3, @d3)",
                "INSERT INTO `t``1` (v, d) VALUES (@nothing, @r4), ('r', @r5), ('r6', @r6)",
                "INSERT INTO `t``1` (v, n) VALUES ('random', FLOOR(RAND() * 100))",
                "SET @ip = CAST('::1' AS INET6), @big = CAST(-9223372036854775808 AS SIGNED)",
                "INSERT INTO `t``1` (v, d) VALUES (@ip, @big)",
                "INSERT INTO `t``1` (v) VALUES (LAST_INSERT_ID())",
                "SET SESSION foreign_key_checks = 0, unique_checks = 0",
                "INSERT INTO `t``1` (v) VALUES ('two options')",
                "SET SESSION foreign_key_checks = 1, unique_checks = 1, sql_auto_is_null = 1,"
                " check_constraint_checks = 0",
                "INSERT INTO `t``1` (v) VALUES ('other options')",
                "SET SESSION sql_auto_is_null = 0, check_constraint_checks = 1",
                f"LOAD DATA INFILE '{load_file}' INTO TABLE `t``1` (n, v)",
                "SET SESSION binlog_format = ROW",
                # XA (letters in the XID: its hex case), a one-phase one
                "XA START 'gz', 'q', 3", "INSERT INTO `t``1` (v) VALUES ('xa')", "XA END 'gz', 'q', 3",
                "XA PREPARE 'gz', 'q', 3", "XA COMMIT 'gz', 'q', 3",
                "XA START 'one'", "INSERT INTO `t``1` (v) VALUES ('xa one phase')", "XA END 'one'",
                "XA COMMIT 'one' ONE PHASE",
                # other GTID domains: the next files' GTID_LIST holds three
                "SET SESSION gtid_domain_id = 5", "INSERT INTO `t``1` (v) VALUES ('domain 5')",
                "SET SESSION gtid_domain_id = 3", "INSERT INTO `t``1` (v) VALUES ('domain 3')",
                "SET SESSION gtid_domain_id = 0",
                "FLUSH BINARY LOGS")
            # compressed events: the sessions opened after the global change get them
            run("SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
    finally:
        conn.close()
    conn = primary.connect(database="we`ird")
    try:
        with conn.cursor() as cur:
            for statement in ("SET SESSION binlog_format = STATEMENT",
                              "INSERT INTO `t``1` (v) VALUES ('a compressed statement')",
                              "SET SESSION binlog_format = ROW",
                              "INSERT INTO `t``1` (v) VALUES ('compressed rows, long enough to be worth it')",
                              "SET GLOBAL log_bin_compress = OFF", "ALTER TABLE `t``1` ADD COLUMN w INT"):
                cur.execute(statement)
            for number in range(MANY_EVENTS):
                cur.execute("INSERT INTO `t``1` (v) VALUES (%s)", (f"row {number}",))
    finally:
        conn.close()
    primary.restart()  # a STOP event ends the file
    primary.execute_many(["INSERT INTO `we``ird`.`t``1` (v) VALUES ('after the restart')", "FLUSH BINARY LOGS",
                          "INSERT INTO `we``ird`.`t``1` (v) VALUES ('in the newest file')"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, mariadb_template_parent: Path) -> Iterator[World]:
    factory = MariaDBFactory(lambda name: tmp_path_factory.mktemp(f"showevents-{name}-"))
    work = tmp_path_factory.mktemp("showevents-relay")
    load_file = work / "load.tsv"
    load_file.write_text("1\tloaded one\n2\tloaded two\n")
    try:
        primary = factory(server_id=1)
        relay = start_relay(work, primary.port)
        try:
            _workload(primary, load_file)
            wait_for_mirror(primary, relay, timeout=90)
            primary_conn = primary.connect()
            relay_conn = _relay_conn(relay)
            try:
                yield World(primary, relay, primary.binlog_files(), primary_conn, relay_conn)
            finally:
                primary_conn.close()
                relay_conn.close()
            assert relay.alive()
        finally:
            assert relay.stop() == 0
        assert "Traceback" not in relay.log_text()
    finally:
        factory.close(remove_dirs=True)


# --------------------------------------------------------------------------- the comparison


def _answer(conn: pymysql.connections.Connection, statement: str) -> tuple[Any, ...]:
    """("rows", column definitions, rows) or ("error", code, message)."""
    with conn.cursor() as cur:
        try:
            cur.execute(statement)
        except pymysql.MySQLError as exc:
            return "error", exc.args[0], exc.args[1]
        fields = [(f.name, f.type_code, f.length, f.flags, f.scale, f.charsetnr) for f in cur._result.fields]
        return "rows", fields, cur.fetchall()


def same_answer(world: World, statement: str) -> tuple[Any, ...]:
    """The relay's answer equals the primary's; returns it."""
    theirs = _answer(world.primary_conn, statement)
    ours = _answer(world.relay_conn, statement)
    if ours != theirs and ours[0] == theirs[0] == "rows" and ours[1] == theirs[1]:
        differing = next(i for i, (a, b) in enumerate(zip(ours[2], theirs[2], strict=False)) if a != b) \
            if any(a != b for a, b in zip(ours[2], theirs[2], strict=False)) else min(len(ours[2]), len(theirs[2]))
        pytest.fail(f"{statement}: {len(ours[2])} rows against the primary's {len(theirs[2])}; first difference at "
                    f"row {differing}: relay {ours[2][differing:differing + 1]} primary "
                    f"{theirs[2][differing:differing + 1]}")
    assert ours == theirs, statement
    return theirs


def _events(world: World, name: str) -> list[tuple[Any, ...]]:
    """The primary's rows for a whole file: where the statements below take their positions."""
    answer = _answer(world.primary_conn, f"SHOW BINLOG EVENTS IN '{name}'")
    assert answer[0] == "rows", answer
    return list(answer[2])


# --------------------------------------------------------------------------- the statements


def test_every_file_and_the_first_one_without_in(world):
    assert len(world.files) >= 4, world.files
    first = same_answer(world, "SHOW BINLOG EVENTS")
    assert first[2] and {row[0] for row in first[2]} == {world.files[0][0]}
    types: set[str] = set()
    for name, _size in world.files:
        answer = same_answer(world, f"SHOW BINLOG EVENTS IN '{name}'")
        types |= {row[2] for row in answer[2]}
    # the workload reached every kind of event it was written for
    assert {"Format_desc", "Gtid_list", "Binlog_checkpoint", "Gtid", "Query", "Annotate_rows", "Table_map",
            "Write_rows_v1", "Update_rows_v1", "Delete_rows_v1", "Xid", "Intvar", "User var", "RAND",
            "Begin_load_query", "Execute_load_query", "XA_prepare", "Query_compressed",
            "Write_rows_compressed_v1", "Rotate", "Stop"} <= types, types


def test_from_a_position(world):
    for name, size in world.files:
        events = _events(world, name)
        starts = [row[1] for row in events]
        for position in sorted({starts[1], starts[len(starts) // 2], starts[-1]}):
            same_answer(world, f"SHOW BINLOG EVENTS IN '{name}' FROM {position}")
            same_answer(world, f"SHOW BINLOG EVENTS IN '{name}' FROM {position} LIMIT 3")
        for position in (0, 4, size):  # before the first event, at it, at the file's end (no rows)
            same_answer(world, f"SHOW BINLOG EVENTS IN '{name}' FROM {position}")
    same_answer(world, f"SHOW BINLOG EVENTS FROM {_events(world, world.files[0][0])[3][1]}")


def test_from_a_position_that_is_no_event_start(world):
    name, size = world.files[0]
    events = _events(world, name)
    bad = [5, events[1][1] + 1, (events[2][1] + events[3][1]) // 2, events[-1][1] + 3, size + 1, 10 ** 12]
    for position in bad:
        answer = same_answer(world, f"SHOW BINLOG EVENTS IN '{name}' FROM {position}")
        assert answer[:2] == ("error", ER_ERROR_WHEN_EXECUTING_COMMAND), (position, answer)
    newest = world.files[-1][0]
    same_answer(world, f"SHOW BINLOG EVENTS IN '{newest}' FROM {_events(world, newest)[-1][1] + 7}")


def test_limits(world):
    many = max(world.files, key=lambda file: len(_events(world, file[0])))[0]
    assert len(_events(world, many)) > MANY_EVENTS * 3
    for limit in ("2", "3, 4", "0", "2, 0", "3 OFFSET 2", "100000, 1", f"{MANY_EVENTS * 3 + 7}, 5", "1000000"):
        same_answer(world, f"SHOW BINLOG EVENTS LIMIT {limit}")
        same_answer(world, f"SHOW BINLOG EVENTS IN '{many}' LIMIT {limit}")
    position = _events(world, many)[10][1]
    same_answer(world, f"SHOW BINLOG EVENTS IN '{many}' FROM {position} LIMIT 2, 3")


def test_errors(world):
    for statement in ("SHOW BINLOG EVENTS IN 'nope.000001'", "SHOW BINLOG EVENTS IN ''",
                      "SHOW BINLOG EVENTS IN 'nope' FROM 4 LIMIT 1"):
        answer = same_answer(world, statement)
        assert answer[:2] == ("error", ER_ERROR_WHEN_EXECUTING_COMMAND), answer
    for statement in ("SHOW BINLOG EVENTS LIMIT -1", "SHOW BINLOG EVENTS LIMIT 'a'", "SHOW BINLOG EVENTS LIMIT 1,",
                      "SHOW BINLOG EVENTS FROM -4", f"SHOW BINLOG EVENTS FROM 4 IN '{world.files[0][0]}'"):
        answer = same_answer(world, statement)
        assert answer[:2] == ("error", ER_PARSE_ERROR), answer


def _relay_conn(relay: RelayProcess) -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=relay.port, user=REPL_USER, password=REPL_PASSWORD,
                           connect_timeout=10)


def test_a_file_only_the_archive_holds(mariadb_factory, relay_factory, s3_server: S3Server):
    """A file the relay purged locally once archived is fetched back and shown as the primary,
    which still has it, shows it."""
    primary = mariadb_factory(server_id=1)
    key_id, secret = s3_server.credential_files()
    relay = relay_factory("relay", primary.port,
                          archive={"url": f"s3://{s3_server.bucket}/relay", "endpoint_url": s3_server.endpoint,
                                   "region": REGION, "access_key_id_file": str(key_id),
                                   "secret_access_key_file": str(secret)},
                          storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
    primary.execute_many(["CREATE DATABASE a", "CREATE TABLE a.t (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT)"])
    for _ in range(4):
        primary.execute_many(["INSERT INTO a.t (v) VALUES (REPEAT(UUID(), 200))"] * 3 + ["FLUSH BINARY LOGS"])
    first = primary.binlog_files()[0][0]
    wait_for(lambda: first not in relay.stored_files(), 60, "the relay did not archive and purge its first file")
    world = World(primary, relay, primary.binlog_files(), primary.connect(), _relay_conn(relay))
    try:
        assert same_answer(world, f"SHOW BINLOG EVENTS IN '{first}'")[0] == "rows"
        same_answer(world, "SHOW BINLOG EVENTS LIMIT 3, 4")
        same_answer(world, f"SHOW BINLOG EVENTS IN '{first}' FROM {_events(world, first)[2][1] + 1}")
    finally:
        world.primary_conn.close()
        world.relay_conn.close()
    assert "Traceback" not in relay.log_text()


def test_a_binlog_without_checksums(mariadb_factory, relay_factory):
    """Without checksums a position is checked by adding up event lengths: its own error text."""
    primary = mariadb_factory(server_id=1, extra_args=["--binlog-checksum=NONE"])
    relay = relay_factory("relay", primary.port)
    primary.execute_many(["CREATE DATABASE c", "CREATE TABLE c.t (id INT PRIMARY KEY, v TEXT)",
                          "INSERT INTO c.t VALUES (1, 'one'), (2, 'two')", "UPDATE c.t SET v = 'three'",
                          "FLUSH BINARY LOGS", "DELETE FROM c.t WHERE id = 1"])
    wait_for_mirror(primary, relay, timeout=60)
    primary_conn = primary.connect()
    relay_conn = _relay_conn(relay)
    world = World(primary, relay, primary.binlog_files(), primary_conn, relay_conn)
    try:
        name, size = world.files[0]
        events = _events(world, name)
        assert events[0][5].endswith(", Binlog ver: 4")
        same_answer(world, "SHOW BINLOG EVENTS")
        for position in (events[2][1], events[2][1] + 1, events[1][1] + 2, 5, size, size + 1):
            same_answer(world, f"SHOW BINLOG EVENTS IN '{name}' FROM {position}")
        answer = same_answer(world, f"SHOW BINLOG EVENTS IN '{name}' FROM {events[3][1] + 1}")
        assert answer[0] == "error" and "Invalid input pos" in answer[2], answer
        same_answer(world, f"SHOW BINLOG EVENTS IN '{world.files[-1][0]}' LIMIT 1, 2")
    finally:
        primary_conn.close()
        relay_conn.close()
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()

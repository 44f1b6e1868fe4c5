"""The status statements operators' tools send, answered by the relay as a real MariaDB server in
the same role answers them (relay/downstream/replicastatus.py, globalstatus.py, infoschema.py):

- SHOW SLAVE STATUS and its other names against a real MariaDB replica of the same primary: the same
  columns, in the same order, of the same types (from the column definition packets, as PyMySQL's
  cursor.description gives them); the values that mean the same for both are the same (position,
  threads, lag, the primary's id, the IO and SQL states), with the primary running, stopped, and
  never reached.
- SHOW BINLOG STATUS and the information_schema tables mysqld_exporter reads, against the primary.
- SHOW STATUS: the primary's columns and types, only variable names the primary has, and counters
  that move as the primary's move for the same statements.

One primary, one replica and one relay serve the whole module; the test that stops the primary is
last.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors
import pytest

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.sandbox.relayprocess import RelayProcess, start_relay
from tests.support.mariadb import MariaDB, MariaDBFactory
from tests.support.relay import wait_for_mirror

REPLICA_STATUS = ["SHOW SLAVE STATUS", "SHOW REPLICA STATUS", "SHOW ALL SLAVES STATUS", "SHOW ALL REPLICAS STATUS",
                  "SHOW SLAVE '' STATUS", 'SHOW REPLICA "" STATUS', "SHOW SLAVE STATUS FOR CHANNEL ''"]
# Columns whose values mean the same for the relay and a replica of the same primary, once both hold
# everything the primary wrote.
SAME_MEANING = ("Slave_IO_State", "Master_Host", "Master_User", "Master_Port", "Master_Log_File",
                "Read_Master_Log_Pos", "Relay_Master_Log_File", "Slave_IO_Running", "Slave_SQL_Running",
                "Replicate_Do_DB", "Replicate_Ignore_DB", "Last_Errno", "Last_Error", "Skip_Counter",
                "Exec_Master_Log_Pos", "Until_Condition", "Until_Log_File", "Until_Log_Pos", "Master_SSL_Allowed",
                "Seconds_Behind_Master", "Last_IO_Errno", "Last_IO_Error", "Last_SQL_Errno", "Last_SQL_Error",
                "Master_Server_Id", "Using_Gtid", "SQL_Delay", "SQL_Remaining_Delay", "Slave_SQL_Running_State")
# ... and while neither reaches its primary (the messages differ: each says it in its words)
SAME_WHILE_DOWN = ("Slave_IO_State", "Master_Log_File", "Read_Master_Log_Pos", "Relay_Master_Log_File",
                   "Exec_Master_Log_Pos", "Slave_IO_Running", "Slave_SQL_Running", "Seconds_Behind_Master",
                   "Last_IO_Errno", "Master_Server_Id", "Slave_SQL_Running_State")
EXPORTER_READS = [
    "SELECT page_size, compress_ops, compress_ops_ok, compress_time, uncompress_ops, uncompress_time "
    "FROM information_schema.innodb_cmp",
    "SELECT page_size, buffer_pool_instance, pages_used, pages_free, relocation_ops, relocation_time "
    "FROM information_schema.innodb_cmpmem",
    "SELECT * FROM information_schema.INNODB_CMP",
]


@dataclass(frozen=True)
class World:
    primary: MariaDB
    replica: MariaDB
    relay: RelayProcess
    work: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, mariadb_template_parent: Path) -> Iterator[World]:
    factory = MariaDBFactory(lambda name: tmp_path_factory.mktemp(f"status-{name}-"))
    work = tmp_path_factory.mktemp("status-relays")
    relay = None
    try:
        primary = factory(server_id=1)
        replica = factory(server_id=2)
        replica.change_master(LOOPBACK, primary.port)
        replica.start_slave()
        primary.execute_many(["CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY, total INT)",
                              "INSERT INTO shop.orders VALUES (1, 10)"])
        relay = start_relay(work / "relay", primary.port)
        wait_for_mirror(primary, relay)
        yield World(primary, replica, relay, work)
        assert "Traceback" not in relay.log_text()
    finally:
        if relay is not None:
            relay.close()
        factory.close(remove_dirs=True)


# ------------------------------------------------------------------ asking

@dataclass(frozen=True)
class Answer:
    columns: list[tuple[str, int]]  # name, type code of each column definition
    rows: list[dict[str, Any]]


def _connect_relay(world: World) -> pymysql.connections.Connection:
    return pymysql.connect(host=LOOPBACK, port=world.relay.port, user=REPL_USER, password=REPL_PASSWORD,
                           autocommit=True, connect_timeout=10)


def _ask(conn: pymysql.connections.Connection, sql: str) -> Answer:
    with conn.cursor(pymysql.cursors.DictCursor) as cursor:
        cursor.execute(sql)
        rows = list(cursor.fetchall())
        return Answer([(column[0], column[1]) for column in cursor.description], rows)


def _refusal(conn: pymysql.connections.Connection, sql: str) -> tuple[int, str]:
    with pytest.raises(pymysql.MySQLError) as refused, conn.cursor() as cursor:
        cursor.execute(sql)
    return refused.value.args[0], refused.value.args[1]


def relay(world: World, sql: str) -> Answer:
    conn = _connect_relay(world)
    try:
        return _ask(conn, sql)
    finally:
        conn.close()


def server(db: MariaDB, sql: str) -> Answer:
    conn = db.connect()
    try:
        return _ask(conn, sql)
    finally:
        conn.close()


def _row(answer: Answer) -> dict[str, Any]:
    assert len(answer.rows) == 1, answer.rows
    return answer.rows[0]


def _caught_up(row: dict[str, Any], position: tuple[str, int]) -> bool:
    return ((row["Relay_Master_Log_File"], row["Exec_Master_Log_Pos"]) == position
            and row["Seconds_Behind_Master"] == 0 and row["Slave_SQL_Running_State"].startswith("Slave has read all"))


def _both_caught_up(world: World) -> tuple[dict[str, Any], dict[str, Any]]:
    position = world.primary.master_status()

    def rows() -> tuple[dict[str, Any], dict[str, Any]] | None:
        mine, theirs = _row(relay(world, "SHOW SLAVE STATUS")), world.replica.slave_status()
        return (mine, theirs) if _caught_up(mine, position) and _caught_up(theirs, position) else None

    return wait_for(rows, 30, f"the relay and the replica did not both reach {position}")


# ------------------------------------------------------------------ SHOW SLAVE STATUS

@pytest.mark.parametrize("sql", REPLICA_STATUS)
def test_replica_status_has_the_columns_and_types_of_a_mariadb_replica(world, sql):
    mine, theirs = relay(world, sql), server(world.replica, sql)
    assert mine.columns == theirs.columns
    assert len(mine.rows) == len(theirs.rows) == 1


@pytest.mark.parametrize("sql", ["SHOW SLAVE 'elsewhere' STATUS", "SHOW SLAVE STATUS NONBLOCKING",
                                 "SHOW SLAVE STATUS NOLOCK", "SHOW ALL SLAVES STATUS NOLOCK"])
def test_replica_status_refusals_are_a_mariadb_replicas(world, sql):
    """A connection name it does not have, and the Percona suffixes mysqld_exporter tries first."""
    conn, theirs = _connect_relay(world), world.replica.connect()
    try:
        assert _refusal(conn, sql) == _refusal(theirs, sql)
    finally:
        conn.close()
        theirs.close()


def test_replica_status_values_are_the_relays_position_after_a_write(world):
    world.primary.sql("INSERT INTO shop.orders VALUES (2, 20)")
    mine, theirs = _both_caught_up(world)
    assert {column: mine[column] for column in SAME_MEANING} == {column: theirs[column] for column in SAME_MEANING}
    file, position = world.primary.master_status()
    # the relay's relay log is its copy of the primary's files: the same coordinates
    assert (mine["Relay_Log_File"], mine["Relay_Log_Pos"]) == (file, position)
    assert mine["Relay_Log_Space"] == sum(size for _, size in world.primary.binlog_files())
    assert mine["Slave_IO_Running"] == "Yes" and mine["Seconds_Behind_Master"] == 0
    gtid_binlog_pos = world.primary.sql("SELECT @@gtid_binlog_pos")[0][0]
    assert mine["Gtid_IO_Pos"] == gtid_binlog_pos
    everything = _row(relay(world, "SHOW ALL SLAVES STATUS"))
    assert everything["Gtid_Slave_Pos"] == _row(server(world.replica, "SHOW ALL SLAVES STATUS"))["Gtid_Slave_Pos"] \
        == gtid_binlog_pos
    assert everything["Connection_name"] == "" and everything["Slave_SQL_State"] == mine["Slave_SQL_Running_State"]
    assert everything["Slave_heartbeat_period"] == world.relay.config["upstream"]["heartbeat_period"]


def test_replica_status_of_a_relay_that_never_reached_its_primary_is_a_new_replicas(world):
    """Nothing listens on the port: both retry, show Connecting, no position yet, and error 2003."""
    dead = free_port()
    lonely = start_relay(world.work / "lonely", dead)
    world.replica.sql(f"CHANGE MASTER 'dead' TO MASTER_HOST = '{LOOPBACK}', MASTER_PORT = {dead}, "
                      f"MASTER_USER = '{REPL_USER}', MASTER_PASSWORD = '{REPL_PASSWORD}', MASTER_CONNECT_RETRY = 1")
    world.replica.sql("START SLAVE 'dead'")
    try:
        def failing(answer: Answer) -> dict[str, Any] | None:
            row = _row(answer)
            return row if row["Last_IO_Errno"] else None

        conn = pymysql.connect(host=LOOPBACK, port=lonely.port, user=REPL_USER, password=REPL_PASSWORD)
        try:
            mine = wait_for(lambda: failing(_ask(conn, "SHOW SLAVE STATUS")), 30, "no IO error on the relay")
        finally:
            conn.close()
        theirs = wait_for(lambda: failing(server(world.replica, "SHOW SLAVE 'dead' STATUS")), 30,
                          "no IO error on the replica")
        assert {column: mine[column] for column in SAME_WHILE_DOWN} == \
            {column: theirs[column] for column in SAME_WHILE_DOWN}
        assert mine["Slave_IO_Running"] == "Connecting" and mine["Last_IO_Errno"] == 2003
        assert mine["Last_IO_Error"]
    finally:
        world.replica.sql("STOP SLAVE 'dead'")
        world.replica.sql("RESET SLAVE 'dead' ALL")
        assert lonely.stop() == 0


# ------------------------------------------------------------------ SHOW BINLOG STATUS, information_schema

@pytest.mark.parametrize("sql", ["SHOW BINLOG STATUS", "SHOW MASTER STATUS"])
def test_binlog_status_is_the_primarys(world, sql):
    wait_for_mirror(world.primary, world.relay)
    mine, theirs = relay(world, sql), server(world.primary, sql)
    assert mine == theirs


@pytest.mark.parametrize("sql", EXPORTER_READS)
def test_information_schema_compression_tables_are_empty_with_the_primarys_columns(world, sql):
    mine, theirs = relay(world, sql), server(world.primary, sql)
    assert mine.columns == theirs.columns
    assert mine.rows == [] and theirs.rows  # the relay has no InnoDB, hence no compressed pages


def test_a_column_the_compression_table_lacks_is_refused_as_the_primary_refuses_it(world):
    sql = "SELECT page_size, nonsense FROM information_schema.innodb_cmp"
    conn, theirs = _connect_relay(world), world.primary.connect()
    try:
        assert _refusal(conn, sql) == _refusal(theirs, sql)
    finally:
        conn.close()
        theirs.close()


# ------------------------------------------------------------------ SHOW STATUS

@pytest.mark.parametrize("sql", ["SHOW GLOBAL STATUS", "SHOW STATUS", "SHOW SESSION STATUS LIKE 'Upt%'",
                                 "SHOW GLOBAL STATUS LIKE 'com\\_select'",
                                 "SHOW GLOBAL STATUS WHERE Variable_name = 'Uptime'"])
def test_status_has_the_primarys_columns_and_only_names_it_has(world, sql):
    mine, theirs = relay(world, sql), server(world.primary, sql)
    assert mine.columns == theirs.columns
    names = [row["Variable_name"] for row in mine.rows]
    assert names and set(names) <= {row["Variable_name"] for row in theirs.rows}
    assert names == sorted(names, key=str.lower)


def test_status_counters_move_as_the_primarys_for_the_same_statements(world):
    """On one connection: SHOW GLOBAL STATUS, a SELECT, SHOW GLOBAL STATUS again; then the same around
    another connection's login (only Connections is compared there: when the server reads the other
    connection's COM_QUIT is not for the test to know).  Nothing else talks to either server
    meanwhile (the replica's dump sends no statements)."""

    def deltas(connect: Any) -> dict[str, int]:
        conn = connect()

        def status() -> dict[str, int]:
            rows = _ask(conn, "SHOW GLOBAL STATUS LIKE '%'").rows
            return {row["Variable_name"]: int(row["Value"]) for row in rows if row["Value"].isdigit()}

        try:
            before = status()
            _ask(conn, "SELECT 1")
            after = status()
            connect().close()
            logged_in = status()
        finally:
            conn.close()
        counted = ("Com_select", "Com_show_status", "Questions", "Bytes_received")
        return {**{name: after[name] - before[name] for name in counted},
                "Connections": logged_in["Connections"] - after["Connections"]}

    # the same user on both, so that the logins are the same bytes
    assert deltas(lambda: _connect_relay(world)) == deltas(
        lambda: world.primary.connect(user=REPL_USER, password=REPL_PASSWORD))


def test_status_says_what_the_relay_is_doing(world):
    wait_for_mirror(world.primary, world.relay)
    mine = {row["Variable_name"]: row["Value"] for row in relay(world, "SHOW GLOBAL STATUS").rows}
    theirs = {row["Variable_name"]: row["Value"] for row in server(world.replica, "SHOW GLOBAL STATUS").rows}
    # both replicate from the primary, asynchronously
    for name in ("Slave_running", "Slaves_running", "Rpl_semi_sync_slave_status", "Rpl_semi_sync_master_status"):
        assert mine[name] == theirs[name], name
    assert int(mine["Threads_connected"]) >= 1 and int(mine["Threads_running"]) >= 1
    # everything stored since it started (a fresh data_dir), but each file's 4-byte magic number
    assert int(mine["Binlog_bytes_written"]) == sum(size - 4 for _, size in world.primary.binlog_files())
    assert int(mine["Uptime"]) >= 0 and int(mine["Max_used_connections"]) >= int(mine["Threads_connected"])


# ------------------------------------------------------------------ the primary stopped (last: it stays down)

def test_replica_status_while_the_primary_is_down_is_the_replicas(world):
    _both_caught_up(world)
    world.primary.stop()

    def down(row: dict[str, Any]) -> dict[str, Any] | None:
        return row if row["Slave_IO_Running"] == "Connecting" and row["Last_IO_Errno"] == 2003 else None

    mine = wait_for(lambda: down(_row(relay(world, "SHOW SLAVE STATUS"))), 30, "the relay still reads as connected")
    theirs = wait_for(lambda: down(world.replica.slave_status()), 30, "the replica still reads as connected")
    assert {column: mine[column] for column in SAME_WHILE_DOWN} == \
        {column: theirs[column] for column in SAME_WHILE_DOWN}
    assert mine["Seconds_Behind_Master"] is None and mine["Slave_IO_State"].startswith("Reconnecting")
    status = {row["Variable_name"]: row["Value"] for row in relay(world, "SHOW STATUS LIKE 'Slave_running'").rows}
    assert status == {"Slave_running": "OFF"}

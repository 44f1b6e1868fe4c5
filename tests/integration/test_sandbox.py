"""The MariaDB test harness itself: servers start, log binlogs, survive a crash, stay apart."""

from __future__ import annotations

import pytest

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, MariaDBError
from tests.support.mariadb import MariaDB, MariaDBFactory

BINLOG_MAGIC = b"\xfebin"


def _make_table(server: MariaDB) -> None:
    server.execute_many(
        [
            "CREATE DATABASE t",
            "CREATE TABLE t.kv (k INT PRIMARY KEY, v LONGBLOB NOT NULL) ENGINE=InnoDB",
        ]
    )


def test_primary_writes_land_in_first_binlog(primary: MariaDB) -> None:
    _make_table(primary)
    primary.sql("INSERT INTO t.kv VALUES (%s, %s)", 1, b"x" * 1000)

    assert primary.sql("SELECT k, LENGTH(v) FROM t.kv") == [(1, 1000)]
    files = primary.binlog_files()
    assert [name for name, _ in files] == ["mysql-bin.000001"]
    size = files[0][1]
    assert primary.master_status() == ("mysql-bin.000001", size)
    on_disk = primary.binlog_path("mysql-bin.000001").read_bytes()
    assert len(on_disk) == size
    assert on_disk.startswith(BINLOG_MAGIC)
    assert primary.sql("SELECT @@server_id, @@binlog_format, @@log_bin") == [(1, "ROW", 1)]


def test_flush_binary_logs_opens_second_file(primary: MariaDB) -> None:
    primary.sql("FLUSH BINARY LOGS")

    names = [name for name, _ in primary.binlog_files()]
    assert names == ["mysql-bin.000001", "mysql-bin.000002"]
    assert primary.master_status()[0] == "mysql-bin.000002"
    assert primary.binlog_path("mysql-bin.000002").read_bytes().startswith(BINLOG_MAGIC)


def test_kill_then_start_keeps_data(primary: MariaDB) -> None:
    _make_table(primary)
    primary.sql("INSERT INTO t.kv VALUES (1, 'before crash')")
    old_pid, files_before = primary.pid, primary.binlog_files()

    primary.kill()
    assert not primary.running
    primary.start()

    assert primary.pid != old_pid
    assert primary.sql("SELECT v FROM t.kv") == [(b"before crash",)]
    # The crashed file is kept as it was, and the restarted server writes a new one.
    files_after = primary.binlog_files()
    assert files_after[: len(files_before)] == files_before
    assert len(files_after) == len(files_before) + 1


def test_big_row_and_extra_args(mariadb_factory: MariaDBFactory) -> None:
    server = mariadb_factory(extra_args=["--max-binlog-size=4096", "--binlog-checksum=NONE"])
    assert server.sql("SELECT @@max_binlog_size, @@binlog_checksum") == [(4096, "NONE")]
    _make_table(server)

    # 20 MB in one row: needs max_allowed_packet=1G on both the server and the client.
    server.sql("INSERT INTO t.kv VALUES (1, %s)", b"y" * (20 << 20))

    assert server.sql("SELECT LENGTH(v) FROM t.kv") == [(20 << 20,)]
    assert len(server.binlog_files()) > 1  # 4096-byte max size rotated the log

    server.restart(extra_args=[])
    assert server.sql("SELECT @@binlog_checksum") == [("CRC32",)]


def test_two_servers_in_parallel_are_separate(mariadb_factory: MariaDBFactory) -> None:
    first, second = mariadb_factory(), mariadb_factory()

    assert first.port != second.port
    assert first.datadir != second.datadir
    assert first.sql("SELECT @@server_id") == [(1,)]
    assert second.sql("SELECT @@server_id") == [(2,)]
    first.sql("CREATE DATABASE only_first")
    assert second.sql("SHOW DATABASES LIKE 'only_first'") == []


def test_replica_follows_primary(primary: MariaDB, mariadb_factory: MariaDBFactory) -> None:
    replica = mariadb_factory()
    _make_table(primary)
    primary.sql("INSERT INTO t.kv VALUES (7, 'replicated')")

    replica.change_master(
        "127.0.0.1", primary.port, REPL_USER, REPL_PASSWORD, log_file="mysql-bin.000001", log_pos=4
    )
    replica.start_slave()

    replica.wait_until(
        lambda: replica.slave_status()["Exec_Master_Log_Pos"] == primary.master_status()[1],
        timeout=30,
        what="replica to apply the primary's binlog",
    )
    status = replica.slave_status()
    assert (status["Slave_IO_Running"], status["Slave_SQL_Running"]) == ("Yes", "Yes")
    assert replica.sql("SELECT v FROM t.kv WHERE k = 7") == [(b"replicated",)]
    replica.stop_slave()
    assert replica.slave_status()["Slave_IO_Running"] == "No"


def test_failed_start_shows_error_log(mariadb_factory: MariaDBFactory) -> None:
    server = mariadb_factory(extra_args=["--no-such-option=1"], start=False)

    with pytest.raises(MariaDBError, match="unknown variable 'no-such-option=1'"):
        server.start()
    assert not server.running

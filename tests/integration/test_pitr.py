"""Point-in-time recovery through the relay, with real parts (docs/pitr.md): a base backup of the
primary taken with mariadb-backup under writes, restored into a new server, then the binlogs from
the backup's coordinates up to a moment T replayed from the relay with ``mariadb-binlog
--read-from-remote-server --stop-datetime`` piped into ``mariadb``.  By then the primary has purged
them and the relay's local retention has too: the files the replay needs exist only in the archive
(S3), and the relay serves them back from there.  The restored server must hold exactly what the
primary held at T (CHECKSUM TABLE of every user table, the GTID position), and none of the accident
that followed T (a DROP TABLE, an UPDATE without WHERE).  The runbook's other way is run too: a
second restore replicating from the relay by file/position with ``START SLAVE UNTIL`` the end of the
last transaction before T, found by ``binlog-relay search`` over the archived files fetched with
``mariadb-binlog --raw`` and imported into a scratch data_dir (search reads local files only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, ROOT_USER, find_program
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.storage.index import read_index
from tests.integration.test_archive import (
    _mariadb_binlog,
    archive_config,
    relay_holds_the_primarys_newest,
    relay_sql,
    write_files,
)
from tests.support.faults import metric
from tests.support.replication import WriteLoad, table_checksums, user_tables

TOOL_TIMEOUT = 120


def _mariadb_backup(*args: str) -> None:
    run = subprocess.run([find_program("mariadb-backup"), *args], capture_output=True, text=True,
                         timeout=TOOL_TIMEOUT)
    assert run.returncode == 0, f"mariadb-backup {' '.join(args)}:\n{run.stderr[-3000:]}"


def _backup_coordinates(backup: Path) -> tuple[str, int, str]:
    """(file, position, GTID) of the backup, from the file mariadb-backup writes (the older name
    up to 10.11, the newer one after)."""
    for name in ("mariadb_backup_binlog_info", "xtrabackup_binlog_info"):
        if (backup / name).exists():
            fields = (backup / name).read_text().split()
            return fields[0], int(fields[1]), fields[2] if len(fields) > 2 else ""
    raise AssertionError(f"no binlog info in {sorted(path.name for path in backup.iterdir())}")


def _clock(server: Any) -> int:
    """The server's clock, in the whole seconds its binlog events carry."""
    return int(server.sql("SELECT UNIX_TIMESTAMP()")[0][0])


def _clock_past(server: Any, second: int) -> int:
    """The server's clock once it is past ``second``, else 0."""
    now = _clock(server)
    return now if now > second else 0


def _state(server: Any) -> dict[str, int | None]:
    return table_checksums(server, user_tables(server))


def _replay_from_relay(relay: Any, target: Any, file: str, pos: int, stop: str) -> tuple[str, str]:
    """mariadb-binlog --read-from-remote-server ... | mariadb: (its stderr, the client's output).
    TZ=UTC: --stop-datetime is read in the client's local time zone."""
    dump = [find_program("mariadb-binlog"), "--no-defaults", "--read-from-remote-server", "--host", LOOPBACK,
            "--port", str(relay.port), "--user", REPL_USER, f"--password={REPL_PASSWORD}",
            f"--start-position={pos}", f"--stop-datetime={stop}", "--to-last-log", file]
    client = [find_program("mariadb"), "--no-defaults", "--host", LOOPBACK, "--port", str(target.port),
              "--user", ROOT_USER]
    with subprocess.Popen(dump, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env={**os.environ, "TZ": "UTC"}) as reader, \
            subprocess.Popen(client, stdin=reader.stdout, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT) as applier:
        assert reader.stdout is not None and reader.stderr is not None
        reader.stdout.close()  # the client holds the pipe now: a failing client ends the reader too
        applied = applier.communicate(timeout=TOOL_TIMEOUT)[0].decode(errors="replace")
        read_errors = reader.stderr.read().decode(errors="replace")
        assert reader.wait(TOOL_TIMEOUT) == 0, f"mariadb-binlog failed: {read_errors}"
    assert applier.returncode == 0, f"mariadb failed: {applied}"
    return read_errors, applied


def _cli(*args: str, json_out: bool = True) -> Any:
    run = subprocess.run([sys.executable, "-m", "relay.cli", *args], capture_output=True, text=True,
                         timeout=TOOL_TIMEOUT)
    assert run.returncode == 0, f"binlog-relay {' '.join(args)}: {run.stderr}"
    return json.loads(run.stdout) if json_out else run.stdout


def _stopped_at_until(replica: Any) -> dict[str, Any] | None:
    status = replica.slave_status()
    return status if status.get("Slave_SQL_Running") == "No" else None


@pytest.fixture
def backup_tool() -> None:
    try:
        find_program("mariadb-backup")
    except FileNotFoundError:
        pytest.fail("mariadb-backup is missing: apt-get install -y mariadb-backup (scripts/test.sh installs it)")


def test_a_base_backup_and_the_binlogs_only_the_archive_holds_restore_the_moment_before_an_accident(
        mariadb_factory, relay_factory, s3_server, tmp_path, backup_tool):
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                          archive=archive_config(s3_server),
                          storage={"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}})
    primary.execute_many([
        "CREATE DATABASE shop",
        "CREATE TABLE shop.accounts (id INT PRIMARY KEY, owner VARCHAR(40), balance DECIMAL(12,2)) ENGINE=InnoDB",
        "CREATE TABLE shop.orders (id INT AUTO_INCREMENT PRIMARY KEY, account INT, amount DECIMAL(12,2),"
        " note TEXT) ENGINE=InnoDB",
        "INSERT INTO shop.accounts SELECT seq, CONCAT('owner', seq), seq * 10 FROM shop.seq_1_to_50",
    ])
    write_files(primary, 3)

    # the base backup, taken under writes (the backup's binlog coordinates fall inside a stream of commits)
    backup = tmp_path / "backup"
    with WriteLoad(primary) as load:
        before_backup = wait_for(lambda: load.commits if load.commits > 20 else 0, 30, "the write load did not start")
        _mariadb_backup(f"--defaults-file={primary.cnf_path}", "--backup", f"--target-dir={backup}",
                        f"--user={ROOT_USER}", f"--host={LOOPBACK}", f"--port={primary.port}")
        assert load.stop() > before_backup  # it went on during the backup, and failed nowhere
    _mariadb_backup("--no-defaults", "--prepare", f"--target-dir={backup}")
    backup_file, backup_pos, backup_gtid = _backup_coordinates(backup)
    assert backup_gtid and backup_pos > 4

    # more writes in more files, then the moment T
    for batch in range(3):
        primary.execute_many([
            "INSERT INTO shop.orders (account, amount, note)"
            " SELECT seq, seq / 4, REPEAT('o', 300) FROM shop.seq_1_to_40",
            f"UPDATE shop.accounts SET balance = balance - {batch + 1} WHERE id % 3 = {batch}",
            "FLUSH BINARY LOGS",
        ])
    primary.execute_many(["CREATE TABLE shop.audit (id INT PRIMARY KEY, what VARCHAR(20))",
                          "INSERT INTO shop.audit VALUES (1, 'after the backup')"])
    last_commit = _clock(primary)
    moment = wait_for(lambda: _clock_past(primary, last_commit), 10, "the primary's clock did not move on")
    at_moment = _state(primary)
    gtid_at_moment = primary.sql("SELECT @@gtid_binlog_pos")[0][0]
    file_at_moment = primary.master_status()[0]
    wait_for(lambda: _clock(primary) >= moment + 1, 10, "the primary's clock did not pass the moment")

    # after T: more writes, then the accident
    primary.sql("INSERT INTO shop.audit VALUES (2, 'after the moment')")
    write_files(primary, 2, table="after_moment")
    primary.execute_many(["DROP TABLE shop.orders", "UPDATE shop.accounts SET balance = 0", "FLUSH BINARY LOGS"])

    # the files the replay needs end up only in the archive
    names = [name for name, _ in primary.binlog_files()]
    needed = names[names.index(backup_file):names.index(file_at_moment) + 1]
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "the relay did not catch up")
    wait_for(lambda: metric(relay, "binlog_relay_archive_lag_files") == 0
             and metric(relay, "binlog_relay_archive_files") == len(names) - 1, 60, "the archive did not catch up")
    wait_for(lambda: not set(needed) & set(read_index(relay.data_dir)), 30,
             "the relay's retention did not purge the needed files")
    primary.purge_binlogs_to(names[-1])
    assert not set(needed) & {name for name, _ in primary.binlog_files()}
    served = [row[0] for row in relay_sql(relay, "SHOW BINARY LOGS")]
    assert set(needed) <= set(served), (needed, served)

    # restore the backup into a new server
    restored = mariadb_factory(server_id=2, start=False)
    _mariadb_backup("--no-defaults", "--copy-back", f"--target-dir={backup}", f"--datadir={restored.datadir}")
    restored.start()  # a datadir in place before the first start is used as it is
    assert restored.sql("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'audit'")[0][0] == 0
    assert _state(restored) != at_moment

    # replay from the relay up to T
    stop = datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M:%S")
    served_before = metric(relay, "binlog_relay_archive_served_bytes_total") or 0
    _replay_from_relay(relay, restored, backup_file, backup_pos, stop)
    assert metric(relay, "binlog_relay_archive_served_bytes_total") > served_before

    assert _state(restored) == at_moment
    assert restored.sql("SELECT @@gtid_binlog_pos")[0][0] == gtid_at_moment
    assert restored.sql("SELECT COUNT(*) FROM shop.orders")[0][0] == 120  # the dropped table, as at T
    assert restored.sql("SELECT COUNT(*) FROM shop.accounts WHERE balance = 0")[0][0] == 0  # no bad UPDATE
    assert restored.sql("SELECT what FROM shop.audit ORDER BY id") == [("after the backup",)]

    # the other way (docs/pitr.md): a second restore of the backup replicates from the relay by
    # file/position, until the end of the last transaction before T.  `search` reads local files
    # only, and those start after T; fetched with --raw and imported into a scratch data_dir, the
    # archived files answer it.
    # (until search reads archived files, issue 22: asked the relay's data_dir, it finds nothing before T)
    assert _cli("search", "--data-dir", str(relay.data_dir), "--time", stop)["transaction"] is None
    fetched = tmp_path / "fetched"
    run = _mariadb_binlog(relay.port, backup_file, fetched)
    assert run.returncode == 0, run.stderr
    _cli("import", "--data-dir", str(tmp_path / "scratch"), *map(str, sorted(fetched.iterdir())), json_out=False)
    # one second before T: search's answer includes the second it is given, --stop-datetime's excludes it
    found = _cli("search", "--data-dir", str(tmp_path / "scratch"), "--time", f"@{moment - 1}")
    until_file, until_pos = found["transaction"]["file"], found["transaction"]["end_pos"]
    assert found["gtid_position"] == gtid_at_moment and until_file == file_at_moment
    replica = mariadb_factory(server_id=3, start=False)
    _mariadb_backup("--no-defaults", "--copy-back", f"--target-dir={backup}", f"--datadir={replica.datadir}")
    replica.start()
    replica.change_master(LOOPBACK, relay.port, log_file=backup_file, log_pos=backup_pos)
    replica.sql(f"START SLAVE UNTIL MASTER_LOG_FILE = '{until_file}', MASTER_LOG_POS = {until_pos}")
    status = wait_for(lambda: _stopped_at_until(replica), 60, "the replica did not stop at the UNTIL position")
    assert (status["Relay_Master_Log_File"], int(status["Exec_Master_Log_Pos"])) == (until_file, until_pos), status
    assert not status["Last_SQL_Error"] and not status["Last_IO_Error"], status
    replica.execute_many(["STOP SLAVE", "RESET SLAVE ALL"])
    assert _state(replica) == at_moment
    assert replica.sql("SELECT @@gtid_slave_pos")[0][0] == gtid_at_moment

    # a start the relay does not hold (not local, not archived) is refused with ERR 1236
    missing = subprocess.run([find_program("mariadb-binlog"), "--no-defaults", "--read-from-remote-server",
                              "--host", LOOPBACK, "--port", str(relay.port), "--user", REPL_USER,
                              f"--password={REPL_PASSWORD}", "--to-last-log", "mysql-bin.000000"],
                             capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    assert missing.returncode != 0
    assert "Could not find first log file name in binary log index file" in missing.stderr, missing.stderr
    assert relay.alive() and "Traceback" not in relay.log_text()
    shutil.rmtree(backup, ignore_errors=True)

"""Retention against a real MariaDB primary with small binlogs and many rotations: storage.retention
max_size / max_age / min_files, files in use by a dump are spared, and PURGE BINARY LOGS TO / BEFORE
from an admin user (relay/storage/retention.py, relay/downstream/purge.py)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pymysql
import trio

from relay import app
from relay.config import parse_config
from relay.sandbox.compare import copy_differences
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess, relay_config, start_relay
from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_caught_up
from relay.storage.replicabook import BOOK_FILE
from tests.support.mariadb import MariaDB
from tests.support.metrics import RawDump
from tests.support.replication import assert_healthy

SMALL_BINLOGS = ["--max-binlog-size=16384"]
MAX_SIZE = 60000
RETENTION_PERIOD = 2.0  # relay.app.RETENTION_CHECK_SECONDS
BIG_ROW = 8 << 20  # one event larger than the socket buffers between the relay and a stalled client
ER_SPECIFIC_ACCESS_DENIED = 1227
ER_UNKNOWN_TARGET_BINLOG = 1373
ER_LOG_IN_USE = 1378  # MariaDB: "A purgeable log is in use, will not purge"
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
USERS = [{"name": "repl", "password": "replpass"}, {"name": "dba", "password": "dbapass", "admin": True}]


# ------------------------------------------------------------------ helpers


def _relay(tmp_path: Path, primary: MariaDB, **overrides) -> RelayProcess:
    return start_relay(tmp_path / "relay", primary.port, **overrides)


def _retention(**settings) -> dict:
    return {"sync": "commit", "retention": settings}


def _prepare(primary: MariaDB) -> None:
    primary.execute_many(["CREATE DATABASE ret", "CREATE TABLE ret.t (id INT PRIMARY KEY AUTO_INCREMENT, v TEXT)",
                          "CREATE TABLE ret.big (id INT PRIMARY KEY, v LONGTEXT)"])


def _rotate(primary: MariaDB, count: int, row_bytes: int = 3000) -> None:
    """count x (two inserts, FLUSH BINARY LOGS): count new files of ~7 KB each."""
    for _ in range(count):
        primary.sql(f"INSERT INTO ret.t (v) VALUES (REPEAT('a', {row_bytes})), (REPEAT('b', {row_bytes}))")
        primary.sql("FLUSH BINARY LOGS")


def _big_row(primary: MariaDB, row_id: int) -> None:
    primary.sql(f"INSERT INTO ret.big VALUES ({row_id}, REPEAT('x', {BIG_ROW}))")


def _on_disk(relay: RelayProcess) -> list[str]:
    return sorted(p.name for p in relay.data_dir.glob("mysql-bin.*"))


def _stored_bytes(relay: RelayProcess) -> int:
    return sum((relay.data_dir / name).stat().st_size for name in relay.stored_files())


def _file_number(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def _suffix_mirror_problems(primary: MariaDB, relay: RelayProcess) -> list[str]:
    """The relay's index is a suffix of the primary's list of files ending at its active file, every
    listed file is on disk and byte-identical to the primary's (the active one but for the in-use flag),
    and no file outside the index is left in data_dir."""
    theirs = [name for name, _ in primary.binlog_files()]
    ours = relay.stored_files()
    problems = []
    if not ours or ours != theirs[-len(ours):]:
        return [f"index {ours} is not a suffix of the primary's {theirs}"]
    if _on_disk(relay) != sorted(ours):
        problems.append(f"data_dir holds {_on_disk(relay)}, the index lists {ours}")
    problems += copy_differences([primary.binlog_path(name) for name in ours], relay.data_dir)
    return problems


def _wait_suffix_mirror(primary: MariaDB, relay: RelayProcess, extra: Callable[[], bool] = lambda: True,
                        timeout: float = 30.0, what: str = "") -> None:
    last: list[str] = []

    def done() -> bool:
        nonlocal last
        assert relay.alive(), f"the relay exited:\n{relay.log_text()[-3000:]}"
        last = _suffix_mirror_problems(primary, relay)
        return not last and extra()

    try:
        wait_for(done, timeout, f"the relay's files did not become {what or 'the newest files of the primary'}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {last}; index {relay.stored_files()}, {_stored_bytes(relay)} bytes\n"
                             f"relay log:\n{relay.log_text()[-3000:]}") from None


def _holds_for(predicate: Callable[[], bool], seconds: float, message: str) -> None:
    """predicate stays true, polled for ``seconds`` (a negative claim needs a time window)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.05)
    assert predicate(), message


def _connect(relay: RelayProcess, user: str, password: str) -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=relay.port, user=user, password=password, connect_timeout=10,
                           read_timeout=30)


def _run(conn: pymysql.connections.Connection, sql: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def _error_code(conn: pymysql.connections.Connection, sql: str) -> int:
    try:
        _run(conn, sql)
    except pymysql.err.MySQLError as error:
        return int(error.args[0])
    raise AssertionError(f"{sql!r} succeeded on the relay")


def _stall_on(relay: RelayProcess, file: str, server_id: int) -> RawDump:
    """A blocking dump from file:4 by a client that never reads (small receive buffer)."""
    client = RawDump(relay.port, rcvbuf=4096)
    client.start_dump(file, 4, server_id)
    return client


# ------------------------------------------------------------------ storage.retention


def test_max_size_purges_the_oldest_files(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    relay = _relay(tmp_path, primary, storage=_retention(max_size=MAX_SIZE, min_files=2))
    try:
        _prepare(primary)
        _rotate(primary, 12)
        primary.sql("INSERT INTO ret.t (v) SELECT REPEAT('c', 500) FROM ret.seq_1_to_80")  # rotates by size
        _rotate(primary, 12)
        primary_files = primary.binlog_files()
        assert len(primary_files) >= 26 and sum(size for _, size in primary_files) > 3 * MAX_SIZE, primary_files
        largest = max(size for _, size in primary_files)

        _wait_suffix_mirror(primary, relay, lambda: _stored_bytes(relay) <= MAX_SIZE + largest,
                            what=f"the primary's newest files within {MAX_SIZE} bytes + one file")
        # the index changes before the files go and the log line comes last: wait for the whole purge
        wait_for(lambda: "purged mysql-bin.000001" in relay.log_text(), 10, "the purge was not logged")
        stored = relay.stored_files()
        assert FIRST_FILE not in stored and not (relay.data_dir / FIRST_FILE).exists()
        assert len(stored) >= 2, stored  # min_files
        assert stored[-1] == primary_files[-1][0]
        # purged oldest first: what is left is the newest files, and as many as fit
        assert _stored_bytes(relay) - (relay.data_dir / stored[0]).stat().st_size <= MAX_SIZE

        # it keeps going as the primary writes on
        _rotate(primary, 8)
        _wait_suffix_mirror(primary, relay, lambda: _stored_bytes(relay) <= MAX_SIZE + largest)
        assert stored[0] not in relay.stored_files()
    finally:
        assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_min_files_is_kept_even_over_max_size(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    relay = _relay(tmp_path, primary, storage=_retention(max_size=1000, min_files=3))
    try:
        _prepare(primary)
        _rotate(primary, 8)
        _wait_suffix_mirror(primary, relay, lambda: len(relay.stored_files()) == 3,
                            what="the primary's 3 newest files (min_files 3)")
        assert _stored_bytes(relay) > 1000
    finally:
        assert relay.stop() == 0


def test_a_file_a_dump_reads_is_kept_until_the_dump_ends(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    relay = _relay(tmp_path, primary, storage=_retention(max_size=MAX_SIZE, min_files=2, replica_grace=0))
    try:
        _prepare(primary)
        _rotate(primary, 3)
        held = primary.master_status()[0]
        _wait_suffix_mirror(primary, relay, what=f"stored up to {held}")
        stalled = _stall_on(relay, held, server_id=56)
        try:
            _big_row(primary, 1)  # lands in the held file: the relay blocks sending it to the stalled client
            _rotate(primary, 15)
            newest = primary.master_status()[0]
            before_held = [name for name, _ in primary.binlog_files() if _file_number(name) < _file_number(held)]
            assert before_held, "no older files to purge"
            # the older files go, the held one and every newer one stay (the dump will read them next)
            _wait_suffix_mirror(primary, relay, lambda: relay.stored_files()[0] == held and newest in
                                relay.stored_files(), what=f"the primary's files from {held} on")
            assert _stored_bytes(relay) > BIG_ROW > MAX_SIZE
            # ... and keep staying through several retention checks while the dump is connected
            _holds_for(lambda: relay.stored_files()[0] == held and (relay.data_dir / held).exists(),
                       2 * RETENTION_PERIOD + 1, f"{held} was purged while a dump was reading it")
        finally:
            stalled.close()
        # once the dump is gone, the held file goes, and the size limit applies again
        largest = max(size for name, size in primary.binlog_files() if _file_number(name) > _file_number(held))
        # (the index is written before the files are removed: wait for both)
        _wait_suffix_mirror(primary, relay, lambda: held not in relay.stored_files()
                            and not (relay.data_dir / held).exists()
                            and _stored_bytes(relay) <= MAX_SIZE + largest,
                            what=f"purged of {held} once the dump holding it disconnected")
    finally:
        assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_a_replica_that_went_away_keeps_its_file_for_the_grace_period_across_a_restart(mariadb_factory,
                                                                                       tmp_path):
    grace = 12
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    relay = _relay(tmp_path, primary, storage=_retention(max_size=MAX_SIZE, min_files=2, replica_grace=grace))
    _prepare(primary)
    _rotate(primary, 3)
    held = primary.master_status()[0]
    _wait_suffix_mirror(primary, relay, what=f"stored up to {held}")
    stalled = _stall_on(relay, held, server_id=57)
    _big_row(primary, 1)
    _rotate(primary, 15)
    _wait_suffix_mirror(primary, relay, lambda: relay.stored_files()[0] == held, what=f"the files from {held} on")
    _holds_for(lambda: relay.stored_files()[0] == held, RETENTION_PERIOD + 0.5, f"{held} purged during the dump")
    stalled.close()  # the replica goes away, and the relay restarts meanwhile
    assert relay.stop() == 0
    left = time.monotonic()
    relay.start()
    relay.wait_listening()
    _rotate(primary, 2)
    _holds_for(lambda: held in relay.stored_files(), grace / 3,
               f"{held} was purged although replica 57 was seen less than {grace}s ago")
    assert time.monotonic() - left < grace
    _wait_suffix_mirror(primary, relay, lambda: held not in relay.stored_files(), timeout=grace + 20,
                        what=f"purged of {held} once replica 57 was gone longer than replica_grace")
    assert relay.stop() == 0


def test_max_age_purges_old_files_but_never_the_active_one(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    relay = _relay(tmp_path, primary, storage=_retention(max_age=2, min_files=1))
    try:
        _prepare(primary)
        first = relay.data_dir / FIRST_FILE
        wait_for(first.exists, 10, f"{first} was never stored")
        _rotate(primary, 6)
        # the first file's last write is the ROTATE of the first FLUSH: note when, then when it goes
        last_write = wait_for(lambda: first.exists() and first.stat().st_mtime if
                              len(relay.stored_files()) > 1 else None, 10, "no rotation stored")
        gone_at = wait_for(lambda: None if first.exists() else time.time(), 15, f"{FIRST_FILE} never purged")
        age = gone_at - last_write
        assert age >= 2.0 - 0.1, f"{FIRST_FILE} purged {age:.2f} s after its last write (max_age 2 s)"

        active = primary.master_status()[0]
        _wait_suffix_mirror(primary, relay, lambda: relay.stored_files() == [active], timeout=15,
                            what=f"only the active file {active} (max_age 2 s, min_files 1)")
        # The active file is idle (heartbeats are not stored) and older than max_age, but stays.
        wait_for(lambda: time.time() - (relay.data_dir / active).stat().st_mtime > 2.5, 10, "time does not pass")
        _holds_for(lambda: relay.stored_files() == [active] and (relay.data_dir / active).exists(),
                   2 * RETENTION_PERIOD + 1, f"the active file {active} was purged")
        assert not _suffix_mirror_problems(primary, relay)

        # New writes land in it; after a rotation it is an old file like the others and goes.
        primary.sql("INSERT INTO ret.t (v) VALUES ('after idle')")
        primary.sql("FLUSH BINARY LOGS")
        newest = primary.master_status()[0]
        _wait_suffix_mirror(primary, relay, lambda: relay.stored_files() == [newest], timeout=15,
                            what=f"only the new active file {newest}")
    finally:
        assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


# ------------------------------------------------------------------ PURGE BINARY LOGS


def test_purge_binary_logs(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    replica = mariadb_factory(server_id=2)
    relay = _relay(tmp_path, primary, users=USERS)
    try:
        _prepare(primary)
        _rotate(primary, 4)
        _big_row(primary, 1)  # one file larger than the socket buffers: a stalled dump stays in it
        _rotate(primary, 4)
        attach_replica(replica, relay.port)
        wait_caught_up(primary, replica)  # the replica's dump now reads the active file only
        _wait_suffix_mirror(primary, relay)
        files = relay.stored_files()
        assert files[0] == FIRST_FILE and len(files) >= 9, files
        big = next(name for name in files if (relay.data_dir / name).stat().st_size > BIG_ROW)

        repl = _connect(relay, "repl", "replpass")
        dba = _connect(relay, "dba", "dbapass")
        try:
            # not an admin: refused, nothing purged
            assert _error_code(repl, f"PURGE BINARY LOGS TO '{files[3]}'") == ER_SPECIFIC_ACCESS_DENIED
            assert relay.stored_files() == files

            # an admin: the files before the target go, from SHOW BINARY LOGS, the index and the disk
            _run(dba, f"PURGE BINARY LOGS TO '{files[3]}'")
            assert [row[0] for row in _run(dba, "SHOW BINARY LOGS")] == files[3:]
            assert relay.stored_files() == files[3:]
            assert _on_disk(relay) == sorted(files[3:])
            assert [row[0] for row in _run(repl, "SHOW BINARY LOGS")] == files[3:]

            assert _error_code(dba, "PURGE BINARY LOGS TO 'nonexistent.000999'") == ER_UNKNOWN_TARGET_BINLOG
            assert relay.stored_files() == files[3:]

            # BEFORE a moment in the future: everything but the active file, and but a file in use
            stalled = _stall_on(relay, big, server_id=57)
            try:
                wait_for(lambda: f"dump for server_id 57 from {big}" in relay.log_text(), 10, "the dump did not start")
                tomorrow = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() + 86400))
                _run(dba, f"PURGE BINARY LOGS BEFORE '{tomorrow}'")
                shown = [row[0] for row in _run(dba, "SHOW BINARY LOGS")]
                assert shown == files[files.index(big):], (shown, big)
                assert _on_disk(relay) == sorted(shown)
            finally:
                stalled.close()
            active = files[-1]
            wait_for(lambda: _purge_before_tomorrow(dba) == [active], 10,
                     "PURGE BINARY LOGS BEFORE did not leave only the active file once the dump was gone")
            assert relay.stored_files() == [active]
            assert _on_disk(relay) == [active]
        finally:
            repl.close()
            dba.close()

        # a dump asking for a purged file is refused; the live replica carries on
        with RawDump(relay.port) as late:
            late.start_dump(files[1], 4, server_id=58)
            packet = late.first_packet()
        assert packet[0] == 0xFF, packet
        assert int.from_bytes(packet[1:3], "little") == ER_MASTER_FATAL_ERROR_READING_BINLOG, packet
        primary.sql("INSERT INTO ret.t (v) VALUES ('after purge')")
        _rotate(primary, 2)
        wait_caught_up(primary, replica)
        assert_healthy(replica)
        count = primary.sql("SELECT COUNT(*), SUM(LENGTH(v)) FROM ret.t")[0]
        assert replica.sql("SELECT COUNT(*), SUM(LENGTH(v)) FROM ret.t")[0] == count
        assert replica.sql("SELECT COUNT(*) FROM ret.big")[0][0] == 1
        _wait_suffix_mirror(primary, relay)
    finally:
        assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def _purge_before_tomorrow(conn: pymysql.connections.Connection) -> list[str] | None:
    """SHOW BINARY LOGS after a PURGE BINARY LOGS BEFORE tomorrow; None while the oldest file is
    still read (ERR 1378, as a primary answers: the closed dump is not noticed at once under load)."""
    tomorrow = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() + 86400))
    try:
        _run(conn, f"PURGE BINARY LOGS BEFORE '{tomorrow}'")
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != ER_LOG_IN_USE:
            raise
        return None
    return [row[0] for row in _run(conn, "SHOW BINARY LOGS")]


def test_purge_while_an_anonymous_dump_reads_the_file(mariadb_factory, tmp_path):
    """A non-blocking dump with server_id 0 (what mariadb-binlog --read-from-remote-server sends) reads
    an old file while an admin purges past it: like a MariaDB primary, the relay spares the file in
    use, the dump reads on to its EOF, and the relay stays up."""
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    relay = _relay(tmp_path, primary, users=USERS)
    try:
        _prepare(primary)
        _rotate(primary, 1)
        _big_row(primary, 1)  # mysql-bin.000002: larger than the socket buffers
        _rotate(primary, 2)
        _wait_suffix_mirror(primary, relay)
        files = relay.stored_files()
        read = files[1]
        assert (relay.data_dir / read).stat().st_size > BIG_ROW, files

        reader = RawDump(relay.port, rcvbuf=4096)
        try:
            reader.start_dump(read, 4, server_id=0, flags=0x01)  # BINLOG_DUMP_NON_BLOCK
            wait_for(lambda: f"dump for server_id 0 from {read}" in relay.log_text(), 10, "the dump did not start")
            dba = _connect(relay, "dba", "dbapass")
            try:
                _run(dba, f"PURGE BINARY LOGS TO '{files[-1]}'")
                shown = [row[0] for row in _run(dba, "SHOW BINARY LOGS")]
            finally:
                dba.close()
            # now the reader reads everything the relay sends, up to the EOF that ends a non-blocking dump
            received, ending = 0, b""
            while not ending:
                data = reader.sock.recv(1 << 20)
                if not data:
                    break
                received += len(data)
                reader.conn.receive_data(data)
                for packet in reader.conn.read_binlog_packets():
                    if packet[0] == 0xFF or (packet[0] == 0xFE and len(packet) < 9):
                        ending = bytes(packet)
        finally:
            reader.close()
        if not ending:  # the relay closed the connection mid-dump: did it go down with it?
            try:
                relay.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        assert relay.alive(), (f"the relay died while an anonymous dump read {read}, which PURGE removed under it "
                               f"(SHOW BINARY LOGS after the PURGE: {shown}):\n{relay.log_text()[-2500:]}")
        assert ending[:1] == b"\xfe", f"the dump did not end with EOF: {ending!r} after {received} bytes"
        assert received > BIG_ROW
        assert shown == files[1:], f"PURGE removed {read}, which a dump was reading: {shown}"
    finally:
        if relay.alive():
            assert relay.stop() == 0


async def test_a_replica_is_in_the_book_as_soon_as_its_dump_starts(mariadb_factory, tmp_path, monkeypatch):
    """The relay (in this process, so that its retention round can be put off for an hour) books a
    real replica when its dump starts: a relay that lost power before its next round would not know,
    once back, which file the replica comes back for."""
    monkeypatch.setattr(app, "RETENTION_CHECK_SECONDS", 3600.0)
    primary = mariadb_factory(server_id=1)
    replica = mariadb_factory(server_id=2)
    config = parse_config(relay_config(tmp_path / "data", primary.port))
    book = tmp_path / "data" / BOOK_FILE
    async with trio.open_nursery() as nursery:
        relay = await nursery.start(app.Relay(config).run)
        await trio.to_thread.run_sync(attach_replica, replica, config.listen.port)
        with trio.fail_after(30):
            while "2" not in (json.loads(book.read_text()) if book.exists() else {}):
                await trio.sleep(0.05)
        assert json.loads(book.read_text())["2"]["file"] == FIRST_FILE
        assert relay.registry.all_dumps  # still reading: booked at its start, not at its end
        await trio.to_thread.run_sync(replica.sql, "STOP SLAVE")
        nursery.cancel_scope.cancel()


def test_a_replica_book_that_cannot_be_written_holds_the_purge_until_it_is(mariadb_factory, tmp_path):
    """The book is what protects, across a restart, the files of a replica that went away: while it
    cannot be made durable nothing is purged, and the log says that this is why (not a failed purge)."""
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    relay = _relay(tmp_path, primary, storage=_retention(max_size=MAX_SIZE, min_files=2))
    try:
        _prepare(primary)
        _rotate(primary, 3)
        _wait_suffix_mirror(primary, relay, what="the first files stored")
        obstacle = relay.data_dir / f"{BOOK_FILE}.tmp"
        obstacle.mkdir()  # the book's temp file cannot be opened: as a disk refusing writes would
        oldest = relay.stored_files()[0]
        replica = RawDump(relay.port)  # a replica to book
        replica.start_dump(relay.stored_files()[-1], 4, 59)
        replica.first_packet()
        replica.close()
        _rotate(primary, 15)
        _wait_suffix_mirror(primary, relay, lambda: _stored_bytes(relay) > 2 * MAX_SIZE,
                            what="the primary's files, over max_size")
        wait_for(lambda: "cannot write the replica book, nothing purged until it is written" in relay.log_text(),
                 3 * RETENTION_PERIOD, "the failed write of the book was not logged")
        _holds_for(lambda: relay.stored_files()[0] == oldest, 2 * RETENTION_PERIOD + 1,
                   "a file was purged while the replica book could not be written")
        assert "purge failed" not in relay.log_text()
        obstacle.rmdir()
        wait_for(lambda: oldest not in relay.stored_files(), 3 * RETENTION_PERIOD + 5,
                 "nothing was purged once the book could be written")
        assert json.loads((relay.data_dir / BOOK_FILE).read_text())["59"]["file"]
    finally:
        assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()

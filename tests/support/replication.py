"""Helpers for tests where real consumers replicate from the relay.

- ``relay_factory``: a fixture (import it into the test module) that starts relay subprocesses and
  stops them at teardown.
- ``attach_replica``: CHANGE MASTER TO + START SLAVE on a MariaDB replica.
- ``wait_caught_up`` / ``wait_replica_at``: poll SHOW SLAVE STATUS until the replica has executed up
  to the primary's SHOW MASTER STATUS (file and position), failing fast when a thread stops.
- ``assert_same_data``: CHECKSUM TABLE of every user table, primary against replica.
- ``mixed_workload`` and ``WriteLoad``: the writes the tests replicate.
- ``RawClient``: a blocking-socket client driven by the relay's own sans-IO
  ``relay.protocol.client.ClientConnection``, for dumps a real replica cannot be made to send.
- ``binlog_events`` / ``dump_events``: read events from a file or a raw dump, header fields only.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay.protocol.client import NEED_DATA, ClientConnection, Connected
from relay.protocol.packets import ServerError, is_eof, is_err, parse_err

from .mariadb import REPL_PASSWORD, REPL_USER, MariaDB, wait_for
from .relay import RelayProcess, relay_config

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_length, log_pos, flags
HEADER_LEN = HEADER.size
GTID_EVENT = 162  # MariaDB GTID: starts every event group
FIRST_FILE = "mysql-bin.000001"


# ------------------------------------------------------------------ relay and replicas


@pytest.fixture
def relay_factory(mariadb_factory: Any, tmp_path: Path) -> Iterator[Any]:
    """make(name, upstream_port, **config_overrides) -> a started, listening RelayProcess in tmp_path/name.

    Every relay still running at teardown is stopped (killed if it does not stop), before the MariaDB
    servers are (this fixture depends on mariadb_factory). Import it into a test module to use it."""
    relays: list[RelayProcess] = []

    def make(name: str, upstream_port: int, **overrides: Any) -> RelayProcess:
        relay = RelayProcess(tmp_path / name, relay_config(tmp_path / name / "data", upstream_port, **overrides))
        relays.append(relay)
        relay.start()
        relay.wait_listening()
        return relay

    yield make
    for relay in reversed(relays):
        try:
            relay.stop()
        except Exception:  # noqa: BLE001 - a relay that does not stop is killed
            relay.kill9()


def attach_replica(replica: MariaDB, port: int, *, use_gtid: str = "no", log_file: str | None = FIRST_FILE,
                   log_pos: int | None = 4, extra_change: str = "") -> None:
    """Point replica at 127.0.0.1:port and START SLAVE. GTID mode takes no file/position.
    extra_change is a CHANGE MASTER clause list run after (e.g. "MASTER_SSL = 1, MASTER_SSL_CA = '...'")."""
    if use_gtid != "no":
        log_file = log_pos = None
    replica.change_master("127.0.0.1", port, log_file=log_file, log_pos=log_pos, use_gtid=use_gtid)
    if extra_change:
        replica.sql(f"CHANGE MASTER TO {extra_change}")
    replica.start_slave()


def _status_summary(status: dict[str, Any]) -> str:
    keys = ("Slave_IO_Running", "Slave_SQL_Running", "Master_Port", "Master_Log_File", "Read_Master_Log_Pos",
            "Relay_Master_Log_File", "Exec_Master_Log_Pos", "Last_IO_Errno", "Last_IO_Error", "Last_SQL_Errno",
            "Last_SQL_Error", "Using_Gtid", "Gtid_IO_Pos")
    return ", ".join(f"{key}={status.get(key)!r}" for key in keys)


def replica_position(replica: MariaDB) -> tuple[str, int]:
    """(Relay_Master_Log_File, Exec_Master_Log_Pos): what the SQL thread has executed."""
    status = replica.slave_status()
    return str(status["Relay_Master_Log_File"]), int(status["Exec_Master_Log_Pos"])


def wait_replica_at(replica: MariaDB, target: tuple[str, int] | Callable[[], tuple[str, int]],
                    timeout: float = 60.0) -> dict[str, Any]:
    """Poll until the replica executed up to target (file, position), or to what target() returns at
    that moment; return its SHOW SLAVE STATUS. Fails at once when its IO or SQL thread has stopped
    (an ERR 1236, a duplicate key...)."""
    last: dict[str, Any] = {}
    wanted: tuple[str, int] | None = None

    def arrived() -> bool:
        nonlocal last, wanted
        wanted = target() if callable(target) else tuple(target)  # type: ignore[assignment]
        last = replica.slave_status()
        if last.get("Slave_IO_Running") == "No" or last.get("Slave_SQL_Running") == "No":
            raise _Stopped(f"replica server_id {replica.server_id} stopped replicating: {_status_summary(last)}")
        return (last["Relay_Master_Log_File"], int(last["Exec_Master_Log_Pos"])) == wanted

    try:
        wait_for(arrived, timeout, f"replica server_id {replica.server_id} did not catch up")
    except _Stopped as exc:
        raise AssertionError(str(exc)) from None
    except AssertionError as exc:
        raise AssertionError(f"{exc}: wanted {wanted}, its status: {_status_summary(last)}") from None
    return last


class _Stopped(Exception):
    pass


def wait_caught_up(primary: MariaDB, replica: MariaDB, timeout: float = 60.0) -> dict[str, Any]:
    """wait_replica_at the primary's SHOW MASTER STATUS, once the primary's binlog has settled (a MariaDB
    primary writes a BINLOG_CHECKPOINT event on its own some time after a rotation, so its position
    can move with no write from the test: callers compare it with the replica's afterwards)."""
    wait_binlog_settled(primary, timeout)
    return wait_replica_at(replica, primary.master_status, timeout)


def assert_healthy(replica: MariaDB) -> dict[str, Any]:
    """Both threads running, no IO or SQL error recorded."""
    status = replica.slave_status()
    summary = _status_summary(status)
    assert status["Slave_IO_Running"] == "Yes", summary
    assert status["Slave_SQL_Running"] == "Yes", summary
    assert int(status["Last_IO_Errno"]) == 0 and not status["Last_IO_Error"], summary
    assert int(status["Last_SQL_Errno"]) == 0 and not status["Last_SQL_Error"], summary
    return status


# ------------------------------------------------------------------ data comparison


def user_tables(server: MariaDB) -> list[str]:
    system = ", ".join(f"'{schema}'" for schema in SYSTEM_SCHEMAS)
    rows = server.sql(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'"
        f" AND TABLE_SCHEMA NOT IN ({system}) ORDER BY TABLE_SCHEMA, TABLE_NAME")
    return [f"`{schema}`.`{table}`" for schema, table in rows]


def table_checksums(server: MariaDB, tables: list[str]) -> dict[str, int | None]:
    return {table: server.sql(f"CHECKSUM TABLE {table}")[0][1] for table in tables}


def assert_same_data(primary: MariaDB, replica: MariaDB) -> list[str]:
    """Same user tables, and CHECKSUM TABLE equal for each; returns the tables compared."""
    tables = user_tables(primary)
    assert tables, "the primary has no user tables: nothing was compared"
    assert user_tables(replica) == tables
    theirs = table_checksums(primary, tables)
    ours = table_checksums(replica, tables)
    assert ours == theirs, f"CHECKSUM TABLE differs: replica {ours} != primary {theirs}"
    assert all(value is not None for value in theirs.values()), theirs
    return tables


# ------------------------------------------------------------------ workloads


def mixed_workload(primary: MariaDB, schema: str = "shop", batches: int = 8) -> None:
    """DDL, multi-row inserts, updates, deletes, a multi-statement transaction, FLUSH BINARY LOGS.
    About 40 KB of binlog per batch (rotations at a small max_binlog_size)."""
    primary.execute_many([
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.items (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(100), qty INT,"
        " price DECIMAL(10,2), note TEXT, created DATETIME(3)) ENGINE=InnoDB",
        f"CREATE TABLE {schema}.kv (k VARCHAR(64) PRIMARY KEY, v BLOB, d DOUBLE) ENGINE=InnoDB",
        f"INSERT INTO {schema}.items (name, qty, price, note, created) VALUES"
        " ('a', 1, 1.50, 'x', '2024-01-02 03:04:05.678'), ('b', 2, NULL, NULL, NOW(3)), ('c', 3, 9.99, 'z', NULL)",
    ])
    for batch in range(batches):
        primary.sql(f"INSERT INTO {schema}.items (name, qty, price, note, created) SELECT CONCAT('n', seq), seq,"
                    f" seq / 7, REPEAT('r', 120), NOW(3) FROM {schema}.seq_1_to_200")
        primary.sql(f"INSERT INTO {schema}.kv VALUES ('k{batch}', UNHEX(REPEAT('00FF', 50)), {batch} * 0.25)")
        if batch == batches // 2:
            primary.sql("FLUSH BINARY LOGS")
    primary.execute_many(
        ["BEGIN"]
        + [f"UPDATE {schema}.items SET qty = qty + {i} WHERE id % 7 = {i % 7}" for i in range(8)]
        + [f"DELETE FROM {schema}.items WHERE id % 11 = 0",
           f"INSERT INTO {schema}.kv VALUES ('in-trx', 'v', 1e100)", "COMMIT"])
    primary.execute_many([
        f"ALTER TABLE {schema}.items ADD COLUMN extra INT DEFAULT 7",
        f"UPDATE {schema}.items SET extra = id WHERE id < 100",
        f"DELETE FROM {schema}.items WHERE id > {batches * 150}",
        f"CREATE TABLE {schema}.dropped (id INT PRIMARY KEY)",
        f"DROP TABLE {schema}.dropped",
        "FLUSH BINARY LOGS",
        f"INSERT INTO {schema}.kv VALUES ('after-flush', NULL, NULL)",
    ])


class WriteLoad:
    """Small transactions on one connection, one after another, until stopped (in a thread)."""

    def __init__(self, primary: MariaDB, schema: str = "loadtest") -> None:
        self.primary = primary
        self.schema = schema
        self.commits = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        primary.execute_many([f"CREATE DATABASE IF NOT EXISTS {schema}",
                              f"CREATE TABLE IF NOT EXISTS {schema}.t (id INT PRIMARY KEY AUTO_INCREMENT,"
                              " v VARCHAR(255), n INT)"])
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            conn = self.primary.connect()
            with conn.cursor() as cur:
                while not self._stop.is_set():
                    cur.execute("BEGIN")
                    for _ in range(3):
                        cur.execute(f"INSERT INTO {self.schema}.t (v, n) VALUES (REPEAT('v', 200), 1)")
                    cur.execute(f"UPDATE {self.schema}.t SET n = n + 1 WHERE id = LAST_INSERT_ID()")
                    cur.execute("COMMIT")
                    self.commits += 1
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def start(self) -> WriteLoad:
        self._thread.start()
        return self

    def stop_quietly(self) -> None:
        """For a finally: stop if running, raise nothing."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def stop(self) -> int:
        """Stop after the transaction in progress; the number of commits. Raises if the load failed."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the write load did not stop"
        if self.error is not None:
            raise AssertionError(f"the write load failed: {self.error!r}")
        return self.commits

    def __enter__(self) -> WriteLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


# ------------------------------------------------------------------ binlog events (header only)


@dataclass(frozen=True)
class Event:
    type: int
    server_id: int
    length: int
    log_pos: int
    flags: int
    timestamp: int
    data: bytes


def split_events(data: bytes) -> Iterator[Event]:
    """Events of a binlog file's bytes (after the 4-byte magic) or of concatenated events."""
    pos = 0
    while pos + HEADER_LEN <= len(data):
        timestamp, etype, server_id, length, log_pos, flags = HEADER.unpack_from(data, pos)
        if length < HEADER_LEN:
            raise AssertionError(f"bad event length {length} at {pos}")
        yield Event(etype, server_id, length, log_pos, flags, timestamp, data[pos:pos + length])
        pos += length


def binlog_events(path: Path) -> list[Event]:
    data = path.read_bytes()
    assert data[:4] == b"\xfebin", f"{path} is not a binlog file"
    return list(split_events(data[4:]))


def stored_events(data_dir: Path) -> list[Event]:
    """Every event of every binlog file listed in the relay's (or a server's) index."""
    index = data_dir / "binlog.index"
    if not index.exists():
        index = data_dir / "mysql-bin.index"
    names = [Path(line).name for line in index.read_text().splitlines() if line.strip()]
    return [event for name in names for event in binlog_events(data_dir / name)]


BINLOG_CHECKPOINT_EVENT = 161


def binlog_settled(server: MariaDB) -> bool:
    """True once the server's active binlog has its own BINLOG_CHECKPOINT. MariaDB writes that event by
    itself, some time after a rotation; until then its binlog may still grow with no write from a test."""
    name, _ = server.master_status()
    checkpoints = [event for event in binlog_events(server.binlog_path(name))
                   if event.type == BINLOG_CHECKPOINT_EVENT]
    if not checkpoints:
        return False
    body = checkpoints[-1].data[HEADER_LEN:]
    length = struct.unpack_from("<I", body)[0]
    return body[4:4 + length].decode() == name


def wait_binlog_settled(server: MariaDB, timeout: float = 30.0) -> None:
    wait_for(lambda: binlog_settled(server), timeout, f"server_id {server.server_id}: no binlog checkpoint")


def gtid_origins(events: list[Event]) -> list[int]:
    """The server_id of every MariaDB GTID event (one per event group)."""
    return [event.server_id for event in events if event.type == GTID_EVENT]


# ------------------------------------------------------------------ a raw client


class RawClient:
    """A blocking-socket client speaking through ``ClientConnection`` (the relay's own sans-IO client).

    Logs in on construction. ``query`` returns a ResultSet or OkPacket and raises ServerError on ERR;
    ``start_dump`` sends COM_BINLOG_DUMP; ``read_dump`` collects the stream up to EOF or ERR."""

    def __init__(self, port: int, user: str = REPL_USER, password: str = REPL_PASSWORD, *,
                 rcvbuf: int | None = None, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            # before connect, so the window the relay sees is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.conn = ClientConnection(user, password)
        event = self._next_event()
        assert isinstance(event, Connected), event

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def _receive(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the relay closed the connection")
        self.conn.receive_data(data)

    def _next_event(self) -> object:
        while True:
            event = self.conn.next_event()
            self._flush()  # what handling the last packet queued (e.g. the handshake response)
            if event is not NEED_DATA:
                return event
            self._receive()

    def query(self, sql: str) -> object:
        self.conn.query(sql)
        return self._next_event()

    def register_slave(self, server_id: int) -> object:
        self.conn.register_slave(server_id, "127.0.0.1", 3306, REPL_USER, "")
        return self._next_event()

    def start_dump(self, file: str, position: int, server_id: int, flags: int = 0) -> None:
        self.conn.binlog_dump(file, position, server_id, flags)
        self._flush()

    def next_dump_packets(self) -> list[bytes]:
        """At least one complete packet of the dump stream (blocks up to the socket timeout)."""
        while True:
            packets = [bytes(p) for p in self.conn.read_binlog_packets()]
            if packets:
                return packets
            self._receive()

    def dump_reply(self) -> ServerError | bytes:
        """The first packet after COM_BINLOG_DUMP: the ServerError of an ERR, else the packet."""
        first = self.next_dump_packets()[0]
        return parse_err(first) if is_err(first) else first

    def read_dump(self) -> list[bytes]:
        """Events (without the 00 status byte) up to the EOF of a non-blocking dump; ERR raises ServerError."""
        events: list[bytes] = []
        while True:
            for packet in self.next_dump_packets():
                if is_err(packet):
                    raise parse_err(packet)
                if is_eof(packet):
                    return events
                assert packet[0] == 0x00, f"unexpected dump packet {packet[:16]!r}"
                events.append(packet[1:])

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_raw(self, size: int = 1 << 16) -> bytes:
        return self.sock.recv(size)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dump_events(port: int, file: str, position: int, server_id: int, *, register: bool = True,
                checksum: bool = True, connect_state: str | None = None, capability: int | None = 4,
                variables: dict[str, int] | None = None) -> list[Event]:
    """A non-blocking raw dump from the relay: every event it sends (fake ROTATEs and FDEs included).
    With register, it sends COM_REGISTER_SLAVE first, as replicas do (tools such as mariadb-binlog don't).
    ``capability``: the @mariadb_slave_capability to announce (None: say nothing, as MySQL replicas).
    ``variables``: more user variables to set first, e.g. {"slave_gtid_strict_mode": 1}.
    An ERR instead of the stream raises ServerError."""
    with RawClient(port) as client:
        if checksum:
            client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        if capability is not None:
            client.query(f"SET @mariadb_slave_capability = {capability}")
        if connect_state is not None:
            client.query(f"SET @slave_connect_state = '{connect_state}'")
        for name, value in (variables or {}).items():
            client.query(f"SET @{name} = {int(value)}")
        if register:
            client.register_slave(server_id)
        client.start_dump(file, position, server_id, flags=0x01)
        return [event for raw in client.read_dump() for event in split_events(raw)]


__all__ = [
    "Event", "FIRST_FILE", "GTID_EVENT", "RawClient", "ServerError", "WriteLoad", "assert_healthy",
    "assert_same_data", "attach_replica", "binlog_events", "binlog_settled", "dump_events", "gtid_origins",
    "mixed_workload", "relay_factory", "replica_position", "split_events", "stored_events", "table_checksums",
    "user_tables", "wait_binlog_settled", "wait_caught_up", "wait_replica_at",
]

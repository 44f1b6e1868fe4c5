"""Helpers for tests where real consumers replicate from the relay.  Pointing replicas at a source
and waiting for them is relay.sandbox.replication's (shared with the demo and the benchmarks);
what is here is the tests' own:

- ``relay_factory``: a fixture (import it into the test module) that starts relay subprocesses and
  stops them at teardown.
- ``assert_healthy`` and ``assert_same_data`` (CHECKSUM TABLE of every user table, primary against
  replica).
- ``mixed_workload`` and ``WriteLoad``: the writes the tests replicate.
- ``RawClient``: relay.sandbox.client.BlockingClient as repl, with whole dumps read and raw bytes
  sent, for dumps a real replica cannot be made to send; ``dump_events`` on top of it.
- ``stored_events`` and ``gtid_origins``: events of stored files, header fields only.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.protocol.packets import ServerError, is_eof, is_err, parse_err
from relay.sandbox.binlogfiles import GTID_EVENT, Event, binlog_events, split_events
from relay.sandbox.client import BlockingClient
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER
from relay.sandbox.relayprocess import RelayProcess, start_relay
from relay.sandbox.replication import replica_summary

from .mariadb import MariaDB

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")


# ------------------------------------------------------------------ relay and replicas


@pytest.fixture
def relay_factory(mariadb_factory: Any, tmp_path: Path) -> Iterator[Any]:
    """make(name, upstream_port, **config_overrides) -> a started, listening RelayProcess in tmp_path/name.

    Every relay still running at teardown is stopped (killed if it does not stop), before the MariaDB
    servers are (this fixture depends on mariadb_factory). Import it into a test module to use it."""
    relays: list[RelayProcess] = []

    def make(name: str, upstream_port: int, **overrides: Any) -> RelayProcess:
        relay = start_relay(tmp_path / name, upstream_port, **overrides)
        relays.append(relay)
        return relay

    yield make
    for relay in reversed(relays):
        relay.close()


def assert_healthy(replica: MariaDB) -> dict[str, Any]:
    """Both threads running, no IO or SQL error recorded."""
    status = replica.slave_status()
    summary = replica_summary(status)
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


def assert_same_tables(expected: MariaDB, *others: MariaDB) -> None:
    """Every user table of ``expected`` has the same CHECKSUM TABLE on each of ``others``."""
    tables = user_tables(expected)
    assert tables
    want = table_checksums(expected, tables)
    for other in others:
        assert table_checksums(other, tables) == want, f"server_id {other.server_id} differs"


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


def stored_events(data_dir: Path) -> list[Event]:
    """Every event of every binlog file listed in the relay's (or a server's) index."""
    index = data_dir / "binlog.index"
    if not index.exists():
        index = data_dir / "mysql-bin.index"
    names = [Path(line).name for line in index.read_text().splitlines() if line.strip()]
    return [event for name in names for event in binlog_events(data_dir / name)]


def gtid_origins(events: list[Event]) -> list[int]:
    """The server_id of every MariaDB GTID event (one per event group)."""
    return [event.server_id for event in events if event.type == GTID_EVENT]


# ------------------------------------------------------------------ a raw client


class RawClient(BlockingClient):
    """relay.sandbox.client.BlockingClient, as repl by default, with what tests do with a dump:
    its first reply, a whole non-blocking dump, and raw bytes either way."""

    def __init__(self, port: int, user: str = REPL_USER, password: str = REPL_PASSWORD, *,
                 rcvbuf: int | None = None, timeout: float = 10.0) -> None:
        super().__init__(port, user, password, timeout=timeout, rcvbuf=rcvbuf)

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


ARTIFICIAL = 0x20
DUMP_SERVER_ID = 77  # no writer of the tests' histories: neither side has a reason to filter anything out


def gtid_dump_outcome(port: int, connect_state: str, strict: bool) -> tuple[str, object]:
    """What a MariaDB GTID dump gets: ("events", their bytes, an artificial event's sender blanked)
    or ("error", (code, sqlstate, message)): the same request to a primary and a relay compare equal."""
    try:
        events = dump_events(port, "", 4, DUMP_SERVER_ID, connect_state=connect_state,
                             variables={"slave_gtid_strict_mode": int(strict)})
    except ServerError as refusal:
        return "error", (refusal.code, refusal.sqlstate, refusal.message)
    return "events", [_sender_neutral(event.data, event.flags) for event in events]


def _sender_neutral(data: bytes, flags: int) -> bytes:
    """An artificial event names its sender's server_id (the relay has its own): blank it, and
    the CRC32 that covers it."""
    if not flags & ARTIFICIAL:
        return data
    return data[:5] + bytes(4) + data[9:-4]


def outcome_gtids(outcome: tuple[str, object]) -> list[str]:
    """The GTIDs of an outcome's events (or its error), to say how two outcomes differ."""
    kind, value = outcome
    if kind == "error":
        return [f"error {value}"]
    names = []
    for event in value:  # type: ignore[union-attr]
        if event[4] == GTID_EVENT:
            seq_no, domain = struct.unpack_from("<QI", event, 19)
            names.append(f"{domain}-{int.from_bytes(event[5:9], 'little')}-{seq_no}")
    return names

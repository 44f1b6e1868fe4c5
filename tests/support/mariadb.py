"""Throw-away MariaDB servers on loopback, for the test suite.

The launcher itself (template datadir, my.cnf, start/stop/kill, cleanup registry) is the
product's ``relay.localdb``, which ``binlog-relay demo`` uses too; this module adds the
pymysql-based SQL helpers the tests need on top of it, as ``MariaDB``, and the factory the
fixtures use. See relay/localdb.py for the server options and the users it creates.

Import it as ``from tests.support.mariadb import MariaDB, wait_for``.

Everything here is synchronous. In a trio test, a sync call blocks the event loop while
it runs: a quick query is fine, but run long statements with
``await trio.to_thread.run_sync(server.sql, ...)`` (connections are per thread, so that
is safe) so the code under test keeps running.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors

from relay.localdb import (  # noqa: F401 - some are re-exported for the test modules
    ONE_GB,
    REPL_PASSWORD,
    REPL_USER,
    ROOT_USER,
    STOP_TIMEOUT,
    LocalMariaDB,
    MariaDBError,
    T,
    find_program,
    free_port,
    kill_all_servers,
    kill_quietly,
    set_template_parent,
    wait_for,
)

# ------------------------------------------------------------------- the server


class MariaDB(LocalMariaDB):
    """One throw-away mariadbd (see LocalMariaDB) plus SQL through pymysql as root."""

    def __init__(
        self,
        base_dir: Path,
        server_id: int,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(base_dir, server_id, port, extra_args)
        self._conns: dict[int, pymysql.connections.Connection] = {}
        self._conns_lock = threading.Lock()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Clean shutdown: SIGTERM, wait up to timeout, then SIGKILL. No-op when stopped."""
        self._close_connections()
        super().stop(timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean shutdown, binlogs as they are on disk."""
        self._close_connections()
        super().kill()

    # --- SQL

    def connect(
        self, user: str = ROOT_USER, password: str = "", database: str | None = None, **kwargs: Any
    ) -> pymysql.connections.Connection:
        """A new pymysql connection over TCP (autocommit on, 1 GB packets); caller closes it."""
        options: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.port,
            "user": user,
            "password": password,
            "database": database,
            "autocommit": True,
            "max_allowed_packet": ONE_GB,
            "connect_timeout": 10,
        }
        options.update(kwargs)
        return pymysql.connect(**options)

    def _connection(self) -> pymysql.connections.Connection:
        """This thread's cached root connection, reconnected if the server restarted.
        (Session state such as SET @x does not survive a restart.)"""
        key = threading.get_ident()
        with self._conns_lock:
            conn = self._conns.get(key)
        if conn is not None and not _alive(conn):
            conn = None
        if conn is None:
            conn = self.connect()
            with self._conns_lock:
                self._conns[key] = conn
        return conn

    def _close_connections(self) -> None:
        with self._conns_lock:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken is as good as closed
                pass

    def sql(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        """Run one statement as root and return its rows ([] for statements without any).

        With params, pymysql %s-formatting applies; without, the query is sent as is.
        """
        conn = self._connection()
        with conn.cursor() as cur:
            cur.execute(query, params or None)
            return list(cur.fetchall())

    def execute_many(self, statements: Iterable[str]) -> None:
        """Run statements one after the other on one connection (BEGIN/COMMIT may be among them)."""
        conn = self._connection()
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def binlog_files(self) -> list[tuple[str, int]]:
        """SHOW BINARY LOGS as [(name, size)], oldest first."""
        return [(str(row[0]), int(row[1])) for row in self.sql("SHOW BINARY LOGS")]

    def master_status(self) -> tuple[str, int]:
        """(file, position) of SHOW MASTER STATUS: where the next event will be written."""
        rows = self.sql("SHOW MASTER STATUS")
        if not rows:
            raise MariaDBError(f"{self!r}: SHOW MASTER STATUS is empty (binlog off?)")
        return str(rows[0][0]), int(rows[0][1])

    def wait_until(
        self, predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition"
    ) -> T:
        """wait_for(predicate) with this server named in the failure message."""
        return wait_for(predicate, timeout, f"server_id {self.server_id}: {what}")

    # --- as a replica

    def change_master(
        self,
        host: str,
        port: int,
        user: str = REPL_USER,
        password: str = REPL_PASSWORD,
        log_file: str | None = None,
        log_pos: int | None = None,
        use_gtid: str = "no",
        connect_retry: int = 1,
        heartbeat_period: float | None = None,
    ) -> None:
        """CHANGE MASTER TO the given source. connect_retry defaults to 1 s (server default
        60 s) so a replica reconnects promptly when a test restarts its source."""
        if use_gtid not in ("no", "slave_pos", "current_pos"):
            raise ValueError(f"use_gtid must be no, slave_pos or current_pos, not {use_gtid!r}")
        clauses = [
            "MASTER_HOST = %s",
            "MASTER_PORT = %s",
            "MASTER_USER = %s",
            "MASTER_PASSWORD = %s",
            "MASTER_CONNECT_RETRY = %s",
            f"MASTER_USE_GTID = {use_gtid}",
        ]
        params: list[object] = [host, int(port), user, password, int(connect_retry)]
        for clause, value in (
            ("MASTER_LOG_FILE = %s", log_file),
            ("MASTER_LOG_POS = %s", None if log_pos is None else int(log_pos)),
            ("MASTER_HEARTBEAT_PERIOD = %s", heartbeat_period),
        ):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        self.sql("CHANGE MASTER TO " + ", ".join(clauses), *params)

    def start_slave(self) -> None:
        self.sql("START SLAVE")

    def stop_slave(self) -> None:
        self.sql("STOP SLAVE")

    def slave_status(self) -> dict[str, Any]:
        """SHOW SLAVE STATUS as a dict ({} when no replication is configured)."""
        conn = self._connection()
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW SLAVE STATUS")
            row = cur.fetchone()
        return dict(row) if row else {}


def _alive(conn: pymysql.connections.Connection) -> bool:
    """Ping without pymysql's deprecated reconnect; a dead connection is closed."""
    try:
        conn.ping(reconnect=False)
        return True
    except pymysql.err.Error:
        try:
            conn.close()
        except pymysql.err.Error:
            pass  # already closed
        return False


# ------------------------------------------------------------------- the factory

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_]+")


class MariaDBFactory:
    """Creates servers with unique server_ids (1, 2, 3, ... unless given) and stops them all
    in close(). make_dir(name) returns a new empty directory for one server."""

    def __init__(self, make_dir: Callable[[str], Path]) -> None:
        self._make_dir = make_dir
        self.servers: list[MariaDB] = []

    def __call__(
        self,
        server_id: int | None = None,
        *,
        extra_args: Sequence[str] = (),
        port: int | None = None,
        start: bool = True,
    ) -> MariaDB:
        server_id = self._pick_server_id(server_id)
        server = MariaDB(self._make_dir(f"s{server_id}"), server_id, port, extra_args)
        self.servers.append(server)
        if start:
            server.start()
        return server

    def _pick_server_id(self, wanted: int | None) -> int:
        used = {server.server_id for server in self.servers}
        if wanted is None:
            wanted = next(i for i in range(1, len(used) + 2) if i not in used)
        elif wanted in used:
            raise ValueError(f"server_id {wanted} is already used by another server of this test")
        return wanted

    def close(self, remove_dirs: bool = False) -> None:
        """Stop every server (each one even if another fails), then optionally delete their
        directories. Raises the first stop error after trying all."""
        errors: list[BaseException] = []
        for server in self.servers:
            try:
                server.stop()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
                kill_quietly(server)
        if remove_dirs and not errors:
            for server in self.servers:
                shutil.rmtree(server.base_dir, ignore_errors=True)
        if errors:
            raise errors[0]


def dir_name_for(test_name: str, limit: int = 24) -> str:
    """A short, filesystem-safe prefix for a test's server dirs (keeps socket paths short)."""
    return _SAFE_NAME.sub("_", test_name)[:limit].strip("_") or "test"

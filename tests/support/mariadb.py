"""Throw-away MariaDB servers on loopback, for the test suite.

The launcher itself (template datadir, my.cnf, start/stop/kill, cleanup registry, SQL helpers
such as master_status and change_master) is ``relay.sandbox.mariadb.LocalMariaDB``, which
``binlog-relay demo`` and the benchmarks use too; this module runs its SQL through pymysql
instead (typed values, %s parameters, one cached connection per thread), as ``MariaDB``, and
adds the factory the fixtures use. See relay/sandbox/mariadb.py for the server options and the
users it creates.

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
from typing import Any, TypeVar

import pymysql
import pymysql.cursors

from relay.sandbox.mariadb import ONE_GB, ROOT_USER, STOP_TIMEOUT, LocalMariaDB, kill_quietly
from relay.sandbox.polling import wait_for

T = TypeVar("T")

# ------------------------------------------------------------------- the server


class MariaDB(LocalMariaDB):
    """One throw-away mariadbd (see LocalMariaDB) with its SQL through pymysql as root."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """LocalMariaDB's arguments; the pymysql connections are made on first use."""
        super().__init__(*args, **kwargs)
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

    def wait_until(
        self, predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition"
    ) -> T:
        """wait_for(predicate) with this server named in the failure message."""
        return wait_for(predicate, timeout, f"server_id {self.server_id}: {what}")

    # --- as a replica

    def slave_status(self) -> dict[str, Any]:
        """SHOW SLAVE STATUS as a dict with typed values ({} when no replication is configured)."""
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

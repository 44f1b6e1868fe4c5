"""Throw-away MariaDB servers on loopback, for the test suite.

A Python port of ``shared/tools/mariadb-sandbox.sh``: the same my.cnf, the same users
(root@localhost/127.0.0.1/::1 without password, repl@'%' IDENTIFIED BY 'replpass' with
REPLICATION SLAVE, REPLICATION CLIENT, REPLICATION MASTER ADMIN), log_bin=mysql-bin,
binlog_format=ROW, durability off. Differences: max_allowed_packet is 1G (tests write
rows of 20 MB and more and a 1 GB transaction), the buffer pool is smaller, and the data
directory is copied from one template per test session instead of running
mariadb-install-db for every server (it takes seconds).

Import it as ``from tests.support.mariadb import MariaDB, wait_for``.

Everything here is synchronous. In a trio test, a sync call blocks the event loop while
it runs: a quick query is fine, but run long statements with
``await trio.to_thread.run_sync(server.sql, ...)`` (connections are per thread, so that
is safe) and poll with ``async_wait_for`` so the code under test keeps running.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pymysql
import pymysql.cursors
import trio

T = TypeVar("T")

ROOT_USER = "root"
REPL_USER = "repl"
REPL_PASSWORD = "replpass"
START_TIMEOUT = float(os.environ.get("MARIADB_START_TIMEOUT", "60"))
STOP_TIMEOUT = float(os.environ.get("MARIADB_STOP_TIMEOUT", "60"))
POLL_INTERVAL = 0.05
ONE_GB = 1 << 30
INNODB_LOG_FILE_SIZE = "128M"
# Linux caps sun_path at 107 bytes; mariadbd refuses longer socket paths.
MAX_SOCKET_PATH = 100

INSTALL_HINT = "install them with: apt-get install mariadb-server mariadb-client"

INIT_SQL = """\
DELETE FROM mysql.global_priv WHERE User = '' OR Host NOT IN ('localhost', '127.0.0.1', '::1', '%');
DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1', '::1', '%');
FLUSH PRIVILEGES;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
CREATE USER IF NOT EXISTS 'root'@'::1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO 'root'@'::1' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'replpass';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, REPLICATION MASTER ADMIN ON *.* TO 'repl'@'%';
"""

# The static part of every server's my.cnf (per-server paths, port and server_id are added).
# Binlog checksum, max_binlog_size, log_slave_updates, gtid_strict_mode: server defaults,
# change them per server with extra_args such as "--max-binlog-size=4096".
SERVER_OPTIONS: dict[str, str | None] = {
    "bind-address": "127.0.0.1",
    "log_bin": "mysql-bin",
    "binlog_format": "ROW",
    "relay_log": "relay-bin",
    "skip-name-resolve": None,
    "skip-slave-start": None,
    "character_set_server": "utf8mb4",
    "collation_server": "utf8mb4_general_ci",
    "performance_schema": "OFF",
    "max_connections": "300",
    "max_allowed_packet": "1G",
    "sync_binlog": "0",
    "innodb_buffer_pool_size": "128M",
    "innodb_log_file_size": INNODB_LOG_FILE_SIZE,
    "innodb_log_buffer_size": "16M",
    "innodb_flush_log_at_trx_commit": "2",
    "innodb_doublewrite": "0",
    # Nothing to warm up in a throw-away server; skipping the dump/load saves I/O per restart.
    "innodb_buffer_pool_dump_at_shutdown": "OFF",
    "innodb_buffer_pool_load_at_startup": "OFF",
}


class MariaDBError(RuntimeError):
    """A server could not be started or stopped; the message carries its error.log tail."""


# ---------------------------------------------------------------------------- helpers


def find_program(name: str) -> str:
    """Path of a MariaDB program; /usr/sbin is not on every user's PATH."""
    env_override = os.environ.get(name.upper().replace("-", "_"))
    candidates = [env_override, shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(f"{name} not found; {INSTALL_HINT}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _timeout_message(message: str, timeout: float, last_error: BaseException | None) -> str:
    suffix = f"; last error: {last_error!r}" if last_error is not None else ""
    return f"{message} (not within {timeout:g} s{suffix})"


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    message: str = "condition not met",
    *,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll predicate every 50 ms until it returns a truthy value, and return that value.

    Raises AssertionError(message) at the deadline. Exceptions listed in ``ignore`` count
    as "not yet" (e.g. pymysql.err.OperationalError while a server restarts).
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(_timeout_message(message, timeout, last_error))
        time.sleep(POLL_INTERVAL)


async def async_wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    message: str = "condition not met",
    *,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """wait_for for trio tests: sleeps with trio.sleep so other tasks (the relay) run."""
    deadline = trio.current_time() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as exc:
            last_error = exc
        if trio.current_time() >= deadline:
            raise AssertionError(_timeout_message(message, timeout, last_error))
        await trio.sleep(POLL_INTERVAL)


def _tail(path: Path, offset: int = 0, lines: int = 40) -> str:
    """The last lines of a log written since offset, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------- template datadir

_template_lock = threading.Lock()
_template_parent: Path | None = None
_template_datadir: Path | None = None


def set_template_parent(path: Path) -> None:
    """Where the session's template datadir will be created (the conftest passes a pytest
    session temp dir, so it is cleaned up like the rest of pytest's temp files)."""
    global _template_parent
    with _template_lock:
        _template_parent = Path(path)


def template_datadir() -> Path:
    """The session's initialised datadir, created on first use and then only copied."""
    global _template_datadir
    with _template_lock:
        if _template_datadir is None:
            _template_datadir = _install_datadir(_template_root())
        return _template_datadir


def _template_root() -> Path:
    if _template_parent is not None:
        return Path(tempfile.mkdtemp(prefix="template-", dir=_template_parent))
    # Used outside pytest: a private temp dir, removed when the process exits.
    root = Path(tempfile.mkdtemp(prefix="relay-mdb-template-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _run_user() -> str:
    import pwd  # local: only the install and start steps need it

    return pwd.getpwuid(os.geteuid()).pw_name


def _install_datadir(root: Path) -> Path:
    datadir = root / "data"
    init_sql = root / "init-users.sql"
    init_sql.write_text(INIT_SQL)
    # --no-defaults: no log_bin during bootstrap, so nothing of the init lands in a binlog
    # and mysql-bin.000001 starts clean. (Bootstrap runs with grant tables off; the FLUSH
    # PRIVILEGES in INIT_SQL turns them on so CREATE USER / GRANT work.)
    cmd = [
        find_program("mariadb-install-db"),
        "--no-defaults",
        f"--datadir={datadir}",
        f"--user={_run_user()}",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
        f"--extra-file={init_sql}",
        f"--innodb-log-file-size={INNODB_LOG_FILE_SIZE}",
    ]
    result = subprocess.run(
        cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    (root / "install.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise MariaDBError(
            f"mariadb-install-db failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return datadir


def _copy_datadir(template: Path, datadir: Path) -> None:
    """Copy the template datadir. Most of it is the zero-filled 128 MB redo log: cp with
    --sparse=always copies it as a hole, in 0.06 s and 7 MB of disk instead of 0.5 s and
    150 MB with shutil.copytree (which copies every zero)."""
    shutil.rmtree(datadir, ignore_errors=True)  # a half-copied datadir from an interrupted copy
    result = subprocess.run(
        ["cp", "-a", "--sparse=always", str(template), str(datadir)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise MariaDBError(f"copying {template} to {datadir} failed: {result.stderr}")


# ------------------------------------------------------------- process registry

# Every server with a live process, so that none outlives the test process: fixtures stop
# theirs, and this catches the rest (a helper that forgot, an interrupted session).
_live_servers: set[MariaDB] = set()
_live_lock = threading.Lock()


def kill_all_servers() -> None:
    """SIGKILL every server this process started and has not stopped yet."""
    with _live_lock:
        servers = list(_live_servers)
    for server in servers:
        _kill_quietly(server)


def _kill_quietly(server: MariaDB) -> None:
    try:
        server.kill()
    except Exception:  # noqa: BLE001 - best effort during cleanup; keep killing the others
        pass


atexit.register(kill_all_servers)


# ------------------------------------------------------------------- the server


class MariaDB:
    """One throw-away mariadbd in ``base_dir`` (my.cnf, data/, error.log, tmp/).

    The data directory is created on the first start() and kept across stop()/start(),
    kill()/start() and restart(), so a restarted server has its data and binlogs.
    """

    def __init__(
        self,
        base_dir: Path,
        server_id: int,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.server_id = server_id
        self.port = port if port is not None else free_port()
        self.extra_args: list[str] = list(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._conns: dict[int, pymysql.connections.Connection] = {}
        self._conns_lock = threading.Lock()
        self._own_socket_dir: Path | None = None
        self.socket = self._choose_socket_path()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<MariaDB server_id={self.server_id} 127.0.0.1:{self.port} {state} {self.base_dir}>"

    # --- paths

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def binlog_dir(self) -> Path:
        return self.datadir

    @property
    def error_log(self) -> Path:
        return self.base_dir / "error.log"

    @property
    def cnf_path(self) -> Path:
        return self.base_dir / "my.cnf"

    def binlog_path(self, name: str) -> Path:
        return self.binlog_dir / name

    def _choose_socket_path(self) -> Path:
        path = self.base_dir / "mysqld.sock"
        if len(str(path)) < MAX_SOCKET_PATH:
            return path
        # base_dir is too deep for a unix socket: use a short private dir under /tmp.
        self._own_socket_dir = Path(tempfile.mkdtemp(prefix="mdb-", dir="/tmp"))
        return self._own_socket_dir / "mysqld.sock"

    # --- process state

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    # --- lifecycle

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and return once it answers SELECT over TCP."""
        if self.running:
            raise MariaDBError(f"{self!r} is already running")
        self._prepare_dirs()
        log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0
        self._launch()
        try:
            self._wait_ready(timeout, log_offset)
        except BaseException:
            self._terminate(signal.SIGKILL, timeout=STOP_TIMEOUT)
            raise

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Clean shutdown: SIGTERM, wait up to timeout, then SIGKILL. No-op when stopped."""
        self._close_connections()
        self._terminate(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean shutdown, binlogs as they are on disk."""
        self._close_connections()
        self._terminate(signal.SIGKILL, STOP_TIMEOUT)

    def restart(self, extra_args: Sequence[str] | None = None) -> None:
        """stop() then start(); extra_args, when given, replace the current ones."""
        self.stop()
        if extra_args is not None:
            self.extra_args = list(extra_args)
        self.start()

    def _prepare_dirs(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "tmp").mkdir(exist_ok=True)
        if self._own_socket_dir is not None:
            self._own_socket_dir.mkdir(exist_ok=True)
        if not (self.datadir / "mysql").is_dir():
            _copy_datadir(template_datadir(), self.datadir)
        self.cnf_path.write_text(self._my_cnf())

    def _my_cnf(self) -> str:
        options: dict[str, str | None] = {
            "datadir": str(self.datadir),
            "socket": str(self.socket),
            "pid-file": str(self.base_dir / "mysqld.pid"),
            "log-error": str(self.error_log),
            # Big transactions spill their binlog cache here: keep it with the server.
            "tmpdir": str(self.base_dir / "tmp"),
            "port": str(self.port),
            "server_id": str(self.server_id),
            **SERVER_OPTIONS,
        }
        lines = [
            name if value is None else f"{name:<36} = {value}"
            for name, value in options.items()
        ]
        return "[mariadbd]\n" + "\n".join(lines) + "\n"

    def _launch(self) -> None:
        # --defaults-file must be the first option; --user=root is required to run as root.
        cmd = [find_program("mariadbd"), f"--defaults-file={self.cnf_path}"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        cmd += self.extra_args
        with open(self.error_log, "ab") as log:
            # start_new_session (setsid): a Ctrl-C aimed at pytest does not hit the server
            # first; teardown stops it in order instead.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        with _live_lock:
            _live_servers.add(self)

    def _wait_ready(self, timeout: float, log_offset: int) -> None:
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                raise MariaDBError(
                    f"mariadbd (server_id {self.server_id}, port {self.port}) exited with "
                    f"code {code} during startup; {self.error_log}:\n"
                    f"{_tail(self.error_log, log_offset)}"
                )
            try:
                if self._is_ours():
                    return
            except pymysql.err.MySQLError as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                raise MariaDBError(
                    f"mariadbd (server_id {self.server_id}, port {self.port}) not ready after "
                    f"{timeout:g} s (last error: {last_error!r}); {self.error_log}:\n"
                    f"{_tail(self.error_log, log_offset)}"
                )
            time.sleep(POLL_INTERVAL)

    def _is_ours(self) -> bool:
        """True when the server on our port is this one, not another process that took the
        port between free_port() and the bind (then ours fails to start and exits)."""
        conn = self.connect(connect_timeout=1)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@datadir")
                (datadir,) = cur.fetchone()
        finally:
            conn.close()
        return Path(datadir).resolve() == self.datadir.resolve()

    def _terminate(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)
        self._proc = None
        with _live_lock:
            _live_servers.discard(self)
        if self._own_socket_dir is not None:
            shutil.rmtree(self._own_socket_dir, ignore_errors=True)

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
                _kill_quietly(server)
        if remove_dirs and not errors:
            for server in self.servers:
                shutil.rmtree(server.base_dir, ignore_errors=True)
        if errors:
            raise errors[0]


def dir_name_for(test_name: str, limit: int = 24) -> str:
    """A short, filesystem-safe prefix for a test's server dirs (keeps socket paths short)."""
    return _SAFE_NAME.sub("_", test_name)[:limit].strip("_") or "test"

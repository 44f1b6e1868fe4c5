"""Throw-away MariaDB servers on loopback: the launcher behind ``binlog-relay demo`` and the tests.

Each server gets its own my.cnf and the same users (root@localhost/127.0.0.1/::1 without
password, repl@'%' IDENTIFIED BY 'replpass' with REPLICATION SLAVE, REPLICATION CLIENT,
REPLICATION MASTER ADMIN), log_bin=mysql-bin, binlog_format=ROW, durability off,
max_allowed_packet 1G (tests write rows of 20 MB and more and a 1 GB transaction) and a small
buffer pool.  The data directory is copied from one template per process instead of running
mariadb-install-db for every server (it takes seconds).

    server = LocalMariaDB(Path("/tmp/x"), server_id=1, extra_args=["--max-binlog-size=1M"])
    server.start()          # returns once the server answers over TCP; MariaDBNotInstalled if absent
    ... 127.0.0.1:server.port, root without password, repl/replpass ...
    server.stop()

Programs are looked up in $PATH, /usr/sbin and /usr/bin; an environment variable named
after the program (``MARIADBD``, ``MARIADB_INSTALL_DB``) overrides that search.

Everything here is synchronous and needs no client library: the readiness check speaks the
protocol through the relay's own sans-IO client over a blocking socket.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar


from .protocol.client import (
    NEED_DATA,
    AuthenticationError,
    ClientConnection,
    Connected,
    ResultSet,
    ServerError,
)
from .protocol.packets import ProtocolError

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

REQUIRED_PROGRAMS = ("mariadbd", "mariadb-install-db")
INSTALL_COMMAND = "apt-get install -y mariadb-server mariadb-client"
INSTALL_HINT = f"install them with: {INSTALL_COMMAND}"

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

# What a readiness probe may meet while the server is still coming up.
_NOT_READY_ERRORS = (OSError, ProtocolError, ServerError, AuthenticationError)


class MariaDBError(RuntimeError):
    """A server could not be started or stopped; the message carries its error.log tail."""


class MariaDBNotInstalled(FileNotFoundError):
    """A MariaDB program is missing; the message says what to install."""


# ---------------------------------------------------------------------------- programs


def program_env_var(name: str) -> str:
    """The environment variable that overrides where ``name`` is found (mariadbd -> MARIADBD)."""
    return name.upper().replace("-", "_")


def find_program(name: str) -> str:
    """Path of a MariaDB program; /usr/sbin is not on every user's PATH.

    When the program's environment variable is set, it is the only place looked at, so
    that a wrong override fails loudly instead of silently running another binary.
    """
    variable = program_env_var(name)
    override = os.environ.get(variable)
    if override:
        if os.access(override, os.X_OK):
            return override
        raise MariaDBNotInstalled(f"{name} not found at {variable}={override}; {INSTALL_HINT}")
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise MariaDBNotInstalled(f"{name} not found; {INSTALL_HINT}")


def missing_programs() -> list[str]:
    """The programs a LocalMariaDB needs that cannot be found."""
    missing = []
    for name in REQUIRED_PROGRAMS:
        try:
            find_program(name)
        except MariaDBNotInstalled:
            missing.append(name)
    return missing


def check_installed() -> None:
    """Raise MariaDBNotInstalled, naming every missing program and the packages to install."""
    missing = missing_programs()
    if missing:
        variables = ", ".join(program_env_var(name) for name in missing)
        raise MariaDBNotInstalled(
            f"MariaDB is not installed: {'; '.join(_where_looked(name) for name in missing)}. "
            f"On Debian/Ubuntu install it with: {INSTALL_COMMAND}  "
            f"(or set {variables} to the programs' paths)")


def _where_looked(name: str) -> str:
    override = os.environ.get(program_env_var(name))
    if override:
        return f"{name} not found at {program_env_var(name)}={override}"
    return f"{name} not found in PATH, /usr/sbin or /usr/bin"


# ---------------------------------------------------------------------------- helpers


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
    as "not yet" (e.g. a connection error while a server restarts).
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


def _tail(path: Path, offset: int = 0, lines: int = 40) -> str:
    """The last lines of a log written since offset, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _blocking_query(
    port: int, sql: str, timeout: float, user: str = ROOT_USER, password: str = ""
) -> list[tuple[str | None, ...]]:
    """One statement over TCP on a blocking socket, driving the relay's sans-IO client.

    For the synchronous launcher only; trio code uses ``relay.upstream.connect``."""
    protocol = ClientConnection(user, password)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        _next_event(sock, protocol, Connected)
        protocol.query(sql)
        result = _next_event(sock, protocol, object)
        protocol.quit()
        sock.sendall(protocol.data_to_send())
    return list(result.rows) if isinstance(result, ResultSet) else []


def _next_event(sock: socket.socket, protocol: ClientConnection, expected: type) -> object:
    while (event := protocol.next_event()) is NEED_DATA:
        outgoing = protocol.data_to_send()
        if outgoing:
            sock.sendall(outgoing)
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the server closed the connection")
        protocol.receive_data(data)
    if not isinstance(event, expected):
        raise ProtocolError(f"expected {expected.__name__}, got {event!r}")
    return event


# --------------------------------------------------------------- template datadir

_template_lock = threading.Lock()
_template_parent: Path | None = None
_template_datadir: Path | None = None


def set_template_parent(path: Path) -> None:
    """Where the template datadir will be created (the test suite passes a pytest session
    temp dir, the demo its own temp dir, so it is cleaned up with the rest)."""
    global _template_parent, _template_datadir
    with _template_lock:
        if _template_parent != Path(path):
            _template_datadir = None  # a template elsewhere belongs to the previous owner
        _template_parent = Path(path)


def template_datadir() -> Path:
    """The process's initialised datadir, created on first use and then only copied."""
    global _template_datadir
    with _template_lock:
        if _template_datadir is None:
            _template_datadir = _install_datadir(_template_root())
        return _template_datadir


def _template_root() -> Path:
    if _template_parent is not None:
        return Path(tempfile.mkdtemp(prefix="template-", dir=_template_parent))
    # No parent given: a private temp dir, removed when the process exits.
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

# Every server with a live process, so that none outlives this process: owners stop
# theirs, and this catches the rest (a helper that forgot, an interrupted run).
_live_servers: set[LocalMariaDB] = set()
_live_lock = threading.Lock()


def kill_all_servers() -> None:
    """SIGKILL every server this process started and has not stopped yet."""
    with _live_lock:
        servers = list(_live_servers)
    for server in servers:
        kill_quietly(server)


def kill_quietly(server: LocalMariaDB) -> None:
    """server.kill(), ignoring errors: for cleanup paths that must go on to the next server."""
    try:
        server.kill()
    except Exception:  # noqa: BLE001 - best effort during cleanup; keep killing the others
        pass


atexit.register(kill_all_servers)


# ------------------------------------------------------------------- the server


class LocalMariaDB:
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
        self._own_socket_dir: Path | None = None
        self.socket = self._choose_socket_path()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return (f"<{type(self).__name__} server_id={self.server_id} 127.0.0.1:{self.port} "
                f"{state} {self.base_dir}>")

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

    def error_log_tail(self, offset: int = 0, lines: int = 40) -> str:
        """The last lines of error.log written since offset, for error messages."""
        return _tail(self.error_log, offset, lines)

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
        check_installed()
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
        self._terminate(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean shutdown, binlogs as they are on disk."""
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
            # start_new_session (setsid): a Ctrl-C aimed at the parent (pytest, the demo)
            # does not hit the server first; the owner stops it in order instead.
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
                    f"{self.error_log_tail(log_offset)}"
                )
            try:
                if self._is_ours():
                    return
            except _NOT_READY_ERRORS as exc:
                last_error = exc
            if time.monotonic() >= deadline:
                raise MariaDBError(
                    f"mariadbd (server_id {self.server_id}, port {self.port}) not ready after "
                    f"{timeout:g} s (last error: {last_error!r}); {self.error_log}:\n"
                    f"{self.error_log_tail(log_offset)}"
                )
            time.sleep(POLL_INTERVAL)

    def _is_ours(self) -> bool:
        """True when the server on our port is this one, not another process that took the
        port between free_port() and the bind (then ours fails to start and exits)."""
        rows = _blocking_query(self.port, "SELECT @@datadir", timeout=1)
        datadir = rows[0][0] if rows else None
        return datadir is not None and Path(datadir).resolve() == self.datadir.resolve()

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

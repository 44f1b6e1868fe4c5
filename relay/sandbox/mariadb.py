"""Throw-away MariaDB servers on loopback: the launcher behind ``binlog-relay demo``, the tests
and the benchmarks.

Each server gets its own my.cnf and the same users (root@localhost/127.0.0.1/::1 without
password, repl@'%' IDENTIFIED BY 'replpass' with REPLICATION SLAVE, REPLICATION CLIENT,
REPLICATION MASTER ADMIN), log_bin=mysql-bin, binlog_format=ROW, durability off,
max_allowed_packet 1G (tests write rows of 20 MB and more and a 1 GB transaction) and a small
buffer pool.  The data directory is copied from one template per process instead of running
mariadb-install-db for every server (it takes seconds).

    server = LocalMariaDB(Path("/tmp/x"), server_id=1, extra_args=["--max-binlog-size=1M"])
    server.start()          # returns once the server answers over TCP; MariaDBNotInstalled if absent
    ... 127.0.0.1:server.port, root without password, repl/replpass ...
    server.sql("SHOW MASTER STATUS")   # as root, rows as text; master_status(), change_master() ...
    server.stop()

Programs are looked up in $PATH, /usr/sbin and /usr/bin; an environment variable named
after the program (``MARIADBD``, ``MARIADB_INSTALL_DB``) overrides that search.

Everything here is synchronous and needs no client library: the readiness check and ``sql``
speak the protocol through the relay's own sans-IO client over a blocking socket (client.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..protocol.client import AuthenticationError
from ..protocol.packets import ProtocolError, ServerError
from ..protocol.resultset import ResultSet
from .client import BlockingClient, Row
from .errors import SandboxError, file_tail
from .polling import POLL_INTERVAL, wait_for
from .ports import LOOPBACK, free_port, port_in_use

ROOT_USER = "root"
REPL_USER = "repl"
REPL_PASSWORD = "replpass"
START_TIMEOUT = float(os.environ.get("MARIADB_START_TIMEOUT", "60"))
STOP_TIMEOUT = float(os.environ.get("MARIADB_STOP_TIMEOUT", "60"))
QUERY_TIMEOUT = 60.0
READY_PROBE_TIMEOUT = 1.0
ONE_GB = 1 << 30
INNODB_LOG_FILE_SIZE = "128M"
# Linux caps sun_path at 107 bytes; mariadbd refuses longer socket paths.
MAX_SOCKET_PATH = 100

USE_GTID_MODES = ("no", "slave_pos", "current_pos")

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


class MariaDBError(SandboxError):
    """A server could not be started or stopped; the message carries its error.log tail."""


class MariaDBNotInstalled(SandboxError, FileNotFoundError):
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
    # A tmpdir of its own: bootstraps running at once in a shared /tmp were seen to fail on each
    # other's temporary tables ("Error on delete of '/tmp/#sql-temptable-...'").
    tmpdir = root / "tmp"
    tmpdir.mkdir(exist_ok=True)
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
        f"--tmpdir={tmpdir}",
    ]
    returncode, output = _run_as_a_group(cmd, timeout=300)
    (root / "install.log").write_text(output)
    if returncode != 0:
        raise MariaDBError(f"mariadb-install-db failed (exit {returncode}):\n{output}")
    return datadir


def _run_as_a_group(cmd: list[str], timeout: float) -> tuple[int, str]:
    """Run ``cmd`` to its end in a process group of its own, killed whole if it is interrupted.
    mariadb-install-db is a script whose mariadbd --bootstrap outlives a kill of the script
    alone (subprocess.run's): a Ctrl-C or SIGTERM in the middle left it running."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):  # the whole group had ended
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, output


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
    kill()/start() and restart(), so a restarted server has its data and binlogs.  One put in
    place before the first start() (a restored backup: ``mariadb-backup --copy-back
    --datadir=<datadir>``) is started as it is.
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
        return (f"<{type(self).__name__} server_id={self.server_id} {LOOPBACK}:{self.port} "
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

    @property
    def initialised(self) -> bool:
        """Whether base_dir holds a datadir already (a start() then keeps its data and binlogs)."""
        return (self.datadir / "mysql").is_dir()

    def error_log_tail(self, offset: int = 0, lines: int = 40) -> str:
        """The last lines of error.log written since offset, for error messages."""
        return file_tail(self.error_log, offset, lines)

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
        if port_in_use(self.port):
            # Said now: otherwise the server fails to bind and the error.log is all there is.
            raise MariaDBError(f"port {self.port} is already taken by another process; choose another port")
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

    def destroy(self) -> None:
        """stop(), then remove base_dir with the data."""
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def _prepare_dirs(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "tmp").mkdir(exist_ok=True)
        if self._own_socket_dir is not None:
            self._own_socket_dir.mkdir(exist_ok=True)
        if not self.initialised:
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
        rows = self._statement("SELECT @@datadir", READY_PROBE_TIMEOUT)
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

    # --- SQL as root (a new connection per statement; subclasses may keep connections)

    def client(self, timeout: float = QUERY_TIMEOUT, user: str = ROOT_USER, password: str = "") -> BlockingClient:
        """A new logged-in connection through the relay's own client; the caller closes it."""
        return BlockingClient(self.port, user, password, timeout=timeout)

    def sql(self, query: str) -> list[Row]:
        """Run one statement as root and return its rows as text ([] for statements without any)."""
        return self._statement(query, QUERY_TIMEOUT)

    def _statement(self, query: str, timeout: float) -> list[Row]:
        client = self.client(timeout)
        try:
            return client.rows(query)
        finally:
            client.quit()

    def binlog_files(self) -> list[tuple[str, int]]:
        """SHOW BINARY LOGS as [(name, size)], oldest first."""
        return [(str(row[0]), int(row[1] or 0)) for row in self.sql("SHOW BINARY LOGS")]

    def purge_binlogs_to(self, name: str, timeout: float = QUERY_TIMEOUT) -> None:
        """PURGE BINARY LOGS TO ``name``, again until every file before it is gone: the server
        silently keeps a file a dump thread still reads, or one whose transactions its engine has
        not made durable yet (the binlog checkpoint, up to a second behind with a lazy log flush)."""

        def purged() -> bool:
            self.sql(f"PURGE BINARY LOGS TO '{name}'")
            return self.binlog_files()[0][0] == name

        wait_for(purged, timeout, f"{self!r}: PURGE BINARY LOGS TO '{name}' kept older files")

    def master_status(self) -> tuple[str, int]:
        """(file, position) of SHOW MASTER STATUS: where the next event will be written."""
        rows = self.sql("SHOW MASTER STATUS")
        if not rows:
            raise MariaDBError(f"{self!r}: SHOW MASTER STATUS is empty (binlog off?)")
        return str(rows[0][0]), int(rows[0][1] or 0)

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
        60 s) so a replica reconnects promptly when its source restarts."""
        if use_gtid not in USE_GTID_MODES:
            raise ValueError(f"use_gtid must be one of {', '.join(USE_GTID_MODES)}, not {use_gtid!r}")
        clauses = [
            f"MASTER_HOST = {sql_string(host)}",
            f"MASTER_PORT = {int(port)}",
            f"MASTER_USER = {sql_string(user)}",
            f"MASTER_PASSWORD = {sql_string(password)}",
            f"MASTER_CONNECT_RETRY = {int(connect_retry)}",
            f"MASTER_USE_GTID = {use_gtid}",
        ]
        if log_file is not None:
            clauses.append(f"MASTER_LOG_FILE = {sql_string(log_file)}")
        if log_pos is not None:
            clauses.append(f"MASTER_LOG_POS = {int(log_pos)}")
        if heartbeat_period is not None:
            clauses.append(f"MASTER_HEARTBEAT_PERIOD = {float(heartbeat_period)}")
        self.sql("CHANGE MASTER TO " + ", ".join(clauses))

    def start_slave(self) -> None:
        self.sql("START SLAVE")

    def stop_slave(self) -> None:
        self.sql("STOP SLAVE")

    def slave_status(self) -> dict[str, Any]:
        """SHOW SLAVE STATUS as a dict ({} when no replication is configured)."""
        client = self.client()
        try:
            result = client.query("SHOW SLAVE STATUS")
        finally:
            client.quit()
        rows = result.dicts() if isinstance(result, ResultSet) else []
        return rows[0] if rows else {}


def sql_string(text: str) -> str:
    """A quoted SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

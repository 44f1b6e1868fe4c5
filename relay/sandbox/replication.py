"""MariaDB replicas of a source (a primary or a relay): pointing them at it, and waiting until they
executed everything it has.  Synchronous; the source and the replicas are LocalMariaDB servers.

    attach_replica(replica, relay.port)                   # mysql-bin.000001:4, or use_gtid="slave_pos"
    status = wait_caught_up(primary, replica)             # SHOW SLAVE STATUS once it executed everything
    replica_note(status) or "replicating"                 # for a person; replica_summary(): for a failure
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .binlogfiles import last_checkpoint
from .errors import ReplicationStopped, WaitTimeout
from .mariadb import LocalMariaDB
from .polling import wait_for
from .ports import LOOPBACK

Position = tuple[str, int]
SlaveStatus = dict[str, Any]

FIRST_FILE = "mysql-bin.000001"  # every LocalMariaDB's first binlog (log_bin=mysql-bin)
CATCH_UP_TIMEOUT = 60.0
# What a failure message shows of SHOW SLAVE STATUS: enough to tell which thread stopped, where, and why.
SUMMARY_KEYS = ("Slave_IO_Running", "Slave_SQL_Running", "Master_Port", "Master_Log_File", "Read_Master_Log_Pos",
                "Relay_Master_Log_File", "Exec_Master_Log_Pos", "Last_IO_Errno", "Last_IO_Error", "Last_SQL_Errno",
                "Last_SQL_Error", "Using_Gtid", "Gtid_IO_Pos")


def attach_replica(replica: LocalMariaDB, port: int, *, use_gtid: str = "no", log_file: str | None = FIRST_FILE,
                   log_pos: int | None = 4, extra_change: str = "") -> None:
    """Point replica at 127.0.0.1:port (as repl/replpass) and START SLAVE: from log_file:log_pos, or by GTID
    (use_gtid slave_pos or current_pos, which take no file and position).  extra_change is a CHANGE MASTER
    clause list run after (e.g. "MASTER_SSL = 1, MASTER_SSL_CA = '...'")."""
    if use_gtid != "no":
        log_file = log_pos = None
    replica.change_master(LOOPBACK, port, log_file=log_file, log_pos=log_pos, use_gtid=use_gtid)
    if extra_change:
        replica.sql(f"CHANGE MASTER TO {extra_change}")
    replica.start_slave()


# ------------------------------------------------------------------ reading SHOW SLAVE STATUS


def replica_position(status: SlaveStatus) -> Position | None:
    """(Relay_Master_Log_File, Exec_Master_Log_Pos): what the SQL thread has executed; None before
    CHANGE MASTER."""
    name = status.get("Relay_Master_Log_File")
    return (str(name), int(status.get("Exec_Master_Log_Pos") or 0)) if name else None


def is_stopped(status: SlaveStatus) -> bool:
    """Whether the IO or the SQL thread has stopped (an ERR 1236, a duplicate key, STOP SLAVE...).
    A thread that reconnects says "Connecting", not "No"."""
    return "No" in (status.get("Slave_IO_Running"), status.get("Slave_SQL_Running"))


def replica_note(status: SlaveStatus) -> str:
    """"" while both threads run; else their state and the last errors, in words for a person."""
    if not status:
        return "not replicating"
    io, sql_thread = status.get("Slave_IO_Running"), status.get("Slave_SQL_Running")
    if io == "Yes" and sql_thread == "Yes":
        return ""
    errors = [status.get(key) for key in ("Last_IO_Error", "Last_SQL_Error") if status.get(key)]
    return f"IO thread {io}, SQL thread {sql_thread}" + "".join(f": {error}" for error in errors)


def replica_summary(status: SlaveStatus) -> str:
    """The fields of SHOW SLAVE STATUS that explain a failure, as key=value."""
    return ", ".join(f"{key}={status.get(key)!r}" for key in SUMMARY_KEYS)


# ------------------------------------------------------------------ waiting


def wait_replica_at(replica: LocalMariaDB, target: Position | Callable[[], Position],
                    timeout: float = CATCH_UP_TIMEOUT) -> SlaveStatus:
    """Poll until the replica executed up to target (file, position), or to what target() returns at
    that moment; return its SHOW SLAVE STATUS.  Raises ReplicationStopped at once when its IO or SQL
    thread has stopped, WaitTimeout at the deadline (both AssertionErrors, with the replica's status)."""
    last: SlaveStatus = {}
    wanted: Position | None = None

    def arrived() -> bool:
        nonlocal last, wanted
        wanted = target() if callable(target) else (target[0], int(target[1]))
        last = replica.slave_status()
        if is_stopped(last):
            raise ReplicationStopped(f"replica server_id {replica.server_id} stopped replicating: "
                                     f"{replica_summary(last)}")
        return replica_position(last) == wanted

    try:
        wait_for(arrived, timeout, f"replica server_id {replica.server_id} did not catch up")
    except WaitTimeout as exc:
        raise WaitTimeout(f"{exc}: wanted {wanted}, its status: {replica_summary(last)}") from None
    return last


def binlog_settled(server: LocalMariaDB) -> bool:
    """True once the server's active binlog has its own BINLOG_CHECKPOINT.  MariaDB writes that event by
    itself, some time after a rotation; until then its binlog may still grow with no write from anyone."""
    name, _ = server.master_status()
    return last_checkpoint(server.binlog_path(name)) == name


def wait_binlog_settled(server: LocalMariaDB, timeout: float = 30.0) -> None:
    wait_for(lambda: binlog_settled(server), timeout, f"server_id {server.server_id}: no binlog checkpoint")


def wait_caught_up(primary: LocalMariaDB, replica: LocalMariaDB, timeout: float = CATCH_UP_TIMEOUT) -> SlaveStatus:
    """wait_replica_at the primary's SHOW MASTER STATUS (read again at every poll), once the primary's
    binlog has settled: callers may then compare the replica's position with the primary's."""
    wait_binlog_settled(primary, timeout)
    return wait_replica_at(replica, primary.master_status, timeout)

"""SHOW [GLOBAL | SESSION] STATUS [LIKE 'pattern' | WHERE Variable_name = 'name']: the status
variables the relay can state truthfully, under MariaDB's names (each one is a variable a MariaDB
10.11 server shows: tests/integration/test_show_status.py checks it), Variable_name / Value as
MariaDB types them.  A variable the relay has no figure for is left out rather than shown as 0.

Scopes as MariaDB's: the counters a server keeps per session (Bytes_*, Com_*, Questions,
Binlog_bytes_written) are shown by SHOW GLOBAL STATUS only, since the relay keeps them for the
whole process; the others are the same in both scopes, as a server shows its global-only variables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..protocol.codes import ER_PARSE_ERROR
from ..protocol.resultset import TYPE_VAR_STRING
from . import replicastatus

COLUMNS = ("Variable_name", "Value")
TYPES = (TYPE_VAR_STRING, TYPE_VAR_STRING)

# The statements the relay counts, by MariaDB's Com_ name (sql_parse.cc's SQLCOM_* as counted).
COMMANDS = ("begin", "change_db", "commit", "purge", "purge_before_date", "rollback", "select", "set_option",
            "show_binlog_status", "show_binlogs", "show_slave_hosts", "show_slave_status", "show_status",
            "show_variables")


@dataclass(frozen=True)
class StatusFigures:
    """What the relay counts and knows (read by relay/downstream/statusfacts.py)."""

    uptime: int
    threads_connected: int
    threads_running: int
    connections: int
    max_used_connections: int
    aborted_connects: int
    slave_running: bool  # connected to the primary and dumping
    slaves_connected: int  # replicas registered and dumping
    semi_sync_slave: bool  # the relay is a semi-sync replica of its primary right now
    semi_sync_master: bool  # the relay waits for its semi-sync replicas (semi_sync.wait_for_replicas)
    semi_sync_master_clients: int
    received_heartbeats: int
    heartbeat_period: float
    binlog_bytes_written: int
    bytes_received: int
    bytes_sent: int
    questions: int
    commands: Mapping[str, int] = field(default_factory=dict)


def _on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


def variables(figures: StatusFigures, global_scope: bool) -> dict[str, object]:
    """Name -> value of the variables shown in this scope."""
    shown: dict[str, object] = {
        "Aborted_connects": figures.aborted_connects,
        "Connections": figures.connections,
        "Max_used_connections": figures.max_used_connections,
        "Rpl_semi_sync_master_clients": figures.semi_sync_master_clients,
        "Rpl_semi_sync_master_status": _on_off(figures.semi_sync_master),
        "Rpl_semi_sync_slave_status": _on_off(figures.semi_sync_slave),
        "Slave_heartbeat_period": f"{figures.heartbeat_period:.3f}",
        "Slave_received_heartbeats": figures.received_heartbeats,
        "Slave_running": _on_off(figures.slave_running),
        "Slaves_connected": figures.slaves_connected,
        "Slaves_running": int(figures.slave_running),
        "Threads_connected": figures.threads_connected,
        "Threads_running": figures.threads_running,
        "Uptime": figures.uptime,
    }
    if global_scope:
        shown.update({
            "Binlog_bytes_written": figures.binlog_bytes_written,
            "Bytes_received": figures.bytes_received,
            "Bytes_sent": figures.bytes_sent,
            "Questions": figures.questions,
            **{f"Com_{name}": figures.commands.get(name, 0) for name in COMMANDS},
        })
    return shown


_SHOW_STATUS = re.compile(r"^show\s+(?:(global)\s+|session\s+|local\s+)?status"
                          r"(?:\s+(?:like\s+'([^']*)'|where\s+variable_name\s*(=|like)\s*'([^']*)'))?$", re.I)


@dataclass(frozen=True)
class Request:
    global_scope: bool
    pattern: re.Pattern[str] | None  # on the lower-cased name; None: every variable


def parse(text: str) -> Request | None:
    """SHOW STATUS in the forms tools send; None for anything else."""
    match = _SHOW_STATUS.match(" ".join(text.split()))
    if not match:
        return None
    scope, like, operator, where = match.groups()
    if like is not None:
        pattern: re.Pattern[str] | None = _like(like)
    elif where is not None:
        pattern = _like(where) if operator.lower() == "like" else re.compile(re.escape(where.lower()) + r"\Z")
    else:
        pattern = None
    return Request(scope is not None, pattern)


def _like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE (case-insensitive, as MariaDB compares names): % any run, _ one character, \\ escapes."""
    parts, escaped = [], False
    for char in pattern.lower():
        if escaped:
            parts.append(re.escape(char))
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            parts.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
    return re.compile("".join(parts) + r"\Z", re.S)


def rows(request: Request, figures: StatusFigures) -> tuple[tuple[str, object], ...]:
    """The rows, sorted by name as a server lists them."""
    shown = variables(figures, request.global_scope)
    return tuple(sorted(((name, value) for name, value in shown.items()
                         if request.pattern is None or request.pattern.match(name.lower())),
                        key=lambda row: row[0].lower()))


# ------------------------------------------------------------------ Com_*: what each statement counts as

_SHOW_COMMANDS = (
    (re.compile(r"^show (?:master|binlog|binary log) status$"), "show_binlog_status"),
    (re.compile(r"^show (?:binary|master) logs$"), "show_binlogs"),
    (re.compile(r"^show (?:slave hosts|replicas|replica hosts)$"), "show_slave_hosts"),
    (re.compile(r"^show (?:global |session |local )?status\b"), "show_status"),
    (re.compile(r"^show (?:global |session |local )?variables\b"), "show_variables"),
)


def command_of(sql: str) -> str | None:
    """The Com_ counter a statement adds to (MariaDB's name, without Com_), None if none of COMMANDS."""
    lowered = " ".join(sql.strip().rstrip(";").lower().split())
    first = lowered.split(" ", 1)[0] if lowered else ""
    if first in ("select", "commit", "rollback", "begin"):
        return first
    if first == "set":
        return "set_option"
    if first == "use":
        return "change_db"
    if lowered.startswith("start transaction"):
        return "begin"
    if first == "purge":
        return "purge_before_date" if " before " in lowered else "purge"
    if first != "show":
        return None
    replica_status = replicastatus.parse(lowered, True)
    if replica_status is not None:  # a statement the parser refuses is not counted
        syntax_error = isinstance(replica_status, replicastatus.Refusal) and replica_status.code == ER_PARSE_ERROR
        return None if syntax_error else "show_slave_status"
    return next((name for pattern, name in _SHOW_COMMANDS if pattern.match(lowered)), None)

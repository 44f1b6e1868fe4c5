"""SHOW SLAVE STATUS and its other names: the relay is a replica of its primary, and says so the
way a replica of the same flavour does (same columns, order and types; the values are the relay's).

MariaDB (sql/slave.cc, show_master_info_get_fields; checked against a 10.11 replica by
tests/integration/test_show_status.py): SHOW SLAVE | REPLICA ['name'] STATUS [FOR CHANNEL 'name'],
and SHOW ALL SLAVES | REPLICAS STATUS, which adds Connection_name and Slave_SQL_State first and the
counters of every connection last.  MySQL 8 (sql/rpl_replica.cc, show_slave_status_metadata): SHOW
REPLICA STATUS names its columns Source_* / Replica_* (8.0.22+), SHOW SLAVE STATUS the old Master_* /
Slave_* names; SHOW ALL SLAVES STATUS is MariaDB's only.

What the relay puts where (README "Status statements"):
- Master_Log_File / Read_Master_Log_Pos: where the received stream is (the relay's stored
  coordinates, the primary's own until a switch of primary); Relay_Master_Log_File /
  Exec_Master_Log_Pos and Relay_Log_File / Relay_Log_Pos: the committed end, since the relay's
  relay log is its stored copy of the primary's files; Relay_Log_Space: the bytes stored.
- Slave_SQL_Running is "Yes" while the relay runs: storing what it receives is what it applies, and
  that never stops while ingest runs (a real replica's SQL thread also keeps running while its IO
  thread reconnects).  Slave_IO_Running is "Yes" while connected and dumping, else "Connecting".
  After STOP SLAVE both are "No", as a replica's are.
- Master_Host, Master_Port, Master_User and the SSL columns: the upstream ingest follows, the one
  CHANGE MASTER TO gave when it did (relay/ingest/settings.py EffectiveUpstream).
- Gtid_IO_Pos and Gtid_Slave_Pos: the GTID position of the stored history.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..protocol.codes import ER_PARSE_ERROR
from ..protocol.resultset import TYPE_DOUBLE, TYPE_LONG, TYPE_LONGLONG, TYPE_VAR_STRING

ER_MASTER_INFO = 1617  # MariaDB: "There is no master connection '%s'"
ER_REPLICA_CHANNEL_DOES_NOT_EXIST = 3074  # MySQL: "Replication channel '%s' does not exist."

S, L, LL, D = TYPE_VAR_STRING, TYPE_LONG, TYPE_LONGLONG, TYPE_DOUBLE


@dataclass(frozen=True)
class ReplicaStatus:
    """The relay's upstream side, as one replica connection (read by relay/downstream/statusfacts.py)."""

    io_running: str  # Yes | Connecting | No
    host: str
    user: str
    port: int
    connect_retry: int
    read_file: str  # the received stream: Master_Log_File / Read_Master_Log_Pos
    read_position: int
    exec_file: str  # the committed end: Relay_Master_Log_File / Exec_Master_Log_Pos
    exec_position: int
    relay_log_space: int
    seconds_behind: int | None
    caught_up: bool  # everything received is committed: the SQL side waits for more
    master_server_id: int
    using_gtid: str  # No | Slave_Pos
    gtid_position: str  # MariaDB: the stored history's GTID position; MySQL: its GTID set
    ignore_server_ids: tuple[int, ...] = ()
    last_io_errno: int = 0
    last_io_error: str = ""
    last_io_error_time: float | None = None
    ssl: bool = False
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    ssl_verify_server_cert: bool = False
    received_events: int = 0  # on the current connection
    received_heartbeats: int = 0
    heartbeat_period: float = 0.0
    waiting_for_space: bool = False  # ingest paused: data_dir is full
    reconnecting: bool = False  # not connected, after a dump that ran
    sql_running: str = "Yes"  # No after STOP SLAVE, with io_running


# -------------------------------------------------------------------------- the statements

_NAME = r"(?:'([^']*)'|\"([^\"]*)\"|`([^`]*)`)"
_CHANNEL = rf"(?:\s+for\s+channel\s+{_NAME})?"
_MARIADB = re.compile(rf"^show\s+(?:(all)\s+(?:slaves|replicas)|(?:slave|replica)(?:\s+{_NAME})?)\s+status"
                      rf"{_CHANNEL}$", re.I)
_MYSQL = re.compile(rf"^show\s+(slave|replica)\s+status{_CHANNEL}$", re.I)
_ANY = re.compile(r"^show\s+(?:all\s+)?(?:slaves?|replicas?)\b.*\bstatus\b", re.I | re.S)


@dataclass(frozen=True)
class Request:
    """Which SHOW ... STATUS was asked: all connections (MariaDB's extra columns), the old MySQL words."""

    all_connections: bool = False
    old_words: bool = False


@dataclass(frozen=True)
class Refusal:
    code: int
    message: str
    sqlstate: str = "HY000"


def parse(text: str, is_mariadb: bool) -> Request | Refusal | None:
    """The statement as this flavour's server reads it; None when it is no replica status statement."""
    text = " ".join(text.split())
    if not _ANY.match(text):
        return None
    if not is_mariadb:
        match = _MYSQL.match(text)
        if not match:
            return _syntax_error(text, "MySQL")
        channel = next((name for name in match.groups()[1:] if name is not None), "")
        if channel:
            return Refusal(ER_REPLICA_CHANNEL_DOES_NOT_EXIST, f"Replication channel '{channel}' does not exist.")
        return Request(old_words=match.group(1).lower() == "slave")
    match = _MARIADB.match(text)
    if not match:
        return _syntax_error(text, "MariaDB")
    names = [name for name in match.groups()[1:] if name is not None]
    connection = names[0] if names else ""
    if connection:  # the relay's one connection is the default one, ''
        return Refusal(ER_MASTER_INFO, f"There is no master connection '{connection}'")
    return Request(all_connections=match.group(1) is not None)


def _syntax_error(text: str, flavour: str) -> Refusal:
    """What the server's parser says of words it does not expect: NOLOCK, NONBLOCKING (what
    mysqld_exporter tries on Percona), or MariaDB's ALL on MySQL."""
    trailing = re.search(r"\bstatus\s+(.+)$", text, re.I)
    mysql_all = flavour == "MySQL" and text.lower().startswith("show all")
    near = trailing.group(1) if trailing and not mysql_all else text[5:]
    return Refusal(ER_PARSE_ERROR, f"You have an error in your SQL syntax; check the manual that corresponds to "
                   f"your {flavour} server version for the right syntax to use near '{near[:80]}' at line 1",
                   "42000")


# -------------------------------------------------------------------------- MariaDB 10.11

_MARIADB_COLUMNS: tuple[tuple[str, int], ...] = (
    ("Slave_IO_State", S), ("Master_Host", S), ("Master_User", S), ("Master_Port", L), ("Connect_Retry", L),
    ("Master_Log_File", S), ("Read_Master_Log_Pos", LL), ("Relay_Log_File", S), ("Relay_Log_Pos", LL),
    ("Relay_Master_Log_File", S), ("Slave_IO_Running", S), ("Slave_SQL_Running", S), ("Replicate_Do_DB", S),
    ("Replicate_Ignore_DB", S), ("Replicate_Do_Table", S), ("Replicate_Ignore_Table", S),
    ("Replicate_Wild_Do_Table", S), ("Replicate_Wild_Ignore_Table", S), ("Last_Errno", L), ("Last_Error", S),
    ("Skip_Counter", L), ("Exec_Master_Log_Pos", LL), ("Relay_Log_Space", LL), ("Until_Condition", S),
    ("Until_Log_File", S), ("Until_Log_Pos", LL), ("Master_SSL_Allowed", S), ("Master_SSL_CA_File", S),
    ("Master_SSL_CA_Path", S), ("Master_SSL_Cert", S), ("Master_SSL_Cipher", S), ("Master_SSL_Key", S),
    ("Seconds_Behind_Master", LL), ("Master_SSL_Verify_Server_Cert", S), ("Last_IO_Errno", L),
    ("Last_IO_Error", S), ("Last_SQL_Errno", L), ("Last_SQL_Error", S), ("Replicate_Ignore_Server_Ids", S),
    ("Master_Server_Id", L), ("Master_SSL_Crl", S), ("Master_SSL_Crlpath", S), ("Using_Gtid", S),
    ("Gtid_IO_Pos", S), ("Replicate_Do_Domain_Ids", S), ("Replicate_Ignore_Domain_Ids", S),
    ("Parallel_Mode", S), ("SQL_Delay", L), ("SQL_Remaining_Delay", L), ("Slave_SQL_Running_State", S),
    ("Slave_DDL_Groups", LL), ("Slave_Non_Transactional_Groups", LL), ("Slave_Transactional_Groups", LL),
    ("Replicate_Rewrite_DB", S),
)
_MARIADB_ALL_FIRST = (("Connection_name", S), ("Slave_SQL_State", S))
_MARIADB_ALL_LAST = (("Retried_transactions", L), ("Max_relay_log_size", LL), ("Executed_log_entries", L),
                     ("Slave_received_heartbeats", L), ("Slave_heartbeat_period", D), ("Gtid_Slave_Pos", S))

MARIADB_IO_STATES = {"Yes": "Waiting for master to send event", "Connecting": "Connecting to master", "No": "",
                     "reconnecting": "Reconnecting after a failed master event read",
                     "space": "Waiting for the slave SQL thread to free enough relay log space"}
MARIADB_SQL_CAUGHT_UP = "Slave has read all relay log; waiting for more updates"
MARIADB_SQL_BUSY = "Reading event from the relay log"


def _mariadb_values(status: ReplicaStatus) -> dict[str, object]:
    sql_state = MARIADB_SQL_CAUGHT_UP if status.caught_up else MARIADB_SQL_BUSY
    return {
        **_common_values(status),
        "Connection_name": "", "Slave_SQL_State": sql_state, "Slave_IO_State": _io_state(status, MARIADB_IO_STATES),
        "Master_Host": status.host, "Master_User": status.user, "Master_Port": status.port,
        "Master_Log_File": status.read_file, "Read_Master_Log_Pos": status.read_position,
        "Relay_Master_Log_File": status.exec_file, "Slave_IO_Running": status.io_running,
        "Slave_SQL_Running": status.sql_running, "Exec_Master_Log_Pos": status.exec_position,
        "Master_SSL_Allowed": _yes_no(status.ssl), "Master_SSL_CA_File": status.ssl_ca,
        "Master_SSL_CA_Path": "", "Master_SSL_Cert": status.ssl_cert, "Master_SSL_Cipher": "",
        "Master_SSL_Key": status.ssl_key, "Seconds_Behind_Master": status.seconds_behind,
        "Master_SSL_Verify_Server_Cert": _yes_no(status.ssl_verify_server_cert),
        "Master_Server_Id": status.master_server_id, "Master_SSL_Crl": "", "Master_SSL_Crlpath": "",
        "Using_Gtid": status.using_gtid, "Gtid_IO_Pos": status.gtid_position, "Replicate_Do_Domain_Ids": "",
        "Replicate_Ignore_Domain_Ids": "", "Parallel_Mode": "none", "Slave_SQL_Running_State": sql_state,
        "Slave_DDL_Groups": 0, "Slave_Non_Transactional_Groups": 0, "Slave_Transactional_Groups": 0,
        "Retried_transactions": 0, "Max_relay_log_size": 0, "Executed_log_entries": status.received_events,
        "Slave_received_heartbeats": status.received_heartbeats,
        "Slave_heartbeat_period": round(status.heartbeat_period, 3), "Gtid_Slave_Pos": status.gtid_position,
    }


def _common_values(status: ReplicaStatus) -> dict[str, object]:
    """The columns both flavours name alike."""
    return {
        "Connect_Retry": status.connect_retry, "Relay_Log_File": status.exec_file,
        "Relay_Log_Pos": status.exec_position, "Replicate_Do_DB": "", "Replicate_Ignore_DB": "",
        "Replicate_Do_Table": "", "Replicate_Ignore_Table": "", "Replicate_Wild_Do_Table": "",
        "Replicate_Wild_Ignore_Table": "", "Last_Errno": 0, "Last_Error": "", "Skip_Counter": 0,
        "Relay_Log_Space": status.relay_log_space, "Until_Condition": "None", "Until_Log_File": "",
        "Until_Log_Pos": 0, "Last_IO_Errno": status.last_io_errno, "Last_IO_Error": status.last_io_error,
        "Last_SQL_Errno": 0, "Last_SQL_Error": "",
        "Replicate_Ignore_Server_Ids": ", ".join(str(server_id) for server_id in status.ignore_server_ids),
        "SQL_Delay": 0, "SQL_Remaining_Delay": None, "Replicate_Rewrite_DB": "",
    }


# -------------------------------------------------------------------------- MySQL 8

_MYSQL_COLUMNS: tuple[tuple[str, int], ...] = (
    ("Replica_IO_State", S), ("Source_Host", S), ("Source_User", S), ("Source_Port", L), ("Connect_Retry", L),
    ("Source_Log_File", S), ("Read_Source_Log_Pos", LL), ("Relay_Log_File", S), ("Relay_Log_Pos", LL),
    ("Relay_Source_Log_File", S), ("Replica_IO_Running", S), ("Replica_SQL_Running", S), ("Replicate_Do_DB", S),
    ("Replicate_Ignore_DB", S), ("Replicate_Do_Table", S), ("Replicate_Ignore_Table", S),
    ("Replicate_Wild_Do_Table", S), ("Replicate_Wild_Ignore_Table", S), ("Last_Errno", L), ("Last_Error", S),
    ("Skip_Counter", L), ("Exec_Source_Log_Pos", LL), ("Relay_Log_Space", LL), ("Until_Condition", S),
    ("Until_Log_File", S), ("Until_Log_Pos", LL), ("Source_SSL_Allowed", S), ("Source_SSL_CA_File", S),
    ("Source_SSL_CA_Path", S), ("Source_SSL_Cert", S), ("Source_SSL_Cipher", S), ("Source_SSL_Key", S),
    ("Seconds_Behind_Source", LL), ("Source_SSL_Verify_Server_Cert", S), ("Last_IO_Errno", L),
    ("Last_IO_Error", S), ("Last_SQL_Errno", L), ("Last_SQL_Error", S), ("Replicate_Ignore_Server_Ids", S),
    ("Source_Server_Id", L), ("Source_UUID", S), ("Source_Info_File", S), ("SQL_Delay", L),
    ("SQL_Remaining_Delay", L), ("Replica_SQL_Running_State", S), ("Source_Retry_Count", LL), ("Source_Bind", S),
    ("Last_IO_Error_Timestamp", S), ("Last_SQL_Error_Timestamp", S), ("Source_SSL_Crl", S),
    ("Source_SSL_Crlpath", S), ("Retrieved_Gtid_Set", S), ("Executed_Gtid_Set", S), ("Auto_Position", L),
    ("Replicate_Rewrite_DB", S), ("Channel_Name", S), ("Source_TLS_Version", S), ("Source_public_key_path", S),
    ("Get_Source_public_key", L), ("Network_Namespace", S),
)
# rename_fields_use_old_replica_source_terms: SHOW SLAVE STATUS keeps the words of MySQL 8.0.21
_MYSQL_OLD_WORDS = {"Source_UUID": "Master_UUID", "Get_Source_public_key": "Get_master_public_key",
                    "Source_public_key_path": "Master_public_key_path"}
MYSQL_IO_STATES = {"Yes": "Waiting for source to send event", "Connecting": "Connecting to source", "No": "",
                   "reconnecting": "Reconnecting after a failed source event read",
                   "space": "Waiting for the replica SQL thread to free relay log space"}
MYSQL_SQL_CAUGHT_UP = "Replica has read all relay log; waiting for more updates"


def _old_word(name: str) -> str:
    if name in _MYSQL_OLD_WORDS:
        return _MYSQL_OLD_WORDS[name]
    return name.replace("Source", "Master").replace("Replica_", "Slave_")


def _mysql_values(status: ReplicaStatus) -> dict[str, object]:
    sql_state = MYSQL_SQL_CAUGHT_UP if status.caught_up else MARIADB_SQL_BUSY
    when = status.last_io_error_time
    return {
        **_common_values(status),
        "Replica_IO_State": _io_state(status, MYSQL_IO_STATES), "Source_Host": status.host,
        "Source_User": status.user, "Source_Port": status.port, "Source_Log_File": status.read_file,
        "Read_Source_Log_Pos": status.read_position, "Relay_Source_Log_File": status.exec_file,
        "Replica_IO_Running": status.io_running, "Replica_SQL_Running": status.sql_running,
        "Exec_Source_Log_Pos": status.exec_position, "Source_SSL_Allowed": _yes_no(status.ssl),
        "Source_SSL_CA_File": status.ssl_ca, "Source_SSL_CA_Path": "", "Source_SSL_Cert": status.ssl_cert,
        "Source_SSL_Cipher": "", "Source_SSL_Key": status.ssl_key, "Seconds_Behind_Source": status.seconds_behind,
        "Source_SSL_Verify_Server_Cert": _yes_no(status.ssl_verify_server_cert),
        "Source_Server_Id": status.master_server_id, "Source_UUID": "", "Source_Info_File": "",
        "Replica_SQL_Running_State": sql_state,
        "Source_Retry_Count": 0,  # MySQL's 0: no limit to the reconnection attempts, as the relay's
        "Source_Bind": "", "Last_IO_Error_Timestamp": _mysql_time(when) if status.last_io_errno and when else "",
        "Last_SQL_Error_Timestamp": "", "Source_SSL_Crl": "", "Source_SSL_Crlpath": "",
        "Retrieved_Gtid_Set": status.gtid_position, "Executed_Gtid_Set": status.gtid_position,
        "Auto_Position": 0, "Channel_Name": "", "Source_TLS_Version": "", "Source_public_key_path": "",
        "Get_Source_public_key": 0, "Network_Namespace": "",
    }


def _mysql_time(when: float) -> str:
    """MySQL's error timestamps: 'YYMMDD HH:MM:SS', local time."""
    return time.strftime("%y%m%d %H:%M:%S", time.localtime(when))


def _io_state(status: ReplicaStatus, words: dict[str, str]) -> str:
    if status.waiting_for_space:
        return words["space"]
    if status.io_running == "Connecting" and status.reconnecting:
        return words["reconnecting"]
    return words[status.io_running]


def _yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


# -------------------------------------------------------------------------- the result set

@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    types: tuple[int, ...]
    rows: tuple[tuple[object, ...], ...]


def table(request: Request, status: ReplicaStatus | None, is_mariadb: bool) -> Table:
    """The result set: one row for the relay's upstream, none when it has no upstream (as a server
    that is no replica answers)."""
    if is_mariadb:
        spec = _MARIADB_COLUMNS
        if request.all_connections:
            spec = _MARIADB_ALL_FIRST + spec + _MARIADB_ALL_LAST
        names = tuple(name for name, _ in spec)
        values = _mariadb_values(status) if status is not None else {}
    else:
        spec = _MYSQL_COLUMNS
        names = tuple(_old_word(name) if request.old_words else name for name, _ in spec)
        values = _mysql_values(status) if status is not None else {}
    types = tuple(column_type for _, column_type in spec)
    rows = (tuple(values[name] for name, _ in spec),) if status is not None else ()
    return Table(names, types, rows)

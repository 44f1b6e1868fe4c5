"""The SQL a replica or a binlog client sends, answered without a database (docs/protocol.md 3).

``answer(sql, session, server)`` returns a reply: rows, OK, or an error a real primary
would give.  Pure functions over strings; the session object holds the user variables.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

from ..protocol.codes import (
    ER_EMPTY_QUERY,
    ER_ERROR_WHEN_EXECUTING_COMMAND,
    ER_NOT_SUPPORTED_YET,
    ER_PARSE_ERROR,
    ER_UNKNOWN_SYSTEM_VARIABLE,
)
from ..protocol.resultset import TYPE_LONG, ColumnDef, int_column, text_column
from . import globalstatus, infoschema, replicastatus


@dataclass(frozen=True)
class Rows:
    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]
    types: tuple[int, ...] = ()  # the columns' types where the statement fixes them; else typed by value


Warning = tuple[str, int, str]  # Level, Code, Message: a row of SHOW WARNINGS


@dataclass(frozen=True)
class Ok:
    warnings: tuple[Warning, ...] = ()


@dataclass(frozen=True)
class Error:
    code: int
    message: str
    sqlstate: str = "HY000"


@dataclass(frozen=True)
class StreamedRows:
    """A result set the session sends as it is read (SHOW BINLOG EVENTS over a file of
    gigabytes): its columns first, then each batch of rows ``batches`` yields; an Error among
    them ends the result set as a primary's ERR does, after the rows already sent."""

    columns: tuple[ColumnDef, ...]
    batches: AsyncGenerator[list[tuple[object, ...]] | Error, None]


Reply = Rows | Ok | Error | StreamedRows


@dataclass(frozen=True)
class BinlogEventsRequest:
    """SHOW BINLOG EVENTS [IN 'file'] [FROM position] [LIMIT [offset,] count]."""

    file: str | None  # None: the first binlog file
    position: int = 0
    offset: int = 0
    count: int | None = None


async def _no_binlog_events(request: BinlogEventsRequest) -> AsyncGenerator[list[tuple[object, ...]] | Error, None]:
    yield binlog_events_error("Could not find target log")


def binlog_events_error(message: str) -> Error:
    """How a primary fails SHOW BINLOG EVENTS (sql_repl.cc mysql_show_binlog_events)."""
    return Error(ER_ERROR_WHEN_EXECUTING_COMMAND, f"Error when executing command SHOW BINLOG EVENTS: {message}")


@dataclass
class SessionVariables:
    """User variables of one connection (SET @a = ...), lower-cased names."""

    values: dict[str, object] = field(default_factory=dict)
    warnings: tuple[Warning, ...] = ()  # of the last statement, for SHOW WARNINGS


@dataclass(frozen=True)
class ServerFacts:
    """What the relay says about itself; callables give live values."""

    version: str
    server_id: int
    server_uuid: str
    binlog_checksum: str  # 'CRC32' or 'NONE', the upstream's
    is_mariadb: bool
    gtid_domain_id: int
    master_status: Callable[[], tuple[str, int, str]]  # file, position, executed GTID set
    binary_logs: Callable[[], list[tuple[str, int]]]
    slave_hosts: Callable[[], list[tuple[int, str, int, int, str]]]  # server_id, host, port, master_id, uuid
    binlog_gtid_pos: Callable[[str, int], str | None]
    gtid_binlog_pos: Callable[[], str]
    # The relay asks its semi-sync replicas for ACKs (semi_sync.wait_for_replicas): it then shows
    # rpl_semi_sync_master_enabled, which a MariaDB replica looks for before announcing semi-sync.
    semi_sync_master: bool = False
    # A MySQL-flavoured history's gtid_executed and gtid_purged (text), from its stored files.
    mysql_gtid_executed: Callable[[], str] = lambda: ""
    mysql_gtid_purged: Callable[[], str] = lambda: ""
    # SHOW BINLOG EVENTS: the rows of a stored file, batch by batch (downstream/binlogevents.py)
    binlog_events: Callable[[BinlogEventsRequest], AsyncGenerator[list[tuple[object, ...]] | Error, None]] = (
        _no_binlog_events)
    # The relay as a replica of its primary (SHOW SLAVE STATUS; None: no upstream) and its status
    # variables (SHOW STATUS), read when asked for (relay/downstream/statusfacts.py).
    replica_status: Callable[[], replicastatus.ReplicaStatus | None] = lambda: None
    status_figures: Callable[[], globalstatus.StatusFigures | None] = lambda: None


def _rows(columns: tuple[str, ...], *rows: tuple[object, ...]) -> Rows:
    return Rows(columns, tuple(rows))


def _none_of_them() -> str:
    """The GTID variables of the other flavour: empty."""
    return ""


# System variables replicas and tools ask for, by lower-case name.  Those read from the stored
# files are functions, called only when asked for: the first read after much ingest walks the
# newest file, and every SELECT @@version must not pay for it.
def _system_variables(server: ServerFacts) -> dict[str, object]:
    gtid: Callable[[], str]
    executed: Callable[[], str]
    purged: Callable[[], str]
    if server.is_mariadb:
        gtid, executed, purged = functools.cache(server.gtid_binlog_pos), _none_of_them, _none_of_them
    else:
        gtid, executed, purged = _none_of_them, functools.cache(server.mysql_gtid_executed), server.mysql_gtid_purged
    return {
        "version": server.version,
        "server_id": server.server_id,
        "server_uuid": server.server_uuid,
        "binlog_checksum": server.binlog_checksum,
        "gtid_domain_id": server.gtid_domain_id,
        # MariaDB has no gtid_mode; a MySQL history is served with ON once it holds GTIDs
        "gtid_mode": lambda: "ON" if executed() else "OFF",
        "gtid_executed": executed,
        "gtid_purged": purged,
        "gtid_binlog_pos": gtid,
        "gtid_current_pos": gtid,
        "gtid_slave_pos": "",
        "gtid_strict_mode": 0,
        "log_bin": "ON",
        "binlog_format": "ROW",
        "binlog_row_image": "FULL",
        "binlog_row_metadata": "FULL",
        "max_allowed_packet": 1 << 30,
        "version_comment": "binlog-relay",
        "hostname": "binlog-relay",
        "port": 3306,
        "time_zone": "SYSTEM",
        "system_time_zone": "UTC",
        "lower_case_table_names": 0,
        "sql_mode": "",
        "autocommit": 1,
        "character_set_server": "utf8mb4",
        "collation_server": "utf8mb4_general_ci",
        "character_set_client": "utf8mb4",
        "character_set_connection": "utf8mb4",
        "character_set_results": "utf8mb4",
        "net_write_timeout": 60,
        "wait_timeout": 28800,
        "interactive_timeout": 28800,
        "transaction_isolation": "REPEATABLE-READ",
        "tx_isolation": "REPEATABLE-READ",
        "log_slave_updates": "ON",
        "read_only": "ON",
        **({"rpl_semi_sync_master_enabled": "ON"} if server.semi_sync_master else {}),
    }


_SET_ASSIGNMENT = re.compile(r"\s*(?:(?:global|session|local|persist)\s+)?(@@(?:global\.|session\.|local\.)?|@)?"
                             r"([A-Za-z_][\w.$]*)\s*(?::=|=)\s*(.+)$", re.S | re.I)
_SELECT_ITEM = re.compile(r"^(@@(?:global\.|session\.|local\.)?[\w.]+|@[\w.$]+|version\(\)|unix_timestamp\(\)|"
                          r"-?\d+(?:\.\d+)?|'[^']*'|\"[^\"]*\"|database\(\)|user\(\)|current_user\(\)|"
                          r"connection_id\(\)|now\(\))(?:\s+as\s+(`[^`]+`|\w+))?$", re.I)
_BINLOG_GTID_POS = re.compile(r"^select\s+binlog_gtid_pos\(\s*'([^']*)'\s*,\s*(\d+)\s*\)$", re.I)
_SHOW_VARIABLES = re.compile(r"^show\s+(?:global\s+|session\s+)?variables(?:\s+(like|where\s+variable_name\s*=)"
                             r"\s*'([^']*)')?$", re.I)


def answer(sql: str, session: SessionVariables, server: ServerFacts, connection_id: int = 0,
           user: str = "") -> Reply:
    text = sql.strip().rstrip(";").strip()
    lowered = " ".join(text.lower().split())
    if not lowered:
        return Error(ER_EMPTY_QUERY, "Query was empty", "42000")
    if lowered.startswith("set "):
        return _set(text[4:], session, server)
    if lowered.startswith("select "):
        return _select(text[7:].strip(), session, server, connection_id, user)
    if lowered == "show warnings":
        return Rows(("Level", "Code", "Message"), session.warnings)
    if lowered.startswith("show "):
        return _show(lowered, text, server)
    if lowered in ("begin", "commit", "rollback", "start transaction") or lowered.startswith("use "):
        return Ok()
    if lowered.startswith("/*") and lowered.endswith("*/"):
        return Ok()
    return Error(ER_NOT_SUPPORTED_YET, f"binlog-relay does not support this statement: {text[:200]}", "42000")


def conditions_of(reply: Reply) -> tuple[Warning, ...]:
    """The conditions ``reply`` raises, as SHOW WARNINGS shows them: an OK's warnings, or the error."""
    if isinstance(reply, Ok):
        return reply.warnings
    if isinstance(reply, Error):
        return (("Error", reply.code, reply.message),)
    return ()


# ------------------------------------------------------------------ SET


def _split_top_level(text: str, separator: str = ",") -> list[str]:
    parts, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
            continue
        if char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _set(assignments: str, session: SessionVariables, server: ServerFacts) -> Reply:
    # SET NAMES / CHARACTER SET / TRANSACTION and other session settings are accepted as is.
    head = assignments.strip().lower()
    if head.startswith(("names", "character set", "charset", "transaction", "session transaction")):
        return Ok()
    for assignment in _split_top_level(assignments):
        match = _SET_ASSIGNMENT.match(assignment)
        if not match:
            return Error(ER_PARSE_ERROR, f"You have an error in your SQL syntax near '{assignment[:80]}'", "42000")
        prefix, name, expression = match.groups()
        if prefix == "@":
            value = _evaluate(expression.strip(), session, server)
            if isinstance(value, Error):
                return value
            session.values[name.lower()] = value
        # SET [GLOBAL|SESSION] system_var = ...: accepted and ignored (autocommit, sql_mode,
        # skip_replication, net timeouts...): a relay has no session state they would change.
    return Ok()


_UNSET = object()


def _evaluate(expression: str, session: SessionVariables, server: ServerFacts) -> object:
    lowered = expression.lower()
    if lowered == "null":
        return None
    if re.fullmatch(r"-?\d+", expression):
        return int(expression)
    if re.fullmatch(r"-?\d+\.\d+", expression):
        return float(expression)
    if len(expression) >= 2 and expression[0] == expression[-1] and expression[0] in "'\"":
        return expression[1:-1].replace("\\'", "'").replace("''", "'")
    if lowered.startswith("@@"):
        value = _system_variable(lowered, server)
        return value if value is not _UNSET else Error(
            ER_UNKNOWN_SYSTEM_VARIABLE, f"Unknown system variable '{_variable_name(lowered)}'")
    if lowered.startswith("@"):
        return session.values.get(lowered[1:])
    if lowered in ("unix_timestamp()", "now()"):
        return int(time.time())
    return Error(ER_PARSE_ERROR, f"binlog-relay cannot evaluate '{expression[:80]}'", "42000")


def _variable_name(reference: str) -> str:
    name = reference.lstrip("@")
    for scope in ("global.", "session.", "local."):
        if name.startswith(scope):
            return name[len(scope):]
    return name


def _system_variable(reference: str, server: ServerFacts) -> object:
    return _value(_system_variables(server).get(_variable_name(reference), _UNSET))


def _value(entry: object) -> object:
    """A system variable's value: those read from the stored files are functions (_system_variables)."""
    return entry() if callable(entry) else entry


# ------------------------------------------------------------------ SELECT


def _select(items: str, session: SessionVariables, server: ServerFacts, connection_id: int, user: str) -> Reply:
    gtid_pos = _BINLOG_GTID_POS.match("select " + items)
    if gtid_pos:
        value: object = server.binlog_gtid_pos(gtid_pos.group(1), int(gtid_pos.group(2)))
        return _rows((f"binlog_gtid_pos('{gtid_pos.group(1)}',{gtid_pos.group(2)})",), (value,))
    empty = infoschema.select("select " + items)
    if isinstance(empty, infoschema.EmptyTable):
        return Rows(empty.columns, (), empty.types)
    if empty is not None:
        return Error(empty.code, empty.message, empty.sqlstate)
    if " from " in f" {items.lower()} ":
        return Error(ER_NOT_SUPPORTED_YET, f"binlog-relay does not support this statement: SELECT {items[:200]}",
                     "42000")
    columns, values = [], []
    for item in _split_top_level(items):
        match = _SELECT_ITEM.match(item)
        if not match:
            return Error(ER_NOT_SUPPORTED_YET, f"binlog-relay does not support this statement: SELECT {items[:200]}",
                         "42000")
        expression, alias = match.groups()
        value = _select_value(expression, session, server, connection_id, user)
        if isinstance(value, Error):
            return value
        columns.append(alias.strip("`") if alias else expression)
        values.append(value)
    return _rows(tuple(columns), tuple(values))


def _select_value(expression: str, session: SessionVariables, server: ServerFacts, connection_id: int,
                  user: str) -> object:
    lowered = expression.lower()
    if lowered == "version()":
        return server.version
    if lowered == "connection_id()":
        return connection_id
    if lowered in ("user()", "current_user()"):
        return f"{user}@%"
    if lowered == "database()":
        return None
    return _evaluate(expression, session, server)


# ------------------------------------------------------------------ SHOW


def _show(lowered: str, text: str, server: ServerFacts) -> Reply:
    if lowered in ("show master status", "show binary log status", "show binlog status"):
        name, position, gtid = server.master_status()
        columns = ("File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB")
        if not server.is_mariadb:
            return _rows(columns + ("Executed_Gtid_Set",), (name, position, "", "", gtid))
        return _rows(columns, (name, position, "", ""))
    if lowered in ("show binary logs", "show master logs"):
        return Rows(("Log_name", "File_size"), tuple(server.binary_logs()))
    if lowered in ("show slave hosts", "show replicas", "show replica hosts"):
        return _replicas(lowered, server)
    if lowered == "show binlog events" or lowered.startswith("show binlog events "):
        return _binlog_events(text, server)
    match = _SHOW_VARIABLES.match(" ".join(text.split()))
    if match:
        return _show_variables(match.group(1), match.group(2), server)
    status = _show_status(text, server)
    if status is not None:
        return status
    return Error(ER_NOT_SUPPORTED_YET, f"binlog-relay does not support this statement: {text[:200]}", "42000")


def _show_status(text: str, server: ServerFacts) -> Reply | None:
    """SHOW SLAVE STATUS and its other names (replicastatus.py), SHOW STATUS (globalstatus.py)."""
    request = replicastatus.parse(text, server.is_mariadb)
    if isinstance(request, replicastatus.Refusal):
        return Error(request.code, request.message, request.sqlstate)
    if request is not None:
        table = replicastatus.table(request, server.replica_status(), server.is_mariadb)
        return Rows(table.columns, table.rows, table.types)
    status = globalstatus.parse(text)
    if status is None:
        return None
    figures = server.status_figures()
    rows = globalstatus.rows(status, figures) if figures is not None else ()
    return Rows(globalstatus.COLUMNS, rows, globalstatus.TYPES)


def _replicas(lowered: str, server: ServerFacts) -> Rows:
    hosts = server.slave_hosts()
    if server.is_mariadb:
        return Rows(("Server_id", "Host", "Port", "Master_id"), tuple(row[:4] for row in hosts))
    # MySQL (rpl_source.cc show_replicas) adds the replica's UUID; the old statement gets the
    # old words for the same columns.
    if lowered == "show replicas":
        return Rows(("Server_Id", "Host", "Port", "Source_Id", "Replica_UUID"), tuple(hosts))
    return Rows(("Server_Id", "Host", "Port", "Master_Id", "Slave_UUID"), tuple(hosts))


def _show_variables(kind: str | None, pattern: str | None, server: ServerFacts) -> Rows:
    variables = _system_variables(server)
    if pattern is None:
        selected = sorted(variables.items())
    else:
        regex = re.compile("^" + re.escape(pattern.lower()).replace("%", ".*").replace("_", ".") + "$")
        if kind and kind.lower().startswith("where"):
            regex = re.compile("^" + re.escape(pattern.lower()) + "$")
        selected = sorted((name, value) for name, value in variables.items() if regex.match(name))
    return Rows(("Variable_name", "Value"), tuple((name, _value(value)) for name, value in selected))


# ------------------------------------------------------------------ SHOW BINLOG EVENTS

# Log_event::init_show_field_list: MariaDB's Pos and End_log_pos have MY_INT64_NUM_DECIMAL_DIGITS
# (21) digits, MySQL's MY_INT32_NUM_DECIMAL_DIGITS (11).
def _binlog_event_columns(is_mariadb: bool) -> tuple[ColumnDef, ...]:
    digits = 21 if is_mariadb else 11
    return (text_column("Log_name", 20), int_column("Pos", digits), text_column("Event_type", 20),
            int_column("Server_id", 10, TYPE_LONG), int_column("End_log_pos", digits), text_column("Info", 20))


_TOKEN = re.compile(r"\s*(?:(?P<number>\d+)(?![\w$])|(?P<word>[A-Za-z_$][\w$]*)"
                    r"|(?P<string>'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\")|(?P<other>\S))", re.S)
_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "Z": "\x1a"}


class _SyntaxError(Exception):
    """Where the statement stops making sense: MariaDB quotes the text from there."""

    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


def _tokens(text: str, start: int) -> list[tuple[str, str, int]]:
    """(kind, text, offset) of each token from ``start``, then ("end", "", len(text))."""
    tokens, pos = [], start
    while True:
        match = _TOKEN.match(text, pos)
        if match is None:
            tokens.append(("end", "", len(text)))
            return tokens
        kind = match.lastgroup or "other"
        tokens.append((kind, match.group(kind), match.start(kind)))
        pos = match.end()


def _unquoted(literal: str) -> str:
    quote, body = literal[0], literal[1:-1]
    out, index = [], 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            out.append(_ESCAPES.get(body[index + 1], body[index + 1]))
            index += 2
            continue
        if char == quote:  # a doubled quote
            index += 1
        out.append(char)
        index += 1
    return "".join(out)


def parse_binlog_events(text: str) -> BinlogEventsRequest:
    """The parts of SHOW BINLOG EVENTS [IN 'file'] [FROM pos] [LIMIT [offset,] count | count
    OFFSET offset]; raises _SyntaxError at the first token out of place."""
    start = re.match(r"\s*show\s+binlog\s+events", text, re.I)
    assert start is not None
    tokens = _tokens(text, start.end())
    index = 0

    def take(kind: str, word: str | None = None) -> str | None:
        nonlocal index
        token_kind, token, _ = tokens[index]
        if token_kind == kind and (word is None or token.lower() == word):
            index += 1
            return token
        return None

    def need(kind: str) -> str:
        token = take(kind)
        if token is None:
            raise _SyntaxError(tokens[index][2])
        return token

    file = position = count = None
    offset = 0
    if take("word", "in"):
        file = _unquoted(need("string"))
    if take("word", "from"):
        position = int(need("number"))
    if take("word", "limit"):
        first = int(need("number"))
        if tokens[index][:2] == ("other", ","):
            index += 1
            offset, count = first, int(need("number"))
        elif take("word", "offset"):
            offset, count = int(need("number")), first
        else:
            count = first
    if tokens[index][0] != "end":
        raise _SyntaxError(tokens[index][2])
    return BinlogEventsRequest(file, position or 0, offset, count)


def _binlog_events(text: str, server: ServerFacts) -> Reply:
    try:
        request = parse_binlog_events(text)
    except _SyntaxError as error:
        line = text.count("\n", 0, error.at) + 1
        return Error(ER_PARSE_ERROR, "You have an error in your SQL syntax; check the manual that corresponds to "
                     f"your MariaDB server version for the right syntax to use near '{text[error.at:][:80]}' at "
                     f"line {line}", "42000")
    return StreamedRows(_binlog_event_columns(server.is_mariadb), server.binlog_events(request))

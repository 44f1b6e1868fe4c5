"""What SHOW BINLOG EVENTS says about one event (sans-IO): its ``Event_type`` name and its ``Info``
text, as the server that wrote the binlog says them.

MariaDB's texts follow its ``Log_event::get_type_str`` (log_event.cc) and the ``pack_info``
functions of log_event_server.cc, checked against a MariaDB 10.11 primary's answer for the same
file (tests/integration/test_show_binlog_events.py).  Identifiers are quoted with backticks,
as a session with the default ``sql_quote_show_create=1`` and no ``ANSI_QUOTES`` sees them.

A MySQL-written file (its FORMAT_DESCRIPTION names no MariaDB version) gets MySQL's names
(``Log_event::get_type_str`` of MySQL 8's log_event.cc) and MySQL's texts where they differ:
``SET @@SESSION.GTID_NEXT= '...'`` for GTID events, the GTID set of PREVIOUS_GTIDS, the
compression of a TRANSACTION_PAYLOAD, ``/* xid=N */`` after a DDL logged with its XID.

Info is bytes: MariaDB sends the statement's own bytes (``my_charset_bin``), whatever their
character set.
"""

from __future__ import annotations

import decimal
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from ..binlog import events as ev
from ..binlog.collations import collation
from ..errors import Refusal
from ..gtid.mysqlgtid import GtidSet, MysqlGtidError, gtid_of_event


class EventInfoError(Refusal):
    """An event whose body does not parse: a primary reading it fails the same way."""


@dataclass(frozen=True)
class FileFormat:
    """What the FORMAT_DESCRIPTION of the file says about the events after it."""

    mariadb: bool
    checksummed: bool
    post_header_lengths: bytes

    def post_header_len(self, event_type: int) -> int:
        if 1 <= event_type <= len(self.post_header_lengths):
            return self.post_header_lengths[event_type - 1]
        return 0

    @property
    def event_types(self) -> int:
        """How many event types the file's writer declared: a later type cannot be read."""
        return len(self.post_header_lengths)


def file_format(fde: bytes | memoryview) -> FileFormat:
    parsed = ev.parse_format_description(fde)
    return FileFormat(parsed.is_mariadb, parsed.checksum_alg == ev.CHECKSUM_CRC32, parsed.post_header_lengths)


# Event type numbers not in relay/binlog/events.py: they only matter here.
_LOAD_EVENT, _SLAVE_EVENT, _CREATE_FILE, _APPEND_BLOCK, _EXEC_LOAD, _DELETE_FILE = 6, 7, 8, 9, 10, 11
_NEW_LOAD, _BEGIN_LOAD_QUERY, _EXECUTE_LOAD_QUERY = 12, 17, 18
_PRE_GA_ROWS = (20, 21, 22)
_ROWS_V1 = (23, 24, 25)
_ROWS_V2 = (30, 31, 32)
_TRANSACTION_CONTEXT, _VIEW_CHANGE, _PARTIAL_UPDATE_ROWS = 36, 37, 39
_ROWS_COMPRESSED = (166, 167, 168, 169, 170, 171)

_MARIADB_NAMES = {
    ev.START_EVENT_V3: "Start_v3", ev.STOP_EVENT: "Stop", ev.QUERY_EVENT: "Query", ev.ROTATE_EVENT: "Rotate",
    ev.INTVAR_EVENT: "Intvar", _LOAD_EVENT: "Load", _NEW_LOAD: "New_load", _SLAVE_EVENT: "Slave",
    _CREATE_FILE: "Create_file", _APPEND_BLOCK: "Append_block", _DELETE_FILE: "Delete_file",
    _EXEC_LOAD: "Exec_load", ev.RAND_EVENT: "RAND", ev.XID_EVENT: "Xid", ev.USER_VAR_EVENT: "User var",
    ev.FORMAT_DESCRIPTION_EVENT: "Format_desc", ev.TABLE_MAP_EVENT: "Table_map",
    20: "Write_rows_event_old", 21: "Update_rows_event_old", 22: "Delete_rows_event_old",
    23: "Write_rows_v1", 24: "Update_rows_v1", 25: "Delete_rows_v1", 30: "Write_rows", 31: "Update_rows",
    32: "Delete_rows", _BEGIN_LOAD_QUERY: "Begin_load_query", _EXECUTE_LOAD_QUERY: "Execute_load_query",
    ev.INCIDENT_EVENT: "Incident", ev.ANNOTATE_ROWS_EVENT: "Annotate_rows",
    ev.BINLOG_CHECKPOINT_EVENT: "Binlog_checkpoint", ev.GTID_EVENT: "Gtid", ev.GTID_LIST_EVENT: "Gtid_list",
    ev.START_ENCRYPTION_EVENT: "Start_encryption", ev.IGNORABLE_LOG_EVENT: "Ignorable log event",
    ev.ROWS_QUERY_LOG_EVENT: "MySQL Rows_query", ev.GTID_LOG_EVENT: "MySQL Gtid",
    ev.ANONYMOUS_GTID_LOG_EVENT: "MySQL Anonymous_Gtid", ev.PREVIOUS_GTIDS_LOG_EVENT: "MySQL Previous_gtids",
    ev.HEARTBEAT_LOG_EVENT: "Heartbeat", _TRANSACTION_CONTEXT: "Transaction_context",
    _VIEW_CHANGE: "View_change", ev.XA_PREPARE_LOG_EVENT: "XA_prepare",
    ev.QUERY_COMPRESSED_EVENT: "Query_compressed", 169: "Write_rows_compressed", 170: "Update_rows_compressed",
    171: "Delete_rows_compressed", 166: "Write_rows_compressed_v1", 167: "Update_rows_compressed_v1",
    168: "Delete_rows_compressed_v1",
}

# MySQL 8's names.  GTID_TAGGED (MySQL 8.4+) is not in the 8.0 list this follows: its name here is
# the event's own (mysql::binlog::event), not read in a SHOW BINLOG EVENTS of MySQL's source.
_MYSQL_NAMES = {
    ev.STOP_EVENT: "Stop", ev.QUERY_EVENT: "Query", ev.ROTATE_EVENT: "Rotate", ev.INTVAR_EVENT: "Intvar",
    _APPEND_BLOCK: "Append_block", _DELETE_FILE: "Delete_file", ev.RAND_EVENT: "RAND", ev.XID_EVENT: "Xid",
    ev.USER_VAR_EVENT: "User var", ev.FORMAT_DESCRIPTION_EVENT: "Format_desc", ev.TABLE_MAP_EVENT: "Table_map",
    23: "Write_rows_v1", 24: "Update_rows_v1", 25: "Delete_rows_v1", _BEGIN_LOAD_QUERY: "Begin_load_query",
    _EXECUTE_LOAD_QUERY: "Execute_load_query", ev.INCIDENT_EVENT: "Incident", ev.IGNORABLE_LOG_EVENT: "Ignorable",
    ev.ROWS_QUERY_LOG_EVENT: "Rows_query", 30: "Write_rows", 31: "Update_rows", 32: "Delete_rows",
    ev.GTID_LOG_EVENT: "Gtid", ev.ANONYMOUS_GTID_LOG_EVENT: "Anonymous_Gtid",
    ev.PREVIOUS_GTIDS_LOG_EVENT: "Previous_gtids", ev.HEARTBEAT_LOG_EVENT: "Heartbeat",
    _TRANSACTION_CONTEXT: "Transaction_context", _VIEW_CHANGE: "View_change", ev.XA_PREPARE_LOG_EVENT: "XA_prepare",
    _PARTIAL_UPDATE_ROWS: "Update_rows_partial", ev.TRANSACTION_PAYLOAD_EVENT: "Transaction_payload",
    ev.GTID_TAGGED_LOG_EVENT: "Gtid_tagged",
}

# A MariaDB server reads MySQL's GTID events, and any event flagged ignorable, as an
# Ignorable_log_event: shown under that class's name, the original type in its Info.
_LOG_EVENT_IGNORABLE_F = 0x80
_MARIADB_IGNORED = (ev.GTID_LOG_EVENT, ev.ANONYMOUS_GTID_LOG_EVENT, ev.PREVIOUS_GTIDS_LOG_EVENT,
                    _TRANSACTION_CONTEXT, _VIEW_CHANGE)


def readable(event_type: int, fmt: FileFormat) -> bool:
    """The writer's server can read this event at all (else a primary's SHOW BINLOG EVENTS fails)."""
    if fmt.mariadb:
        return event_type in _MARIADB_NAMES and event_type not in (_SLAVE_EVENT, ev.HEARTBEAT_LOG_EVENT)
    return event_type in _MYSQL_NAMES


def describe(event: bytes | memoryview, fmt: FileFormat) -> tuple[str, bytes]:
    """(Event_type, Info) of a whole event (header, body and CRC32 when the file has them)."""
    event_type, flags = event[4], struct.unpack_from("<H", event, ev.FLAGS_OFFSET)[0]
    end = len(event) - (ev.CRC_LEN if fmt.checksummed or event_type == ev.FORMAT_DESCRIPTION_EVENT else 0)
    body = memoryview(event)[ev.HEADER_LEN:end]
    try:
        if fmt.mariadb:
            if flags & _LOG_EVENT_IGNORABLE_F or event_type in _MARIADB_IGNORED:
                return "Ignorable log event", b"# Ignorable event type %d (%s)" % (
                    event_type, _MARIADB_NAMES.get(event_type, "Unknown").encode())
            info = _MARIADB_INFO.get(event_type, _nothing)
            return _MARIADB_NAMES[event_type], info(event, body, fmt)
        info = _MYSQL_INFO.get(event_type, _nothing)
        return _MYSQL_NAMES[event_type], info(event, body, fmt)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, zlib.error, MysqlGtidError) as exc:
        raise EventInfoError(f"{_MARIADB_NAMES.get(event_type, event_type)} event does not parse: {exc}") from None


Info = Callable[[bytes | memoryview, memoryview, FileFormat], bytes]


def _nothing(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    """Log_event::pack_info: an empty Info (Stop, and events without a text of their own)."""
    return b""


# ------------------------------------------------------------------ identifiers and values


def quoted(identifier: bytes) -> bytes:
    """append_identifier with sql_quote_show_create=1: in backticks, a backtick doubled."""
    return b"`" + identifier.replace(b"`", b"``") + b"`"


def xid_text(format_id: int, gtrid: bytes, bqual: bytes) -> bytes:
    """XID::serialize: X'gtrid',X'bqual',formatID, the bytes in lower-case hex."""
    return b"X'%s',X'%s',%d" % (gtrid.hex().encode(), bqual.hex().encode(), format_id)


def _cstring(data: bytes | memoryview) -> bytes:
    """A fixed-size field up to its first NUL (strmov copies no further)."""
    return bytes(data).split(b"\x00", 1)[0]


# ------------------------------------------------------------------ MariaDB


def _format_description(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    (binlog_version,) = struct.unpack_from("<H", body, 0)
    return b"Server ver: %s, Binlog ver: %d" % (_cstring(body[2:52]), binlog_version)


@dataclass(frozen=True)
class _Query:
    database: bytes
    text: bytes
    flags2: int | None
    ddl_xid: int | None  # MySQL: Q_DDL_LOGGED_WITH_XID


# Status variables (log_event.h Q_*_CODE): the fixed sizes of those that have one.
_STATUS_SIZES = {0: 4, 1: 8, 3: 4, 4: 6, 7: 2, 8: 2, 9: 8, 10: 4, 13: 3, 16: 1, 17: 8, 18: 2, 19: 1, 20: 1,
                 128: 3, 129: 8}
_Q_FLAGS2, _Q_CATALOG, _Q_TIME_ZONE, _Q_CATALOG_NZ, _Q_INVOKER, _Q_UPDATED_DB_NAMES = 0, 2, 5, 6, 11, 12
_Q_DDL_LOGGED_WITH_XID, _Q_GTID_FLAGS3 = 17, 130
_OVER_MAX_DBS = 254
_FL_COMMIT_ALTER_E1, _FL_ROLLBACK_ALTER_E1 = 4, 8


def _status_variables(status: memoryview) -> tuple[int | None, int | None]:
    """(flags2, ddl_xid) from a QUERY event's status variables; a code not known stops the walk,
    as the servers' own parsers stop there."""
    flags2 = ddl_xid = None
    pos = 0
    while pos < len(status):
        code = status[pos]
        pos += 1
        if code == _Q_FLAGS2:
            (flags2,) = struct.unpack_from("<I", status, pos)
        elif code == _Q_DDL_LOGGED_WITH_XID:
            (ddl_xid,) = struct.unpack_from("<Q", status, pos)
        if code in _STATUS_SIZES:
            pos += _STATUS_SIZES[code]
        elif code == _Q_CATALOG:
            pos += 1 + status[pos] + 1
        elif code in (_Q_TIME_ZONE, _Q_CATALOG_NZ):
            pos += 1 + status[pos]
        elif code == _Q_INVOKER:
            pos += 1 + status[pos]
            pos += 1 + status[pos]
        elif code == _Q_UPDATED_DB_NAMES:
            count = status[pos]
            pos += 1
            for _ in range(count if count != _OVER_MAX_DBS else 0):
                pos = bytes(status).index(b"\x00", pos) + 1
        elif code == _Q_GTID_FLAGS3:
            flags3 = status[pos]
            pos += 1 + (8 if flags3 & (_FL_COMMIT_ALTER_E1 | _FL_ROLLBACK_ALTER_E1) else 0)
        else:
            break
    return flags2, ddl_xid


def _query(body: memoryview, post_header_len: int, compressed: bool = False) -> _Query:
    """A QUERY (or Execute_load_query, or MariaDB's compressed QUERY) event's parts."""
    db_len = body[8]
    status_len = struct.unpack_from("<H", body, 11)[0] if post_header_len >= ev.QUERY_POST_HEADER_LEN else 0
    status_start = post_header_len
    flags2, ddl_xid = _status_variables(body[status_start:status_start + status_len])
    db_start = status_start + status_len
    database = bytes(body[db_start:db_start + db_len])
    text = bytes(body[db_start + db_len + 1:])
    if compressed:
        text = uncompressed(text)
    return _Query(database, text, flags2, ddl_xid)


def uncompressed(data: bytes) -> bytes:
    """MariaDB's compressed binlog data (log_event.cc binlog_buf_uncompress): a byte 0x80 | the
    length's size, the uncompressed length big-endian, then zlib."""
    if not data or data[0] & 0xE0 != 0x80:
        raise ValueError("not compressed binlog data")
    length_size = data[0] & 0x07
    expected = int.from_bytes(data[1:1 + length_size], "big")
    text = zlib.decompress(data[1 + length_size:])
    if len(text) != expected:
        raise ValueError(f"decompressed to {len(text)} bytes, not {expected}")
    return text


# Query_log_event::pack_info: the session options a statement was logged with (flags2), in this
# order (MariaDB 10.11).
_OPTION_TEXTS = ((1 << 26, b"foreign_key_checks=0"), (1 << 14, b"sql_auto_is_null=1"),
                 (1 << 27, b"unique_checks=0"), (1 << 15, b"check_constraint_checks=0"),
                 (1 << 28, b"@@sql_if_exists=1"), (1 << 30, b"@@system_versioning_insert_history=1"))
_LOG_EVENT_SUPPRESS_USE_F = 0x8


def _use(event: bytes | memoryview, database: bytes) -> bytes:
    suppressed = struct.unpack_from("<H", event, ev.FLAGS_OFFSET)[0] & _LOG_EVENT_SUPPRESS_USE_F
    return b"use " + quoted(database) + b"; " if database and not suppressed else b""


def _mariadb_query(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    query = _query(body, fmt.post_header_len(event[4]), compressed=event[4] == ev.QUERY_COMPRESSED_EVENT)
    options = [text for bit, text in _OPTION_TEXTS if (query.flags2 or 0) & bit]
    settings = b"set " + b", ".join(options) + b"; " if options else b""
    return _use(event, query.database) + settings + query.text


def _execute_load_query(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    post_header_len = fmt.post_header_len(_EXECUTE_LOAD_QUERY)
    query = _query(body, post_header_len)
    (file_id,) = struct.unpack_from("<I", body, ev.QUERY_POST_HEADER_LEN)
    return _use(event, query.database) + query.text + b" ;file_id=%d" % file_id


def _append_block(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    (file_id,) = struct.unpack_from("<I", body, 0)
    return b";file_id=%d;block_len=%d" % (file_id, len(body) - 4)


def _delete_file(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    return b";file_id=%d" % struct.unpack_from("<I", body, 0)[0]


def _rotate(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    (position,) = struct.unpack_from("<Q", body, 0)
    return bytes(body[8:8 + 511]) + b";pos=%d" % position  # the name is cut at FN_REFLEN - 1


_INTVAR_NAMES = {1: b"LAST_INSERT_ID", 2: b"INSERT_ID"}


def _intvar(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    kind, value = struct.unpack_from("<Bq", body, 0)
    return _INTVAR_NAMES.get(kind, b"UNKNOWN") + b"=%d" % value


def _rand(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    return b"rand_seed1=%d,rand_seed2=%d" % struct.unpack_from("<QQ", body, 0)


def _xid(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    return b"COMMIT /* xid=%d */" % struct.unpack_from("<Q", body, 0)[0]


def _xa_prepare(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    one_phase, format_id, gtrid_len, bqual_len = struct.unpack_from("<BiII", body, 0)
    data = bytes(body[13:13 + gtrid_len + bqual_len])
    xid = xid_text(format_id, data[:gtrid_len], data[gtrid_len:])
    return b"XA COMMIT %s ONE PHASE" % xid if one_phase else b"XA PREPARE %s" % xid


def _table_id(body: memoryview, post_header_len: int) -> tuple[int, int]:
    """(table id, flags) of a TABLE_MAP or rows event: a 6-byte id, or 4 in the oldest format."""
    if post_header_len == 6:
        return struct.unpack_from("<IH", body, 0)
    return int.from_bytes(body[0:6], "little"), struct.unpack_from("<H", body, 6)[0]


def _table_map(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    post_header_len = fmt.post_header_len(ev.TABLE_MAP_EVENT)
    table_id, _ = _table_id(body, post_header_len)
    db_len = body[post_header_len]
    database = bytes(body[post_header_len + 1:post_header_len + 1 + db_len])
    tbl_at = post_header_len + 1 + db_len + 1
    table = bytes(body[tbl_at + 1:tbl_at + 1 + body[tbl_at]])
    return b"table_id: %d (%s.%s)" % (table_id, database, table)


_STMT_END_F = 1


def _rows(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    table_id, flags = _table_id(body, fmt.post_header_len(event[4]))
    return b"table_id: %d%s" % (table_id, b" flags: STMT_END_F" if flags & _STMT_END_F else b"")


def _annotate_rows(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    return bytes(body)


def _binlog_checkpoint(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    (length,) = struct.unpack_from("<I", body, 0)
    return bytes(body[4:4 + length])


_FL_STANDALONE, _FL_GROUP_COMMIT_ID, _FL_PREPARED_XA, _FL_COMPLETED_XA = 1, 2, 64, 128
_FL_EXTRA_MULTI_ENGINE_E1, _FL_START_ALTER_E1 = 1, 2


def _mariadb_gtid(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    seq_no, domain_id, flags2 = struct.unpack_from("<QIB", body, 0)
    server_id = struct.unpack_from("<I", event, 5)[0]
    pos = 13
    commit_id = xid = None
    if flags2 & _FL_GROUP_COMMIT_ID:
        (commit_id,) = struct.unpack_from("<Q", body, pos)
        pos += 8
    if flags2 & (_FL_PREPARED_XA | _FL_COMPLETED_XA):
        format_id, gtrid_len, bqual_len = struct.unpack_from("<iBB", body, pos)
        data = bytes(body[pos + 6:pos + 6 + gtrid_len + bqual_len])
        xid = xid_text(format_id, data[:gtrid_len], data[gtrid_len:])
        pos += 6 + gtrid_len + bqual_len
    flags_extra = sa_seq_no = 0
    if pos < len(body):  # the extra flags (zero padding reads as none)
        flags_extra = body[pos]
        pos += 1 + (1 if flags_extra & _FL_EXTRA_MULTI_ENGINE_E1 else 0)
        if flags_extra & (_FL_COMMIT_ALTER_E1 | _FL_ROLLBACK_ALTER_E1):
            (sa_seq_no,) = struct.unpack_from("<Q", body, pos)
    if flags2 & _FL_STANDALONE:
        text = b"GTID "
    elif flags2 & _FL_PREPARED_XA:
        text = b"XA START %s GTID " % xid
    else:
        text = b"BEGIN GTID "
    text += b"%d-%d-%d" % (domain_id, server_id, seq_no)
    if commit_id is not None:
        text += b" cid=%d" % commit_id
    if flags_extra & _FL_START_ALTER_E1:
        text += b" START ALTER"
    if flags_extra & _FL_COMMIT_ALTER_E1:
        text += b" COMMIT ALTER id=%d" % sa_seq_no
    if flags_extra & _FL_ROLLBACK_ALTER_E1:
        text += b" ROLLBACK ALTER id=%d" % sa_seq_no
    return text


def _gtid_list(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    count = struct.unpack_from("<I", body, 0)[0] & 0x0FFFFFFF
    gtids = [struct.unpack_from("<IIQ", body, 4 + 16 * index) for index in range(count)]
    # sorted for reading: by domain, then sequence number (rpl_gtid's operator<)
    gtids.sort(key=lambda gtid: (gtid[0], gtid[2]))
    return b"[" + b",".join(b"%d-%d-%d" % gtid for gtid in gtids) + b"]"


# Incident_log_event::description(); its pack_info prints the message only when there is none,
# as the server does.
_INCIDENTS = {0: b"NOTHING", 1: b"LOST_EVENTS"}


def _incident(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    (number,) = struct.unpack_from("<H", body, 0)
    message_len = body[2] if len(body) > 2 else 0
    description = _INCIDENTS.get(number, b"UNKNOWN")
    if message_len > 0:
        return b"#%d (%s)" % (number, description)
    return b"#%d (%s): " % (number, description)


_STRING_RESULT, _REAL_RESULT, _INT_RESULT, _DECIMAL_RESULT = 0, 1, 2, 4
_UNSIGNED_F = 1
_CHUNK_DATA_TYPE_NAME = 2


def _user_var(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    (name_len,) = struct.unpack_from("<I", body, 0)
    name = bytes(body[4:4 + name_len])
    pos = 4 + name_len
    if body[pos]:  # NULL
        return b"@" + quoted(name) + b"=NULL"
    kind, charset, value_len = struct.unpack_from("<BII", body, pos + 1)
    value_at = pos + 10
    value = bytes(body[value_at:value_at + value_len])
    rest = bytes(body[value_at + value_len:])
    flags = 0
    if kind == _INT_RESULT and rest:
        flags, rest = rest[0], rest[1:]
    type_name = b""
    if len(rest) >= 2 and rest[0] == _CHUNK_DATA_TYPE_NAME:
        type_name = b"/*" + rest[2:2 + rest[1]] + b"*/"
    head = b"@" + quoted(name) + b"=" + type_name
    if kind == _REAL_RESULT:
        return head + gcvt(struct.unpack("<d", value[:8])[0]).encode()
    if kind == _INT_RESULT:
        return head + b"%d" % int.from_bytes(value[:8], "little", signed=not flags & _UNSIGNED_F)
    if kind == _DECIMAL_RESULT:
        return head + binary_decimal(value[2:], value[0], value[1]).encode()
    names = collation(charset)
    if names is None:
        return b"???"
    return head + b"_%s X'%s' COLLATE %s" % (names[0].encode(), value.hex().upper().encode(), names[1].encode())


# ------------------------------------------------------------------ numbers as the server prints them

_GCVT_WIDTH = 34  # MY_GCVT_MAX_FIELD_WIDTH: DBL_DIG + 4 + max(5, MAX_DECPT_FOR_F_FORMAT)
_MAX_DECPT_FOR_F_FORMAT = 15  # DBL_DIG


def _digits(value: float, significant: int | None = None) -> tuple[str, int]:
    """dtoa's answer: the significant digits (no trailing zeros) and where the point goes."""
    if significant is None:
        text = repr(abs(value))  # the shortest digits that read back as the same double
    else:
        text = f"{abs(value):.{max(significant, 1) - 1}e}"
    sign, digits, exponent = decimal.Decimal(text).normalize().as_tuple()
    assert isinstance(exponent, int)
    joined = "".join(map(str, digits)).rstrip("0") or "0"
    return joined, len(digits) + exponent


def gcvt(value: float, width: int = _GCVT_WIDTH) -> str:
    """my_gcvt(value, MY_GCVT_ARG_DOUBLE, width) of strings/dtoa.c: the shortest digits that read
    back as the same double, in the 'f' form unless the 'e' form is shorter or the number is
    very large or very small."""
    if value != value or value in (float("inf"), float("-inf")):
        return "0"
    if value == 0:
        return "0"
    negative = value < 0
    if negative:
        width -= 1
    digits, decpt = _digits(value, None if width >= 17 else width)
    length = len(digits)
    exp_len = 1 + (decpt >= 101 or decpt <= -99) + (decpt >= 11 or decpt <= -9)
    have_space = (length - decpt + 2 if decpt <= 0 else length + 1 if decpt < length else decpt) <= width
    force_e = decpt <= 0 and width <= 2 - decpt and width >= 3 + exp_len
    f_format = ((have_space or (decpt <= width and (decpt >= -1 or (decpt == -2 and (length > 1 or not force_e)))
                                and not force_e))
                and (not have_space or (decpt >= -_MAX_DECPT_FOR_F_FORMAT + 1
                                        and (decpt <= _MAX_DECPT_FOR_F_FORMAT or length > decpt))))
    sign = "-" if negative else ""
    if f_format:
        room = width - ((decpt < length) + (1 - decpt if decpt <= 0 else 0))
        if room < length:  # fewer digits after the point (dtoa mode 5)
            text = f"{abs(value):.{max(room - decpt, 0)}f}"
            if "." in text:
                text = text.rstrip("0").rstrip(".")
            return sign + (text if text.strip("0.") else "0")
        if decpt <= 0:
            return f"{sign}0.{'0' * -decpt}{digits}"
        if decpt < length:
            return f"{sign}{digits[:decpt]}.{digits[decpt:]}"
        return f"{sign}{digits}{'0' * (decpt - length)}"
    exponent = decpt - 1
    room = width - (1 + exp_len) - (1 if exponent < 0 else 0) - (1 if length > 1 else 0)
    if room < length:
        digits, decpt = _digits(value, max(room, 1))
        exponent, length = decpt - 1, len(digits)
    mantissa = digits[0] + ("." + digits[1:] if length > 1 else "")
    return f"{sign}{mantissa}e{'-' if exponent < 0 else ''}{abs(exponent)}"


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def binary_decimal(data: bytes, precision: int, scale: int) -> str:
    """A DECIMAL in MySQL's binary form (decimal2bin), as my_decimal::to_string prints it:
    every digit of the scale, no leading zeros."""
    integral = precision - scale
    int_words, int_rest = divmod(integral, 9)
    frac_words, frac_rest = divmod(scale, 9)
    raw = bytearray(data[:_DIG2BYTES[int_rest] + 4 * int_words + 4 * frac_words + _DIG2BYTES[frac_rest]])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(byte ^ 0xFF for byte in raw)
    pos = 0

    def take(size: int, digits: int) -> str:
        nonlocal pos
        value = int.from_bytes(raw[pos:pos + size], "big")
        pos += size
        return str(value).zfill(digits) if size else ""

    whole = take(_DIG2BYTES[int_rest], int_rest) + "".join(take(4, 9) for _ in range(int_words))
    fraction = "".join(take(4, 9) for _ in range(frac_words)) + take(_DIG2BYTES[frac_rest], frac_rest)
    text = (whole.lstrip("0") or "0") + ("." + fraction if scale else "")
    return ("-" if negative else "") + text


# ------------------------------------------------------------------ MySQL


def _mysql_query(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    query = _query(body, fmt.post_header_len(ev.QUERY_EVENT))
    text = _use(event, query.database) + query.text
    if query.ddl_xid is not None:
        text += b" /* xid=%d */" % query.ddl_xid
    return text


def _mysql_gtid(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    gtid = gtid_of_event(event)
    return b"SET @@SESSION.GTID_NEXT= '%s'" % (str(gtid).encode() if gtid is not None else b"ANONYMOUS")


def _previous_gtids(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    return str(GtidSet.decode(body)).encode()


_COMPRESSION_NAMES = {0: b"ZSTD", 255: b"NONE"}


def _transaction_payload(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    fields: dict[int, int] = {}
    pos = 0
    while True:
        field, pos = _lenenc(body, pos)
        if field == 0:
            break
        length, pos = _lenenc(body, pos)
        fields[field] = int.from_bytes(body[pos:pos + length], "little")
        pos += length
    compression = _COMPRESSION_NAMES.get(fields.get(2, 255), b"UNKNOWN")
    return b"compression='%s', decompressed_size=%d bytes" % (compression, fields.get(3, 0))


def _lenenc(data: memoryview, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(data[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def _rows_query(event: bytes | memoryview, body: memoryview, fmt: FileFormat) -> bytes:
    return b"# " + bytes(body[1:])  # a length byte, then the statement


_SHARED_INFO: dict[int, Info] = {
    ev.FORMAT_DESCRIPTION_EVENT: _format_description, ev.START_EVENT_V3: _format_description,
    ev.ROTATE_EVENT: _rotate, ev.INTVAR_EVENT: _intvar, ev.RAND_EVENT: _rand, ev.XID_EVENT: _xid,
    ev.XA_PREPARE_LOG_EVENT: _xa_prepare, ev.TABLE_MAP_EVENT: _table_map, ev.USER_VAR_EVENT: _user_var,
    _APPEND_BLOCK: _append_block, _BEGIN_LOAD_QUERY: _append_block, _DELETE_FILE: _delete_file,
    _EXECUTE_LOAD_QUERY: _execute_load_query, ev.INCIDENT_EVENT: _incident,
    **{event_type: _rows for event_type in (*_PRE_GA_ROWS, *_ROWS_V1, *_ROWS_V2, *_ROWS_COMPRESSED)},
}

_MARIADB_INFO: dict[int, Info] = {
    **_SHARED_INFO, ev.QUERY_EVENT: _mariadb_query, ev.QUERY_COMPRESSED_EVENT: _mariadb_query,
    ev.ANNOTATE_ROWS_EVENT: _annotate_rows, ev.BINLOG_CHECKPOINT_EVENT: _binlog_checkpoint,
    ev.GTID_EVENT: _mariadb_gtid, ev.GTID_LIST_EVENT: _gtid_list,
}

_MYSQL_INFO: dict[int, Info] = {
    **_SHARED_INFO, ev.QUERY_EVENT: _mysql_query, _PARTIAL_UPDATE_ROWS: _rows,
    ev.GTID_LOG_EVENT: _mysql_gtid, ev.ANONYMOUS_GTID_LOG_EVENT: _mysql_gtid, ev.GTID_TAGGED_LOG_EVENT: _mysql_gtid,
    ev.PREVIOUS_GTIDS_LOG_EVENT: _previous_gtids, ev.TRANSACTION_PAYLOAD_EVENT: _transaction_payload,
    ev.ROWS_QUERY_LOG_EVENT: _rows_query,
}

"""Binlog event format (docs/protocol.md 5): the 19-byte header, checksums and the few event
bodies the relay itself must read (FDE, ROTATE, QUERY, GTID, GTID_LIST, heartbeats).

Hot paths use ``HEADER.unpack_from`` directly; the dataclasses are for admin paths.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import InputError
from ..protocol.packets import lenenc_int, read_lenenc_count

BINLOG_MAGIC = b"\xfebin"
HEADER_LEN = 19
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_length, log_pos, flags
CRC_LEN = 4
CRC32_RESIDUE = 0x2144DF1C  # zlib.crc32 of any data followed by its own CRC32 (little-endian)
try:  # zlib.crc32's values, several times faster where the CPU multiplies without carries
    from ._scan import crc32
except ImportError:  # built without the C loops
    from zlib import crc32

# Event types (docs/protocol.md 5.6)
UNKNOWN_EVENT = 0
START_EVENT_V3 = 1
QUERY_EVENT = 2
STOP_EVENT = 3
ROTATE_EVENT = 4
INTVAR_EVENT = 5
RAND_EVENT = 13
USER_VAR_EVENT = 14
FORMAT_DESCRIPTION_EVENT = 15
XID_EVENT = 16
TABLE_MAP_EVENT = 19
INCIDENT_EVENT = 26
HEARTBEAT_LOG_EVENT = 27
IGNORABLE_LOG_EVENT = 28
ROWS_QUERY_LOG_EVENT = 29
GTID_LOG_EVENT = 33
ANONYMOUS_GTID_LOG_EVENT = 34
PREVIOUS_GTIDS_LOG_EVENT = 35
XA_PREPARE_LOG_EVENT = 38
TRANSACTION_PAYLOAD_EVENT = 40
HEARTBEAT_LOG_EVENT_V2 = 41
GTID_TAGGED_LOG_EVENT = 42
ANNOTATE_ROWS_EVENT = 160
BINLOG_CHECKPOINT_EVENT = 161
GTID_EVENT = 162  # MariaDB
GTID_LIST_EVENT = 163
START_ENCRYPTION_EVENT = 164
QUERY_COMPRESSED_EVENT = 165

# Header flags (docs/protocol.md 5.2)
LOG_EVENT_BINLOG_IN_USE_F = 0x0001
LOG_EVENT_ARTIFICIAL_F = 0x0020
LOG_EVENT_SKIP_REPLICATION_F = 0x8000

# Offset of the flags field inside an event, and of the FDE's 'created' field.
FLAGS_OFFSET = 17
FDE_CREATED_OFFSET = HEADER_LEN + 52

CHECKSUM_OFF = 0
CHECKSUM_CRC32 = 1

# MariaDB GTID flags2
FL_STANDALONE = 1
FL_GROUP_COMMIT_ID = 2
FL_PREPARED_XA = 64
FL_COMPLETED_XA = 128

EVENT_NAMES = {
    QUERY_EVENT: "query", STOP_EVENT: "stop", ROTATE_EVENT: "rotate", INTVAR_EVENT: "intvar",
    RAND_EVENT: "rand", USER_VAR_EVENT: "user_var", FORMAT_DESCRIPTION_EVENT: "format_description",
    XID_EVENT: "xid", TABLE_MAP_EVENT: "table_map", 23: "write_rows_v1", 24: "update_rows_v1",
    25: "delete_rows_v1", INCIDENT_EVENT: "incident", HEARTBEAT_LOG_EVENT: "heartbeat",
    IGNORABLE_LOG_EVENT: "ignorable", ROWS_QUERY_LOG_EVENT: "rows_query", 30: "write_rows",
    31: "update_rows", 32: "delete_rows", GTID_LOG_EVENT: "gtid", ANONYMOUS_GTID_LOG_EVENT: "anonymous_gtid",
    PREVIOUS_GTIDS_LOG_EVENT: "previous_gtids", XA_PREPARE_LOG_EVENT: "xa_prepare",
    TRANSACTION_PAYLOAD_EVENT: "transaction_payload", HEARTBEAT_LOG_EVENT_V2: "heartbeat_v2",
    GTID_TAGGED_LOG_EVENT: "gtid_tagged", ANNOTATE_ROWS_EVENT: "annotate_rows",
    BINLOG_CHECKPOINT_EVENT: "binlog_checkpoint", GTID_EVENT: "mariadb_gtid",
    GTID_LIST_EVENT: "gtid_list", START_ENCRYPTION_EVENT: "start_encryption",
    QUERY_COMPRESSED_EVENT: "query_compressed", 166: "write_rows_compressed_v1",
    167: "update_rows_compressed_v1", 168: "delete_rows_compressed_v1", 169: "write_rows_compressed",
    170: "update_rows_compressed", 171: "delete_rows_compressed",
}


def event_name(event_type: int) -> str:
    return EVENT_NAMES.get(event_type, f"type_{event_type}")


class BinlogFormatError(InputError):
    """An event or binlog file is malformed."""


@dataclass(frozen=True)
class EventHeader:
    timestamp: int
    event_type: int
    server_id: int
    event_length: int
    log_pos: int
    flags: int

    @classmethod
    def parse(cls, data: bytes | memoryview, offset: int = 0) -> EventHeader:
        if len(data) - offset < HEADER_LEN:
            raise BinlogFormatError(f"event header truncated: {len(data) - offset} of {HEADER_LEN} bytes")
        return cls(*HEADER.unpack_from(data, offset))

    @property
    def start_pos(self) -> int:
        return self.log_pos - self.event_length


@dataclass(frozen=True)
class FormatDescription:
    binlog_version: int
    server_version: str
    created: int
    header_length: int
    post_header_lengths: bytes
    checksum_alg: int

    def post_header_len(self, event_type: int) -> int:
        if 1 <= event_type <= len(self.post_header_lengths):
            return self.post_header_lengths[event_type - 1]
        return 0

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


def parse_format_description(event: bytes | memoryview) -> FormatDescription:
    """``event`` is the whole FDE including its trailing checksum bytes."""
    data = bytes(event)
    if len(data) < HEADER_LEN + 57 + 5:
        raise BinlogFormatError(f"format description event too short ({len(data)} bytes)")
    body = data[HEADER_LEN:]
    binlog_version = struct.unpack_from("<H", body, 0)[0]
    server_version = body[2:52].split(b"\x00", 1)[0].decode("ascii", "replace")
    created = struct.unpack_from("<I", body, 52)[0]
    header_length = body[56]
    # The checksum algorithm byte and CRC trail the post-header array (MySQL 5.6.1+, MariaDB 5.3+).
    checksum_alg = body[-5]
    post_header_lengths = body[57:-5]
    if checksum_alg not in (CHECKSUM_OFF, CHECKSUM_CRC32):
        raise BinlogFormatError(f"unknown binlog checksum algorithm {checksum_alg}")
    return FormatDescription(binlog_version, server_version, created, header_length,
                             post_header_lengths, checksum_alg)


def checksum_matches(event: bytes | bytearray | memoryview) -> bool:
    """The event's trailing CRC32 equals the CRC of everything before it.

    The FDE's CRC is computed with BINLOG_IN_USE cleared (docs/protocol.md 5.3)."""
    if event[4] == FORMAT_DESCRIPTION_EVENT and event[FLAGS_OFFSET] & LOG_EVENT_BINLOG_IN_USE_F:
        cleared = bytearray(event)
        cleared[FLAGS_OFFSET] &= ~LOG_EVENT_BINLOG_IN_USE_F
        event = cleared
    stored = int.from_bytes(event[-4:], "little")
    return crc32(event[:-4]) == stored


def with_checksum(event_without_crc: bytes) -> bytes:
    return event_without_crc + crc32(event_without_crc).to_bytes(4, "little")


def body_end(event: bytes | memoryview, checksum_alg: int) -> int:
    return len(event) - (CRC_LEN if checksum_alg == CHECKSUM_CRC32 else 0)


@dataclass(frozen=True)
class Rotate:
    position: int
    next_file: str


def parse_rotate(event: bytes | memoryview, has_checksum: bool) -> Rotate:
    end = len(event) - (CRC_LEN if has_checksum else 0)
    if end < HEADER_LEN + 8:
        raise BinlogFormatError("rotate event too short")
    position = struct.unpack_from("<Q", event, HEADER_LEN)[0]
    name = bytes(event[HEADER_LEN + 8 : end]).decode("utf-8", "replace")
    return Rotate(position, name)


def build_rotate(server_id: int, next_file: str, position: int, with_crc: bool,
                 timestamp: int = 0, log_pos: int = 0, flags: int = LOG_EVENT_ARTIFICIAL_F) -> bytes:
    body = struct.pack("<Q", position) + next_file.encode("utf-8")
    length = HEADER_LEN + len(body) + (CRC_LEN if with_crc else 0)
    event = HEADER.pack(timestamp, ROTATE_EVENT, server_id, length, log_pos, flags) + body
    return with_checksum(event) if with_crc else event


def build_gtid_list(server_id: int, gtids: list[tuple[int, int, int]], log_pos: int, with_crc: bool,
                    flags: int = LOG_EVENT_ARTIFICIAL_F) -> bytes:
    """A GTID_LIST (domain, server_id, seq_no triples): by default the artificial one a primary
    sends when a GTID dump reaches its start (timestamp 0, the sender's server_id, log_pos where
    it stands); with flags 0, the one that opens a binlog file."""
    body = struct.pack("<I", len(gtids)) + b"".join(struct.pack("<IIQ", *gtid) for gtid in gtids)
    length = HEADER_LEN + len(body) + (CRC_LEN if with_crc else 0)
    event = HEADER.pack(0, GTID_LIST_EVENT, server_id, length, log_pos & 0xFFFFFFFF, flags) + body
    return with_checksum(event) if with_crc else event


def parse_heartbeat(event: bytes | memoryview, checksum_alg: int) -> tuple[str, int]:
    """(file, position) of a HEARTBEAT_LOG_EVENT (the name in the body, the position in log_pos)
    or of MySQL 8.0.26+'s HEARTBEAT_LOG_EVENT_V2, whose body holds both as fields (type, length,
    value: length-encoded integers; the position a length-encoded integer too; type 0 ends them),
    the position 64-bit."""
    end = len(event) - (CRC_LEN if checksum_alg == CHECKSUM_CRC32 else 0)
    if event[4] == HEARTBEAT_LOG_EVENT:
        return bytes(event[HEADER_LEN:end]).decode("utf-8", "replace"), HEADER.unpack_from(event)[4]
    name, position, pos = "", 0, HEADER_LEN
    while pos < end:
        field, pos = read_lenenc_count(event, pos, BinlogFormatError)
        if field == 0:
            break
        length, pos = read_lenenc_count(event, pos, BinlogFormatError)
        if pos + length > end:
            raise BinlogFormatError(f"heartbeat v2 field {field} of {length} bytes runs past the event")
        if field == 1:
            name = bytes(event[pos:pos + length]).decode("utf-8", "replace")
        elif field == 2:
            position, _ = read_lenenc_count(event, pos, BinlogFormatError)
        pos += length
    return name, position


def heartbeat_v2_body(name: bytes, position: int) -> bytes:
    """The fields of a HEARTBEAT_LOG_EVENT_V2: the file name, the position (a length-encoded
    integer, 8 bytes), the end mark."""
    encoded_position = b"\xfe" + struct.pack("<Q", position)
    return bytes([1]) + lenenc_int(len(name)) + name + bytes([2, len(encoded_position)]) + encoded_position + b"\x00"


QUERY_POST_HEADER_LEN = 13


def query_text_start(event: bytes | memoryview, post_header_len: int = QUERY_POST_HEADER_LEN) -> int:
    """Offset of the SQL text inside a QUERY event: after post-header, status vars and db NUL."""
    db_len = event[HEADER_LEN + 8]
    status_len = event[HEADER_LEN + 11] | (event[HEADER_LEN + 12] << 8)
    return HEADER_LEN + post_header_len + status_len + db_len + 1


@dataclass(frozen=True)
class QueryEvent:
    thread_id: int
    exec_time: int
    database: str
    error_code: int
    query: str


def parse_query(event: bytes | memoryview, checksum_alg: int,
                post_header_len: int = QUERY_POST_HEADER_LEN) -> QueryEvent:
    thread_id, exec_time, db_len, error_code = struct.unpack_from("<IIBH", event, HEADER_LEN)
    start = query_text_start(event, post_header_len)
    database = bytes(event[start - db_len - 1 : start - 1]).decode("utf-8", "replace")
    text = bytes(event[start : body_end(event, checksum_alg)]).decode("utf-8", "replace")
    return QueryEvent(thread_id, exec_time, database, error_code, text)


@dataclass(frozen=True)
class MariaGtid:
    domain_id: int
    server_id: int
    seq_no: int
    flags2: int

    def __str__(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"

    @property
    def standalone(self) -> bool:
        return bool(self.flags2 & FL_STANDALONE)


def parse_mariadb_gtid(event: bytes | memoryview) -> MariaGtid:
    seq_no, domain_id, flags2 = struct.unpack_from("<QIB", event, HEADER_LEN)
    server_id = struct.unpack_from("<I", event, 5)[0]
    return MariaGtid(domain_id, server_id, seq_no, flags2)


def parse_gtid_list(event: bytes | memoryview) -> list[MariaGtid]:
    count = struct.unpack_from("<I", event, HEADER_LEN)[0] & 0x0FFFFFFF
    gtids = []
    offset = HEADER_LEN + 4
    for _ in range(count):
        domain_id, server_id, seq_no = struct.unpack_from("<IIQ", event, offset)
        gtids.append(MariaGtid(domain_id, server_id, seq_no, 0))
        offset += 16
    return gtids

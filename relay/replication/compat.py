"""Events as a MariaDB primary sends them to replicas that predate parts of the format, sans-IO.

A replica announces what it understands with ``SET @mariadb_slave_capability`` (0 when it says
nothing: MySQL replicas and old tools).  Below 4 it does not know MariaDB GTIDs, so the primary
turns each transaction's GTID event into a ``BEGIN`` query of the same size; events it cannot
parse become a same-sized dummy (a comment-only query, or a NULL user variable when even that
does not fit), because such a replica computes positions by adding up event lengths and a hole
in the stream would make it ask for a wrong position when it reconnects.  From capability 2 on
the replica tolerates holes and such events are left out instead.  The rules and the byte
layouts follow MariaDB's sql_repl.cc ``send_event_to_slave`` and log_event_server.cc
(``Query_log_event::dummy_event`` / ``begin_event``, ``Gtid_log_event::make_compatible_event``).
"""

from __future__ import annotations

import struct

from ..binlog import events as ev
from ..errors import InputError

CAPABILITY_UNKNOWN = 0
CAPABILITY_ANNOTATE = 1
CAPABILITY_TOLERATE_HOLES = 2
CAPABILITY_BINLOG_CHECKPOINT = 3
CAPABILITY_GTID = 4

_THREAD_SPECIFIC_F = 0x4
_SUPPRESS_USE_F = 0x8
_QUERY_HEADER_LEN = 13  # thread id, exec time, db length, error code, status vars length
_Q_TIME_ZONE_CODE = 5
_GTID_BODY_LEN = 19
_MIN_USER_VAR_EVENT = ev.HEADER_LEN + 4 + 1 + 1  # name length, a 1-byte name, the NULL flag
_MIN_QUERY_EVENT = ev.HEADER_LEN + _QUERY_HEADER_LEN + 1 + 1  # empty db + NUL, a 1-byte query
_DUMMY_COMMENT = "# Dummy event replacing event type {} that slave cannot handle."
_DUMMY_VAR_NAME = b"!dummyvar"
_QUERY_HEADER = struct.Struct("<IIBHH")


class IncompatibleEvent(InputError):
    """The event cannot be made into something the replica understands (a primary stops the
    dump with ER 1236 and this message)."""


def for_replica(event: memoryview | bytes, capability: int, send_annotate: bool,
                crc: bool) -> memoryview | bytes | None:
    """The event as a primary sends it to a replica of ``capability``: unchanged, rewritten
    (same length), or None when it is left out."""
    etype = event[4]
    if etype == ev.ANNOTATE_ROWS_EVENT and not send_annotate:
        if capability >= CAPABILITY_TOLERATE_HOLES:
            return None
        if capability >= CAPABILITY_ANNOTATE:
            return event  # understood and ignored; leaving it out would make a hole
        return dummy_event(event, crc)
    if etype == ev.GTID_EVENT and capability < CAPABILITY_GTID:
        return _compatible_gtid(event, capability, crc)
    if (etype == ev.BINLOG_CHECKPOINT_EVENT and capability < CAPABILITY_BINLOG_CHECKPOINT) or \
            (etype == ev.GTID_LIST_EVENT and capability < CAPABILITY_GTID):
        return None if capability >= CAPABILITY_TOLERATE_HOLES else dummy_event(event, crc)
    return event


def _compatible_gtid(event: memoryview | bytes, capability: int, crc: bool) -> bytes | None:
    if _data_length(event, crc) < ev.HEADER_LEN + _GTID_BODY_LEN:
        raise IncompatibleEvent("Failed to replace GTID event with backwards-compatible event: corrupt event.")
    if event[ev.HEADER_LEN + 12] & ev.FL_STANDALONE:  # no BEGIN ... COMMIT around it
        return dummy_event(event, crc) if capability < CAPABILITY_TOLERATE_HOLES else None
    return begin_event(event, crc)


def dummy_event(event: memoryview | bytes, crc: bool) -> bytes:
    """A no-op event of the same length: a comment-only QUERY_EVENT, or a NULL user variable
    ``@`!dummyvar``` (cut to fit) when a query does not fit."""
    length = _data_length(event, crc)
    if length < _MIN_USER_VAR_EVENT:
        raise IncompatibleEvent(f"Failed to replace event type {event[4]} with a dummy: too small event.")
    out = bytearray(event[:length])
    _mark_replaced(out)
    if length < _MIN_QUERY_EVENT:
        name = _DUMMY_VAR_NAME[: length - (_MIN_USER_VAR_EVENT - 1)]
        out[4] = ev.USER_VAR_EVENT
        out[ev.HEADER_LEN :] = struct.pack("<I", len(name)) + name + b"\x01"  # 1: the value is NULL
    else:
        comment = _DUMMY_COMMENT.format(event[4]).encode()
        room = length - (_MIN_QUERY_EVENT - 1)
        out[4] = ev.QUERY_EVENT
        out[ev.HEADER_LEN :] = _QUERY_HEADER.pack(0, 0, 0, 0, 0) + b"\x00" + comment[:room].ljust(room, b" ")
    return _finish(out, crc)


def begin_event(event: memoryview | bytes, crc: bool) -> bytes:
    """A GTID event (19 or 21 bytes of body) as a ``BEGIN`` QUERY_EVENT of the same length; the
    longer one carries an empty time zone status variable to fill the two extra bytes."""
    length = _data_length(event, crc)
    if length not in (ev.HEADER_LEN + _GTID_BODY_LEN, ev.HEADER_LEN + _GTID_BODY_LEN + 2):
        raise IncompatibleEvent("Failed to replace GTID event with backwards-compatible event: corrupt event.")
    out = bytearray(event[:length])
    _mark_replaced(out)
    out[4] = ev.QUERY_EVENT
    status_vars = b"" if length == ev.HEADER_LEN + _GTID_BODY_LEN else bytes((_Q_TIME_ZONE_CODE, 0))
    out[ev.HEADER_LEN :] = _QUERY_HEADER.pack(0, 0, 0, 0, len(status_vars)) + status_vars + b"\x00BEGIN"
    return _finish(out, crc)


def _data_length(event: memoryview | bytes, crc: bool) -> int:
    return len(event) - (ev.CRC_LEN if crc else 0)


def _mark_replaced(out: bytearray) -> None:
    # No longer tied to a session's temporary tables, and no USE for the replica to run.
    flags = int.from_bytes(out[ev.FLAGS_OFFSET : ev.FLAGS_OFFSET + 2], "little")
    flags = (flags & ~_THREAD_SPECIFIC_F) | _SUPPRESS_USE_F
    out[ev.FLAGS_OFFSET : ev.FLAGS_OFFSET + 2] = flags.to_bytes(2, "little")


def _finish(out: bytearray, crc: bool) -> bytes:
    if crc:
        out += ev.crc32(out).to_bytes(4, "little")
    return bytes(out)

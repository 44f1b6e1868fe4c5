"""Event-group boundaries (docs/protocol.md 7.1): where a reader may safely stop.

A group is a transaction or a standalone statement.  ``GroupTracker.ends_group`` is
told each event in order and answers whether the position after it is a group end.
It reads the type byte and, for QUERY and MariaDB GTID events, a few body bytes.
"""

from __future__ import annotations

from . import events as ev

# The states are numbered as relay/binlog/_scan.c's check() keeps them.
_OUTSIDE = 0
_AFTER_MYSQL_GTID = 1  # MySQL GTID seen: BEGIN opens a transaction, any other query is DDL
_IN_TRANSACTION = 2
_STANDALONE = 3  # MariaDB standalone GTID: the next query closes the group
_LOOSE = 4  # statement parts (table maps, rows, intvar...) seen outside any GTID/BEGIN

_NEUTRAL = frozenset({
    ev.FORMAT_DESCRIPTION_EVENT, ev.ROTATE_EVENT, ev.STOP_EVENT, ev.HEARTBEAT_LOG_EVENT,
    ev.HEARTBEAT_LOG_EVENT_V2, ev.PREVIOUS_GTIDS_LOG_EVENT, ev.GTID_LIST_EVENT,
    ev.BINLOG_CHECKPOINT_EVENT, ev.START_ENCRYPTION_EVENT, ev.START_EVENT_V3,
})
CLOSERS = frozenset({ev.XA_PREPARE_LOG_EVENT, ev.TRANSACTION_PAYLOAD_EVENT, ev.INCIDENT_EVENT})
MYSQL_GTIDS = frozenset({ev.GTID_LOG_EVENT, ev.ANONYMOUS_GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT})

# Every type ends_group looks at; any other event inside a group leaves the state as it is.
STATE_TYPES = _NEUTRAL | CLOSERS | MYSQL_GTIDS | {ev.QUERY_EVENT, ev.XID_EVENT, ev.GTID_EVENT,
                                                    ev.QUERY_COMPRESSED_EVENT}

# What _scan.c's check() does with each event type while it keeps the state above (the Python loop
# of storage/importer.py takes every KIND_STOP event): the events of a transaction it walks itself.
KIND_STOP, KIND_OTHER, KIND_CLOSER, KIND_MARIADB_GTID, KIND_MYSQL_GTID = range(5)
CHECK_KINDS = bytes(KIND_CLOSER if t == ev.XID_EVENT or t in CLOSERS
                       else KIND_MARIADB_GTID if t == ev.GTID_EVENT
                       else KIND_MYSQL_GTID if t in MYSQL_GTIDS
                       else KIND_STOP if t in STATE_TYPES
                       else KIND_OTHER for t in range(256))

_OPENERS = (b"BEGIN", b"XA START", b"XA BEGIN")
_ENDERS = (b"COMMIT", b"ROLLBACK", b"XA COMMIT", b"XA ROLLBACK")


def _query_head(event: memoryview | bytes) -> bytes:
    start = ev.query_text_start(event)
    return bytes(event[start : start + 12]).upper()


def _is_end_statement(head: bytes) -> bool:
    return head.startswith(_ENDERS) and not head.startswith(b"ROLLBACK TO")


class GroupTracker:
    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = _OUTSIDE

    @property
    def inside_group(self) -> bool:
        return self.state != _OUTSIDE

    def reset(self) -> None:
        self.state = _OUTSIDE

    def ends_group(self, event_type: int, event: memoryview | bytes) -> bool:
        """Observe one event; True if a group ends right after it."""
        if event_type in _NEUTRAL:
            return self.state == _OUTSIDE
        if event_type == ev.QUERY_EVENT:
            return self._on_query(_query_head(event))
        if event_type == ev.XID_EVENT or event_type in CLOSERS:
            self.state = _OUTSIDE
            return True
        if event_type == ev.GTID_EVENT:
            flags2 = event[ev.HEADER_LEN + 12]
            self.state = _STANDALONE if flags2 & ev.FL_STANDALONE else _IN_TRANSACTION
            return False
        if event_type in MYSQL_GTIDS:
            self.state = _AFTER_MYSQL_GTID
            return False
        if event_type == ev.QUERY_COMPRESSED_EVENT:
            # Compressed text cannot be BEGIN/COMMIT (too short to be compressed): a statement.
            return self._on_query(b"")
        if self.state == _OUTSIDE:
            self.state = _LOOSE
        return False

    def _on_query(self, head: bytes) -> bool:
        state = self.state
        if state == _IN_TRANSACTION:
            if _is_end_statement(head):
                self.state = _OUTSIDE
                return True
            return False
        if state != _STANDALONE and head.startswith(_OPENERS):
            self.state = _IN_TRANSACTION
            return False
        self.state = _OUTSIDE  # DDL or any standalone statement
        return True

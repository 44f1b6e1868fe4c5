"""Where a MariaDB GTID dump starts sending, decided event by event as MariaDB's primary does it
(sql_repl.cc: send_event_to_slave, send_events).  Sans-IO: it is told each event in binlog order.

Per domain the replica named one GTID (@slave_connect_state).  The dump skips that domain's
groups only until it meets the GTID of the same server_id with a seq_no at or above the one
named; from there on everything of the domain is sent in binlog order, even groups with a lower
seq_no written later by another server (possible with gtid_strict_mode off).  Once a domain's
start is met, an artificial GTID_LIST is due: it moves the replica's file/position to the end
of the group it stops skipping (or of the GTID event, when the group met is itself sent).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from . import events as ev
from .gtid import BinlogState, Gtid, start_missing_message
from ..errors import Refusal

# Log_event::is_part_of_group: a standalone group is skipped up to its first event not listed here.
_PART_OF_GROUP = frozenset({ev.GTID_EVENT, ev.INTVAR_EVENT, ev.RAND_EVENT, ev.USER_VAR_EVENT,
                            ev.TABLE_MAP_EVENT, ev.ANNOTATE_ROWS_EVENT})
_TRANSACTION_ENDS = frozenset({ev.XID_EVENT, ev.XA_PREPARE_LOG_EVENT})
_NOT_SKIPPING, _SKIP_STANDALONE, _SKIP_TRANSACTION = 0, 1, 2
_GTID_BODY = struct.Struct("<QIB")  # seq_no, domain_id, flags2


class GtidStartError(Refusal):
    """The replica's GTID start cannot be served (ERR 1236 text)."""


class GtidStart:
    """The skipping state of one GTID dump.

    ``pending``: domain -> the GTID the replica has, for the domains whose start is not met yet.
    ``empty_domains``: pending domains the binlog had nothing of when the dump began; meeting one
    later re-checks that the binlog now has the replica's GTID (START_ON_EMPTY_DOMAIN).
    ``binlog_state``: the stored history's state at its committed end, for that re-check."""

    def __init__(self, pending: dict[int, Gtid], empty_domains: set[int], strict: bool,
                 binlog_state: Callable[[], BinlogState]) -> None:
        self.pending = pending
        self.empty_domains = empty_domains
        self.strict = strict
        self._binlog_state = binlog_state
        self.seen = BinlogState()  # every GTID met while a domain was pending: the artificial GTID_LIST
        self.fake_list_due = False
        self._skip = _NOT_SKIPPING

    @property
    def reached(self) -> bool:
        """is_pos_reached: no domain is still waiting for a GTID the binlog has."""
        return all(domain in self.empty_domains for domain in self.pending)

    @property
    def done(self) -> bool:
        """Nothing left to skip or to announce: the dump needs no more per-event work from here."""
        return not self.pending and not self.fake_list_due and self._skip == _NOT_SKIPPING

    def accept(self, event: memoryview | bytes, event_type: int, crc: bool) -> bool:
        """Observe the next event (``crc``: it ends in a CRC32); False if it belongs to a group
        the replica already has."""
        if event_type == ev.GTID_EVENT and self.pending:
            self._on_gtid(event)
        skip = self._skip
        if skip == _NOT_SKIPPING:
            return True
        if skip == _SKIP_STANDALONE:
            ends = event_type not in _PART_OF_GROUP
        else:
            ends = event_type in _TRANSACTION_ENDS or (event_type == ev.QUERY_EVENT and _commits_or_rolls_back(event, crc))
        if ends:
            self._skip = _NOT_SKIPPING
        return False

    def take_fake_list(self) -> bool:
        """True once, right after the event that ends the skipping of a domain whose start was met."""
        if self.fake_list_due and self._skip == _NOT_SKIPPING:
            self.fake_list_due = False
            return True
        return False

    def _on_gtid(self, event: memoryview | bytes) -> None:
        seq_no, domain_id, flags2 = _GTID_BODY.unpack_from(event, ev.HEADER_LEN)
        server_id = int.from_bytes(event[5:9], "little")
        self.seen.update(Gtid(domain_id, server_id, seq_no))
        wanted = self.pending.get(domain_id)
        if wanted is None:
            return
        if domain_id in self.empty_domains:
            state = self._binlog_state()
            have = state.seq_of(domain_id, wanted.server_id)
            if have is None or have < wanted.seq_no:
                raise GtidStartError(start_missing_message(wanted, state))
            self.empty_domains.discard(domain_id)
        same_server = server_id == wanted.server_id
        if not same_server or seq_no <= wanted.seq_no:
            self._skip = _SKIP_STANDALONE if flags2 & ev.FL_STANDALONE else _SKIP_TRANSACTION
        if same_server and seq_no >= wanted.seq_no:
            if self.strict and seq_no > wanted.seq_no:
                raise GtidStartError(
                    f"The binlog on the master is missing the GTID {wanted} requested by the slave (even though "
                    "both a prior and a subsequent sequence number does exist), and GTID strict mode is enabled")
            self.fake_list_due = True
            del self.pending[domain_id]


def _commits_or_rolls_back(event: memoryview | bytes, crc: bool) -> bool:
    """Query_log_event::peek_is_commit_rollback: the statement is exactly COMMIT or ROLLBACK (the
    byte before it ends the database name)."""
    end = len(event) - (ev.CRC_LEN if crc else 0)
    tail = bytes(event[max(end - 9, 0) : end])
    return tail.endswith(b"\x00COMMIT") or tail == b"\x00ROLLBACK"

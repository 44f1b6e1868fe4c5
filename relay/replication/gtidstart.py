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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..binlog import events as ev
from ..errors import Refusal
from ..gtid.gtid import BinlogState, Gtid, start_missing_message
from ..gtid.spans import PART_OF_GROUP as _PART_OF_GROUP
from ..gtid.spans import Span, apply_span, commits_or_rolls_back, span_holding

try:
    from ..binlog._scan import find as _compiled_find
except ImportError:  # built without the C module
    _compiled_find = None

_TRANSACTION_ENDS = frozenset({ev.XID_EVENT, ev.XA_PREPARE_LOG_EVENT})
_NOT_SKIPPING, _SKIP_STANDALONE, _SKIP_TRANSACTION = 0, 1, 2
_GTID_BODY = struct.Struct("<QIB")  # seq_no, domain_id, flags2
_U32 = struct.Struct("<I")
# What may end a skipped transaction, or needs a decision inside one (a GTID event)
_SKIPPED_TRANSACTION_STOPS = bytes(t in (ev.XID_EVENT, ev.XA_PREPARE_LOG_EVENT, ev.QUERY_EVENT, ev.GTID_EVENT)
                                   for t in range(256))


class GtidStartError(Refusal):
    """The replica's GTID start cannot be served (ERR 1236 text)."""


@dataclass(frozen=True)
class SeekPlan:
    """A jump of a GTID dump over whole spans of the index (gtid/spans.py): from the dump's
    position to ``target``, every group in between is one the replica has; ``loose`` are the
    events in between that belong to no group, which it must still be sent, in order."""

    position: int
    target: int
    loose: tuple[int, ...]
    spans: tuple[Span, ...]  # from the one holding ``position`` to the one ending at ``target``


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
            ends = event_type in _TRANSACTION_ENDS or (
                event_type == ev.QUERY_EVENT and commits_or_rolls_back(event, crc))
        if ends:
            self._skip = _NOT_SKIPPING
        return False

    def seek(self, position: int, spans: Sequence[Span]) -> SeekPlan | None:
        """Where the dump may jump from ``position`` (an event start of the current file whose
        ``spans`` from offset 4 are given): to the end of the last of the spans, from the one
        holding the position, whose every group the replica already has.  A domain still
        waiting for the replica's GTID skips its groups until a GTID of the replica's server
        at or past the seq_no named (``_on_gtid``): a span where no such GTID ends and every
        group is of such a domain is skipped whole, so jumping over it sends the same events
        (its loose ones) and leaves the same state as walking it would."""
        first = span_holding(position, spans) if self.pending and not self.fake_list_due else None
        if first is None:
            return None
        last = first
        while last < len(spans) and self._skips_whole(spans[last]):
            last += 1
        if last == first:
            return None
        jumped = tuple(spans[first:last])
        loose = tuple(at for span in jumped for at in span.loose if at >= position)
        return SeekPlan(position, jumped[-1].end, loose, jumped)

    def _skips_whole(self, span: Span) -> bool:
        if span.barrier or span.anonymous or span.mysql is not None:
            return False
        for pair in span.pairs:
            wanted = self.pending.get(pair.domain)
            if wanted is None or pair.domain in self.empty_domains:
                return False
            if pair.server == wanted.server_id and pair.hi >= wanted.seq_no:
                return False
        return True

    def before_loose_events(self) -> None:
        """The loose events of a seek come after the group the dump was skipping, if any."""
        self._skip = _NOT_SKIPPING

    def jumped(self, plan: SeekPlan) -> None:
        """The dump is at ``plan.target``: what it saw of the groups in between is what walking
        them one by one would have shown (every GTID of them, in file order)."""
        for span in plan.spans:
            apply_span(self.seen, span)
        self._skip = _NOT_SKIPPING

    def skip_block(self, block: memoryview | bytes, size: int, crc: bool) -> tuple[int, int]:
        """Pass over the whole events at the start of ``block[:size]`` that the replica already
        has, as ``accept`` would, stopping at the first one that is sent or needs a decision (a
        GTID that is the replica's start, of a domain not skipped, of an empty domain): (bytes
        passed, groups skipped).  A skipped transaction is passed over by its events' headers."""
        pos = skipped = 0
        pending, empty = self.pending, self.empty_domains
        while pending and not self.fake_list_due and pos + ev.HEADER_LEN <= size:
            length = _U32.unpack_from(block, pos + 9)[0]
            if length < ev.HEADER_LEN or pos + length > size:
                break
            etype = block[pos + 4]
            if etype == ev.GTID_EVENT:
                if length < ev.HEADER_LEN + 13:
                    break
                seq_no, domain_id, flags2 = _GTID_BODY.unpack_from(block, pos + ev.HEADER_LEN)
                wanted = pending.get(domain_id)
                server_id = _U32.unpack_from(block, pos + 5)[0]
                if wanted is None or domain_id in empty or (server_id == wanted.server_id and seq_no >= wanted.seq_no):
                    break  # sent, or the replica's start: accept() decides
                self.seen.update(Gtid(domain_id, server_id, seq_no))
                self._skip = _SKIP_STANDALONE if flags2 & ev.FL_STANDALONE else _SKIP_TRANSACTION
                skipped += 1
            elif self._skip == _NOT_SKIPPING:
                break  # an event outside any group: sent
            elif self._skip == _SKIP_STANDALONE:
                if etype not in _PART_OF_GROUP:
                    self._skip = _NOT_SKIPPING
            else:
                stop, found = _find(block, pos, size, _SKIPPED_TRANSACTION_STOPS)
                if not found:
                    pos = stop
                    break
                if stop != pos:
                    pos = stop
                    continue  # the GTID or the possible end found is looked at as any event
                if etype in _TRANSACTION_ENDS or (etype == ev.QUERY_EVENT and commits_or_rolls_back(
                        block[pos : pos + length], crc)):
                    self._skip = _NOT_SKIPPING
            pos += length
        return pos, skipped

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


def _find(block: memoryview | bytes, pos: int, size: int, types: bytes) -> tuple[int, bool]:
    """scan.find_event, here so that the sans-IO core needs nothing of storage."""
    if _compiled_find is not None:
        return _compiled_find(block, pos, size, types)
    while pos + ev.HEADER_LEN <= size:
        length = _U32.unpack_from(block, pos + 9)[0]
        if length < ev.HEADER_LEN or pos + length > size:
            break
        if types[block[pos + 4]]:
            return pos, True
        pos += length
    return pos, False

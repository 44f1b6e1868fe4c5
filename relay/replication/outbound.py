"""What a dump sends, sans-IO: the fake ROTATE and FDE at each file start, the stored events
with the loop filter applied, and heartbeats (docs/protocol.md 4.5, 4.6; docs/architecture.md, decision 4).

The stored bytes go out unchanged; only artificial events are built here.  Per event the
filter reads the type byte and, at group starts, the header's server_id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..binlog import events as ev
from ..binlog.groups import GroupTracker
from ..errors import Refusal
from ..gtid.mysqlgtid import ExcludedGroups
from ..protocol.packets import EVENT_PACKET_OVERHEAD, frame_events
from .compat import CAPABILITY_GTID, IncompatibleEvent, for_replica
from .gtidstart import GtidStart

try:
    from ..binlog._scan import frame as _compiled_frame
except ImportError:  # installed without a C compiler: the Python loop does the same, slower
    _compiled_frame = None

_GROUP_STARTS = frozenset({ev.GTID_EVENT, ev.GTID_LOG_EVENT, ev.ANONYMOUS_GTID_LOG_EVENT,
                           ev.GTID_TAGGED_LOG_EVENT})
_SERVER_ID = struct.Struct("<I")

SKIP_IGNORED_SERVER = "ignore_server_ids"
SKIP_OWN_SERVER = "replica_own_server_id"
SKIP_ALREADY_APPLIED = "gtid_already_applied"


class DumpRefused(Refusal):
    """ERR 1236 for the client: the dump cannot start or go on."""


@dataclass
class DumpOptions:
    relay_server_id: int
    replica_server_id: int | None  # groups it wrote itself are not sent back (None: no such filter)
    checksum_declared: bool  # the client SET @master_binlog_checksum (it understands CRCs)
    first_rotate_crc: bool  # ... and set it to a CRC algorithm
    ignore_server_ids: frozenset[int] = frozenset()
    send_annotate_rows: bool = True
    replica_capability: int = CAPABILITY_GTID  # @mariadb_slave_capability: below 4, events are rewritten
    heartbeat_v2: bool = False  # a MySQL replica's dump flag USE_HEARTBEAT_EVENT_V2


@dataclass
class OutboundStream:
    options: DumpOptions
    file: str = ""
    position: int = 0  # end of the last event read from ``file`` (sent or skipped)
    checksum_alg: int = ev.CHECKSUM_OFF  # of the current file, from its FDE
    skipped: dict[str, int] = field(default_factory=dict)  # groups not sent, by reason
    gtid_start: GtidStart | None = None  # a MariaDB GTID dump until its start is met in every domain
    excluded: ExcludedGroups | None = None  # a MySQL GTID dump: the replica's GTIDs, for its whole life
    clear_first_created: bool = False  # zero 'created' in the first FDE (its first group is left out)
    _skipped_to: int = 0  # end of the last event left out and not yet covered by a heartbeat
    _skipping: str | None = None
    _groups: GroupTracker = field(default_factory=GroupTracker)
    _announced: str | None = None  # the next file whose fake ROTATE went ahead of its fetch

    def announce(self, name: str) -> bytes:
        """The fake ROTATE that opens the next file, ``name``, sent before that file is fetched back
        from the archive: a client that stops at it (``mariadb-binlog --raw FILE``) need not wait
        for the fetch.  ``file_start`` then sends only the FDE."""
        self._announced = name
        return ev.build_rotate(self.options.relay_server_id, name, 4, self.checksum_alg == ev.CHECKSUM_CRC32)

    def file_start(self, name: str, position: int, fde: bytes, first: bool) -> list[bytes]:
        """The fake ROTATE and the FDE that open ``name`` for the client (dump at ``position``)."""
        rotate_crc = self.options.first_rotate_crc if first else self.checksum_alg == ev.CHECKSUM_CRC32
        announced, self._announced = self._announced == name and not first, None
        rotate = [] if announced else [ev.build_rotate(self.options.relay_server_id, name, position, rotate_crc)]
        description = ev.parse_format_description(fde)
        if description.checksum_alg == ev.CHECKSUM_CRC32 and not self.options.checksum_declared:
            raise DumpRefused("Slave can not handle replication events with the checksum that master is "
                              "configured to log")
        self.file = name
        self.checksum_alg = description.checksum_alg
        self.position = position
        resumed = first and position > 4
        # A GTID replica that has not reached its start may hold temporary tables of later groups,
        # which a non-zero 'created' would make it drop.
        zero_created = resumed or (self.gtid_start is not None and not self.gtid_start.reached) or (
            first and self.clear_first_created)
        return [*rotate, _prepare_fde(fde, zero_log_pos=resumed, zero_created=zero_created)]

    def sends_everything(self) -> bool:
        """No stored event can be left out (mariadb-binlog, CDC tools): no per-event work."""
        return (self.fast_path_allowed() and self.options.replica_server_id is None
                and self.options.send_annotate_rows)

    def fast_path_allowed(self) -> bool:
        """``frame_block`` may send this dump's events: the only possible filter is the replica's
        own server_id, which it stops at."""
        options = self.options
        # Annotations the replica did not ask for are left out by the framer (leave_out), as
        # for_replica leaves them out for a replica that tolerates holes (every GTID-capable one):
        # a MariaDB replica without log_slave_updates never asks for them.
        return (not options.ignore_server_ids and self.gtid_start is None
                and self.excluded is None
                and options.replica_capability >= CAPABILITY_GTID and self._skipping is None)

    def left_out_types(self) -> bytes:
        """For ``frame_block``: the event types this replica does not get on the fast path."""
        return _NOTHING_LEFT_OUT if self.options.send_annotate_rows else _ANNOTATIONS_LEFT_OUT

    def filter(self, events: list[memoryview], end: int) -> list[memoryview | bytes]:
        """The events to send of a run read from the current file; ``end`` is where the run ends."""
        self.position = end
        if self.sends_everything():
            return events  # type: ignore[return-value]
        if self.excluded is not None:
            return self._filter_excluded(self.excluded, events, end)
        start = self.gtid_start
        if start is None:
            return [sent for sent in map(self._pass, events) if sent is not None]
        out: list[memoryview | bytes] = []
        crc = self.checksum_alg == ev.CHECKSUM_CRC32
        event_end = end - sum(map(len, events))
        for event in events:
            event_end += len(event)
            etype = event[4]
            if start.accept(event, etype, crc):
                sent = self._pass(event)
                if sent is not None:
                    out.append(sent)
            elif etype == ev.GTID_EVENT:
                self._count(SKIP_ALREADY_APPLIED)
            if start.take_fake_list():
                gtids = [(g.domain_id, g.server_id, g.seq_no) for g in start.seen.gtid_list()]
                out.append(ev.build_gtid_list(self.options.relay_server_id, gtids, event_end, crc))
        if start.done:
            self.gtid_start = None  # every domain's start is met: the fast path may take over
        return out

    def _filter_excluded(self, excluded: ExcludedGroups, events: list[memoryview], end: int
                         ) -> list[memoryview | bytes]:
        """A MySQL GTID dump: groups the replica has are left out, and a heartbeat at the end of
        what was left out goes before the next event sent (and at the end of the run), so the
        replica's position moves past them (Binlog_sender::send_events)."""
        out: list[memoryview | bytes] = []
        event_end = end - sum(map(len, events))
        for event in events:
            event_end += len(event)
            if not excluded.accept(event):
                self._skipped_to = event_end
                if event[4] in (ev.GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT):
                    self._count(SKIP_ALREADY_APPLIED)
                continue
            sent = self._pass(event)
            if sent is None:
                continue
            if self._skipped_to:
                out.append(self.heartbeat(self._skipped_to))
                self._skipped_to = 0
            out.append(sent)
        if excluded.excluding:
            out.append(self.heartbeat(event_end))
        return out

    def _pass(self, event: memoryview) -> memoryview | bytes | None:
        """The event as this replica gets it, or None: the relay's own filters (replication loops,
        annotations, capability rewrites), which a MariaDB primary applies after the GTID start."""
        etype = event[4]
        if self._skipping is not None:
            if self._groups.ends_group(etype, event):
                self._skipping = None
            return None
        options = self.options
        if etype in _GROUP_STARTS:
            origin = _SERVER_ID.unpack_from(event, 5)[0]
            reason = SKIP_OWN_SERVER if origin == options.replica_server_id else \
                SKIP_IGNORED_SERVER if origin in options.ignore_server_ids else None
            if reason is not None:
                self._skipping = reason
                self._groups.reset()
                self._groups.ends_group(etype, event)
                self._count(reason)
                return None
        capability = options.replica_capability
        if capability < CAPABILITY_GTID or (etype == ev.ANNOTATE_ROWS_EVENT and not options.send_annotate_rows):
            try:
                return for_replica(event, capability, options.send_annotate_rows,
                                   self.checksum_alg == ev.CHECKSUM_CRC32)
            except IncompatibleEvent as exc:
                raise DumpRefused(str(exc)) from None
        return event

    def _count(self, reason: str, groups: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + groups

    def count_skipped(self, groups: int) -> None:
        """Groups of a GTID dump's start passed over without reading them one by one."""
        if groups:
            self._count(SKIP_ALREADY_APPLIED, groups)

    def heartbeat(self, position: int | None = None) -> bytes:
        """A heartbeat saying where the client's next event would start (default: the position
        reached): HEARTBEAT_LOG_EVENT, or the v2 event a MySQL 8.0.26+ replica asks for."""
        position = self.position if position is None else position
        name = self.file.encode("utf-8")
        with_crc = self.checksum_alg == ev.CHECKSUM_CRC32
        if self.options.heartbeat_v2:
            body = ev.heartbeat_v2_body(name, position)
            etype, log_pos = ev.HEARTBEAT_LOG_EVENT_V2, 0
        else:
            body, etype, log_pos = name, ev.HEARTBEAT_LOG_EVENT, position & 0xFFFFFFFF
        length = ev.HEADER_LEN + len(body) + (ev.CRC_LEN if with_crc else 0)
        event = ev.HEADER.pack(0, etype, self.options.relay_server_id, length, log_pos, 0) + body
        return ev.with_checksum(event) if with_crc else event


def _prepare_fde(fde: bytes, zero_log_pos: bool, zero_created: bool) -> bytes:
    """Clear BINLOG_IN_USE.  When the dump starts past offset 4 also zero log_pos, and zero
    'created' there and in GTID dumps (a non-zero 'created' tells the replica the primary just
    started, so it would drop its temporary tables); then recompute the CRC."""
    event = bytearray(fde)
    event[ev.FLAGS_OFFSET] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    if not (zero_log_pos or zero_created):
        return bytes(event)
    if zero_log_pos:
        struct.pack_into("<I", event, 13, 0)
    if zero_created:
        struct.pack_into("<I", event, ev.FDE_CREATED_OFFSET, 0)
    if event[-5] == ev.CHECKSUM_CRC32:
        event[-4:] = ev.crc32(event[:-4]).to_bytes(4, "little")
    return bytes(event)


@dataclass(frozen=True)
class FramedRun:
    data: memoryview  # the packets (u24 length, sequence id, 00, event), in the buffer framed into
    used: int  # bytes of the block they hold
    events: int  # packets: one per event (for ServerConnection.send_framed)
    last_event: int  # offset of the last one in the block


def framed_capacity(block_size: int) -> int:
    """Room for the packets of every event a block of ``block_size`` bytes can hold (each event
    is at least a header long, and gains a packet header and a status byte)."""
    return block_size + EVENT_PACKET_OVERHEAD * (block_size // ev.HEADER_LEN + 1)


_EVENT_LENGTH = struct.Struct("<I")
_GROUP_START_TYPES = bytes(t in _GROUP_STARTS for t in range(256))  # for the compiled loop


_NOTHING_LEFT_OUT = bytes(256)
_ANNOTATIONS_LEFT_OUT = bytes(t == ev.ANNOTATE_ROWS_EVENT for t in range(256))


def frame_block(block: memoryview, size: int, sequence_id: int, stop_at_origin: int | None,
                verify_crc: bool = False, leave_out: bytes = _NOTHING_LEFT_OUT,
                out: bytearray | None = None) -> FramedRun:
    """The serve fast path: frame the whole events at the start of ``block[:size]`` as dump
    packets in one pass, into ``out`` (the dump's own, reused from block to block; a fresh one
    of ``framed_capacity(size)`` when None), numbered from ``sequence_id``
    (``ServerConnection.sequence_id``: the block goes back to the connection with
    ``send_framed``), stopping before an event of 16 MB or more, a partial one, one whose packet
    would not fit in ``out``, a group start written by ``stop_at_origin`` (the replica's own
    transactions go the filtered way), or, with ``verify_crc``, an event whose CRC32 is wrong
    (the general path reports it).  Events of the types marked in ``leave_out`` (256 bytes)
    are passed over (``used``), not sent.  The compiled loop of _scan.c does it when it is
    built; else the events are picked here and framed by ``protocol.packets.frame_events``."""
    if out is None:
        out = bytearray(framed_capacity(size))
    if _compiled_frame is not None:
        length, used, events, last, _ = _compiled_frame(
            block, size, sequence_id, -1 if stop_at_origin is None else stop_at_origin, _GROUP_START_TYPES,
            verify_crc, leave_out, out)
        return FramedRun(memoryview(out)[:length], used, events, last)
    unpack = _EVENT_LENGTH.unpack_from
    origin_at = _SERVER_ID.unpack_from
    picked: list[memoryview] = []
    pos = last = framed = 0
    while pos + ev.HEADER_LEN <= size:
        length = unpack(block, pos + 9)[0]
        end = pos + length
        if end > size or length < ev.HEADER_LEN or length + 1 >= 0xFFFFFF:
            break
        if stop_at_origin is not None and block[pos + 4] in _GROUP_STARTS \
                and origin_at(block, pos + 5)[0] == stop_at_origin:
            break
        if verify_crc and ev.crc32(block[pos:end]) != ev.CRC32_RESIDUE:
            break
        if leave_out[block[pos + 4]]:
            pos = end
            continue
        if framed + EVENT_PACKET_OVERHEAD + length > len(out):
            break
        framed += EVENT_PACKET_OVERHEAD + length
        picked.append(block[pos:end])
        last = pos
        pos = end
    packets: list[bytes | bytearray | memoryview] = []
    frame_events(picked, sequence_id, packets)
    out[:framed] = b"".join(packets)
    return FramedRun(memoryview(out)[:framed], pos, len(picked), last)

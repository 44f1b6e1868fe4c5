"""Ingest from a primary whose coordinates are not the stored ones: after a switch to another
primary (failover), the stored history continues in the relay's own files.

Until a switch the relay mirrors its primary (same file names, same offsets: ``stream.IngestStream``).
The new primary has other names and offsets, so from the switch on:
- the relay closes its current file with a ROTATE naming its next file (``next_file_name``), at a
  group end: a file/position replica of the relay reads into the new file as at any rotation;
- the new file opens with the new primary's FORMAT_DESCRIPTION and a GTID_LIST of the relay's
  binlog state (what a MariaDB binlog file opens with, and what GTID replicas search for);
- every event is stored at the relay's position: its log_pos says where it ends in the relay's
  file and its CRC32 is computed again;
- the new primary's rotations become the relay's: its ROTATE is replaced by one naming the relay's
  next file, and the relay's file starts with the primary's FDE.  From the primary's second file
  on, a stored file holds the primary's file byte for byte but for the final ROTATE.
Sans-IO: bytes of the dump stream in, ``Segment`` writes out, as IngestStream.
"""

from __future__ import annotations

import struct

from ..binlog import events as ev
from ..binlog.groups import GroupTracker
from ..binlog.names import next_file_name
from ..gtid.gtid import BinlogState
from ..protocol.codes import ERR_PACKET, EVENT_PACKET
from ..protocol.packets import PacketReader, is_eof, parse_err
from .stream import Segment, StreamError, UpstreamEnded

_LOG_POS = struct.Struct("<I")
_FILE_HEADER_EVENTS = frozenset({ev.GTID_LIST_EVENT, ev.BINLOG_CHECKPOINT_EVENT, ev.START_ENCRYPTION_EVENT})
_LOG_POS_OFFSET = 13


class TranslatingStream:
    """``file`` and ``position``: the relay's current file and its stored (committed) end.
    ``switch_state``: at a switch, the relay's binlog state for the GTID_LIST of the file the
    primary's events go to (None when the current file already holds this primary's events).
    At a switch that file is the next one, after a ROTATE closing ``file`` (unless ``file`` already
    ends with one: a rotation of the old primary, or a switch a crash interrupted), or ``file``
    itself while it is empty (a crash right after creating it)."""

    def __init__(self, file: str, position: int, checksum_alg: int, switch_state: BinlogState | None,
                 ends_with_rotate: bool = False) -> None:
        self.file = file
        self.position = position
        self.checksum_alg = checksum_alg
        self._switch_state = switch_state
        self._ends_with_rotate = ends_with_rotate
        self._reader = PacketReader()
        self._reader.next_seq = 1  # the dump's replies follow the client's packet 0
        self._groups = GroupTracker()
        self._upstream_rotated = False  # the primary's ROTATE came: its FDE opens the relay's next file
        # A GTID dump starts at the top of one of the primary's files: its GTID_LIST and checkpoint
        # describe that file, not the relay's, and are left out until the first group.
        self._before_first_group = True
        self.primary_position: tuple[str, int] | None = None  # the primary's own coordinates
        self.last_event_timestamp = 0
        self.event_counts = [0] * 256
        self.event_bytes = [0] * 256
        self.heartbeats = {ev.HEARTBEAT_LOG_EVENT: 0, ev.HEARTBEAT_LOG_EVENT_V2: 0}  # received, by type

    @property
    def inside_group(self) -> bool:
        return self._groups.inside_group

    def receive(self, data: bytes | bytearray) -> list[Segment]:
        self._reader.feed(data)
        segments: list[Segment] = []
        while (payload := self._reader.next_packet()) is not None:
            self._one(payload, segments)
        return segments

    # ------------------------------------------------------------ one packet

    def _one(self, payload: memoryview, segments: list[Segment]) -> None:
        if payload[0] != EVENT_PACKET:
            if payload[0] == ERR_PACKET:
                raise parse_err(payload)
            if is_eof(payload):
                raise UpstreamEnded("the primary ended the binlog dump (EOF)")
            raise StreamError(f"unexpected packet 0x{payload[0]:02x} in the binlog stream")
        event = bytes(payload[1:])
        header = ev.EventHeader.parse(event)
        if header.event_length != len(event):
            raise StreamError(f"event length {header.event_length} does not match its packet ({len(event)} bytes)")
        etype = header.event_type
        if etype == ev.FORMAT_DESCRIPTION_EVENT:
            self.checksum_alg = event[-5]
        crc = self.checksum_alg == ev.CHECKSUM_CRC32
        if crc and not ev.checksum_matches(event):
            raise StreamError(f"event {ev.event_name(etype)} from the primary failed its CRC32 check")
        artificial = header.log_pos == 0 or header.flags & ev.LOG_EVENT_ARTIFICIAL_F
        if etype in (ev.HEARTBEAT_LOG_EVENT, ev.HEARTBEAT_LOG_EVENT_V2):
            self.primary_position = ev.parse_heartbeat(event, self.checksum_alg)
            self.heartbeats[etype] += 1
        elif etype == ev.FORMAT_DESCRIPTION_EVENT and (self._switch_state is not None or self._upstream_rotated):
            self._open_next_file(event, header, segments)
        elif etype == ev.ROTATE_EVENT:
            if not artificial:
                self._upstream_rotated = True  # the relay's own ROTATE goes in when the next FDE comes
        elif etype == ev.GTID_EVENT:
            self._before_first_group = False
            self._store(event, header, segments)
        elif not artificial and etype != ev.FORMAT_DESCRIPTION_EVENT and not (
                self._before_first_group and etype in _FILE_HEADER_EVENTS):
            self._store(event, header, segments)

    def _store(self, event: bytes, header: ev.EventHeader, segments: list[Segment]) -> None:
        if self._switch_state is not None:
            raise StreamError("the new primary sent events before its FORMAT_DESCRIPTION event")
        stored = self._at_relay_position(event)
        etype = header.event_type
        segment = self._segment(segments)
        segment.chunks.append(stored)
        segment.size += len(stored)
        self.position += len(stored)
        self.event_counts[etype] += 1
        self.event_bytes[etype] += len(stored)
        if self._groups.ends_group(etype, stored):
            segment.committed_end = self.position
            segment.last_event_start = self.position - len(stored)
            self.last_event_timestamp = header.timestamp

    def _open_next_file(self, fde: bytes, header: ev.EventHeader, segments: list[Segment]) -> None:
        """Start the relay's next file with ``fde`` (and, at a switch, a GTID_LIST of what the relay
        holds), closing the current one with a ROTATE naming it."""
        if self._groups.inside_group:
            raise StreamError(f"the primary started a new binlog file inside an event group ({self.file})")
        if self.position == 4:
            opening = Segment(self.file, 4)  # the current file is empty: it is the one to fill
            segments.append(opening)
        else:
            next_file = next_file_name(self.file)
            if not self._ends_with_rotate:
                self._close_with_rotate(next_file, header, segments)
            self.file, self.position = next_file, 4
            opening = Segment(next_file, 4, new_file=True)
            segments.append(opening)
        self._ends_with_rotate = False
        cleared = bytearray(fde)
        cleared[ev.FLAGS_OFFSET] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F  # the stored file's FDE, as sent at offset 4
        opening.chunks.append(self._at_relay_position(bytes(cleared)))
        self.position += len(opening.chunks[-1])
        if self._switch_state is not None:
            crc = self.checksum_alg == ev.CHECKSUM_CRC32
            gtids = [(g.domain_id, g.server_id, g.seq_no) for g in self._switch_state.gtid_list()]
            body_len = 4 + 16 * len(gtids) + (ev.CRC_LEN if crc else 0)
            opening.chunks.append(ev.build_gtid_list(header.server_id, gtids, self.position + ev.HEADER_LEN + body_len,
                                                     crc, flags=0))
            self.position += len(opening.chunks[-1])
            self._switch_state = None
        opening.size = self.position - 4
        opening.committed_end = self.position
        opening.last_event_start = self.position - len(opening.chunks[-1])
        self._upstream_rotated = False

    def _close_with_rotate(self, next_file: str, header: ev.EventHeader, segments: list[Segment]) -> None:
        crc = self.checksum_alg == ev.CHECKSUM_CRC32
        rotate_len = ev.HEADER_LEN + 8 + len(next_file.encode()) + (ev.CRC_LEN if crc else 0)
        rotate = ev.build_rotate(header.server_id, next_file, 4, crc, timestamp=header.timestamp,
                                 log_pos=self.position + rotate_len, flags=0)
        closing = self._segment(segments)
        closing.chunks.append(rotate)
        closing.size += len(rotate)
        closing.committed_end = self.position + len(rotate)
        closing.last_event_start = self.position
        self.position += len(rotate)

    def _at_relay_position(self, event: bytes) -> bytes:
        """The event with the log_pos of its end in the relay's file, CRC32 computed again."""
        end = self.position + len(event)
        if _LOG_POS.unpack_from(event, _LOG_POS_OFFSET)[0] == end & 0xFFFFFFFF:
            return event
        rewritten = bytearray(event)
        _LOG_POS.pack_into(rewritten, _LOG_POS_OFFSET, end & 0xFFFFFFFF)
        if self.checksum_alg == ev.CHECKSUM_CRC32:
            return ev.with_checksum(bytes(rewritten[:-ev.CRC_LEN]))
        return bytes(rewritten)

    def _segment(self, segments: list[Segment]) -> Segment:
        if segments and segments[-1].file == self.file and segments[-1].start + segments[-1].size == self.position:
            return segments[-1]
        segment = Segment(self.file, self.position)
        segments.append(segment)
        return segment

"""The upstream dump stream, sans-IO: packets in, storage operations out.

``IngestStream.process`` takes the payloads of a COM_BINLOG_DUMP stream (each ``00 |
event``, or an ERR/EOF) and turns them into ``Segment`` operations: bytes to append
to a named file at a given offset, and how far the committed end may move.  It checks
every event's CRC32 and that it starts exactly where the stored file ends, recognises
the artificial events a primary sends (fake ROTATE, the re-sent FDE, heartbeats), which
are never stored, and follows the primary's file rotations.

This is the relay's hot path: per event it unpacks the 19-byte header, checks the
CRC32 over the whole event (events.crc32), and slices a memoryview.  Inside an open group the
compiled loop of _scan.c (when built) makes the same checks in C and copies each run of
events into one block, which costs less than a memoryview per event.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..binlog import events as ev
from ..binlog.groups import GroupTracker
from ..errors import InputError, RetryableError
from ..protocol.codes import ERR_PACKET, EVENT_PACKET
from ..protocol.packets import ServerError, is_eof, parse_err

try:
    from ..binlog._scan import scan as _compiled_scan
except ImportError:  # installed without a C compiler: the Python loop does the same, slower
    _compiled_scan = None

_HEADER_AFTER_STATUS = struct.Struct("<xIBIIIH")  # the 19-byte header behind the 00 status byte
_U32_AT = struct.Struct("<I")
# packet header (u24 length + seq), status byte, then the 19-byte event header: 24 bytes
_PACKET_AND_HEADER = struct.Struct("<IBIB4xIIH")  # server_id skipped: not needed here
_U32 = 0xFFFFFFFF
_CRC_RESIDUE = 0x2144DF1C  # zlib.crc32(data + crc32(data) as 4 LE bytes), for any data
# Events the fast path leaves to the general one.
_HEARTBEATS = frozenset({ev.HEARTBEAT_LOG_EVENT, ev.HEARTBEAT_LOG_EVENT_V2})  # never stored
_SPECIAL = frozenset({ev.FORMAT_DESCRIPTION_EVENT, ev.ROTATE_EVENT, ev.HEARTBEAT_LOG_EVENT,
                      ev.HEARTBEAT_LOG_EVENT_V2})
# Events that never change the group state while a group is open (the bulk of every binlog).
_INSIDE_GROUP = frozenset({ev.TABLE_MAP_EVENT, 23, 24, 25, 30, 31, 32, 166, 167, 168, 169, 170, 171,
                           ev.ANNOTATE_ROWS_EVENT, ev.INTVAR_EVENT, ev.RAND_EVENT, ev.USER_VAR_EVENT,
                           ev.ROWS_QUERY_LOG_EVENT})
# One list lookup per event instead of two set lookups: how the fast path treats each type.
_GENERAL, _GROUP_CONTENT, _MAY_END_GROUP = 0, 1, 2
_KIND = [_GENERAL if t in _SPECIAL else _GROUP_CONTENT if t in _INSIDE_GROUP else _MAY_END_GROUP
         for t in range(256)]
# What the compiled loop may take: group content, while a group is open (it then needs no decision).
_COMPILED_KINDS = bytes(kind == _GROUP_CONTENT for kind in _KIND)


class _Framing:
    """Bytes of the dump stream not yet parsed, joined only when a packet needs them."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self._rest: bytes | bytearray = b""
        self._pending: list[bytes | bytearray] = []
        self._pending_size = 0
        self._needed = 4

    def take(self, data: bytes | bytearray) -> bytes | bytearray | None:
        """The bytes to parse now, or None while the packet at hand is still incomplete."""
        self._pending.append(data)
        self._pending_size += len(data)
        if len(self._rest) + self._pending_size < self._needed:
            return None
        buf = b"".join([self._rest, *self._pending]) if self._rest or len(self._pending) > 1 else data
        self._rest = b""
        self._pending.clear()
        self._pending_size = 0
        return buf

    def keep(self, buf: bytes | bytearray, pos: int, seq: int) -> None:
        """Remember what was not parsed (the start of an incomplete or multi-chunk packet)."""
        self.seq = seq
        self._rest = buf[pos:]
        self._needed = _packet_bytes_needed(self._rest)


def _join_chunks(buf: bytes | bytearray, pos: int, seq: int) -> tuple[bytes, int, int] | None:
    """A multi-chunk packet's payload, the position after it and the next sequence id; None
    if not all of its chunks are in ``buf`` yet."""
    if pos + _packet_bytes_needed(buf[pos : pos + 4]) > len(buf):
        return None
    parts = []
    while True:
        if pos + 4 > len(buf):
            return None
        word = _U32_AT.unpack_from(buf, pos)[0]
        length = word & 0xFFFFFF
        if pos + 4 + length > len(buf):
            return None
        if word >> 24 != seq:
            raise StreamError(f"packet sequence number wrong in the binlog stream: got {word >> 24}, "
                              f"expected {seq}")
        seq = (seq + 1) & 0xFF
        parts.append(buf[pos + 4 : pos + 4 + length])
        pos += 4 + length
        if length < 0xFFFFFF:
            return b"".join(parts), pos, seq


def _packet_bytes_needed(rest: bytes | bytearray) -> int:
    """How many bytes ``rest`` must have before the packet it starts can be handled."""
    offset = 0
    while True:
        if len(rest) < offset + 4:
            return offset + 4
        length = _U32_AT.unpack_from(rest, offset)[0] & 0xFFFFFF
        offset += 4 + length
        if length < 0xFFFFFF:
            return offset


MIXED_HISTORIES = ("refusing to mix two binlog histories (another primary, or the primary's binlogs were reset; "
                   "use a new data_dir for a new history)")


class StreamError(InputError):
    """The upstream sent something the relay must not store.  Of no kind of its own: ingest, which
    knows what the stream was for, stops with this message (ingest/errors.py)."""


class UpstreamEnded(RetryableError):
    """The primary ended the dump with EOF (it is shutting down or killed the dump thread, or a
    non-blocking dump reached its end); ``segments``: what the same read brought before it."""

    def __init__(self, message: str, segments: list[Segment] | None = None) -> None:
        super().__init__(message)
        self.segments = segments or []


@dataclass
class Segment:
    """Append ``chunks`` to ``file`` at ``start``; then the committed end is ``committed_end``
    (None: no group ended inside this segment).  ``new_file``: create the file first."""

    file: str
    start: int
    chunks: list[memoryview | bytes] = field(default_factory=list)
    size: int = 0
    committed_end: int | None = None
    last_event_start: int = 0  # start of the event that ends at committed_end
    new_file: bool = False


@dataclass(frozen=True)
class ResumePoint:
    """Where ingest continues: ``file`` and ``position`` (the stored end).  ``last_event`` is the
    stored event that ends at ``position`` (None at a file's start); the dump is requested from
    its start and the primary's copy must equal it, which proves the histories match."""

    file: str | None
    position: int
    last_event: bytes | None = None
    origin_server_id: int | None = None  # of the stored FDE of ``file``: the server that wrote it

    @property
    def request_position(self) -> int:
        return self.position - len(self.last_event) if self.last_event else self.position


class IngestStream:
    def __init__(self, resume: ResumePoint, checksum_alg: int) -> None:
        self.file = resume.file
        self.position = resume.request_position
        self._expect_replay = resume.last_event
        self._expect_origin = resume.origin_server_id  # checked on the first FDE of ``file``
        self.checksum_alg = checksum_alg  # of the stream right now: negotiated, then per FDE
        self._next_file: str | None = None
        self._groups = GroupTracker()
        self.primary_position: tuple[str, int] | None = None  # from heartbeats
        self.last_event_timestamp = 0
        self.event_counts = [0] * 256  # by event type; read by metrics
        self.event_bytes = [0] * 256
        self.heartbeats = {ev.HEARTBEAT_LOG_EVENT: 0, ev.HEARTBEAT_LOG_EVENT_V2: 0}  # received (never stored)
        self._framing = _Framing(seq=1)  # the dump's replies follow the client's packet 0

    @property
    def inside_group(self) -> bool:
        return self._groups.inside_group

    def process(self, payloads: list[memoryview]) -> list[Segment]:
        """The general path: one payload (``00 | event``, ERR or EOF) at a time."""
        segments: list[Segment] = []
        current: Segment | None = None
        for payload in payloads:
            current = self._one(payload, segments, current)
        return segments

    def receive(self, data: bytes | bytearray) -> list[Segment]:
        """The hot path: raw bytes of the dump stream in, storage operations out.

        Frames packets itself (one pass over the buffer, no object per packet) and handles
        the common event inline: sequence id, header, CRC32 (one call over the whole
        event: a correct trailing CRC gives the constant residue), position, group end.
        Anything unusual goes through ``_one``.  Inside an open group, runs of group content
        go through the compiled loop of _scan.c when it is built: the same checks, in C."""
        buf = self._framing.take(data)
        if buf is None:
            return []
        segments: list[Segment] = []
        current: Segment | None = None
        view = memoryview(buf)
        size = len(buf)
        pos = 0
        seq = self._framing.seq
        u32 = _U32_AT.unpack_from
        packet_and_header = _PACKET_AND_HEADER.unpack_from
        crc32 = ev.crc32
        counts, sizes = self.event_counts, self.event_bytes
        ends_group = self._groups.ends_group
        groups = self._groups
        # Hot state in locals; written back to self (and current.size) around every slow call.
        position = self.position
        fast = False  # the first event of a read opens the segment through the general path
        append: Callable[[Any], None] = segments.append  # placeholder: the segment's chunks.append once one is open
        crc_on = self.checksum_alg == ev.CHECKSUM_CRC32
        last_timestamp = self.last_event_timestamp
        compiled_scan = _compiled_scan
        event_packet = EVENT_PACKET
        payload: bytes | memoryview
        while pos + 4 <= size:
            if fast and groups.state and compiled_scan is not None:
                pos, seq, position, run = compiled_scan(buf, pos, seq, position, crc_on, _COMPILED_KINDS,
                                                        counts, sizes)
                if run is not None:
                    append(run)
                if pos + 4 > size:
                    break
                # the event it stopped at (a group end, a misfit or a split packet) is handled below
            if pos + 24 <= size:
                word, status, timestamp, etype, event_length, log_pos, flags = packet_and_header(buf, pos)
            else:
                word, status = u32(buf, pos)[0], -1
            length = word & 0xFFFFFF
            end = pos + 4 + length
            if length == 0xFFFFFF or end > size:
                joined = _join_chunks(buf, pos, seq) if length == 0xFFFFFF else None
                if joined is None:
                    break  # a packet split across reads: the framing keeps its start
                payload, pos, seq = joined
            else:
                if word >> 24 != seq:
                    raise StreamError(f"packet sequence number wrong in the binlog stream: got {word >> 24}, "
                                      f"expected {seq}")
                seq = (seq + 1) & 0xFF
                start = pos + 5
                pos = end
                kind = _KIND[etype] if fast else _GENERAL
                # (a position past 4 GiB never equals log_pos - length: the general path masks it;
                # log_pos 0, an artificial event's, never equals position + length either)
                if (kind and status == event_packet and event_length == length - 1 >= ev.HEADER_LEN
                        and log_pos - event_length == position and not flags & ev.LOG_EVENT_ARTIFICIAL_F):
                    event = view[start:end]
                    if crc_on and crc32(event) != _CRC_RESIDUE:
                        self._bad_checksum(event, etype, log_pos)
                    append(event)
                    position += event_length
                    counts[etype] += 1
                    sizes[etype] += event_length
                    if (kind == _MAY_END_GROUP or groups.state == 0) and ends_group(etype, event):
                        current.committed_end = position  # type: ignore[union-attr]
                        current.last_event_start = position - event_length  # type: ignore[union-attr]
                        last_timestamp = timestamp
                    continue
                payload = view[start - 1 : end]
            # the general path, with the hot state written back first
            self.position, self.last_event_timestamp = position, last_timestamp
            if current is not None:
                current.size = position - current.start
            current = self._one(payload, segments, current)
            position, last_timestamp = self.position, self.last_event_timestamp
            fast = self._fast_path_ok() and current is not None and current.file == self.file
            if current is not None:
                append = current.chunks.append
            crc_on = self.checksum_alg == ev.CHECKSUM_CRC32
        self.position, self.last_event_timestamp = position, last_timestamp
        if current is not None:
            current.size = position - current.start
        self._framing.keep(buf, pos, seq)
        return segments

    def _fast_path_ok(self) -> bool:
        return self._expect_replay is None and self.file is not None

    def _one(self, payload: bytes | memoryview, segments: list[Segment], current: Segment | None) -> Segment | None:
        """Handle one payload the slow, general way; returns the segment now being filled."""
        if payload[0] != EVENT_PACKET:
            self._end_of_stream(payload, segments)
        if len(payload) < 1 + ev.HEADER_LEN:
            raise StreamError(f"truncated event ({len(payload) - 1} bytes) in {self.file} near {self.position}")
        timestamp, etype, _server_id, length, log_pos, flags = _HEADER_AFTER_STATUS.unpack_from(payload, 0)
        if length != len(payload) - 1:
            raise StreamError(f"event length {length} does not match its packet ({len(payload) - 1} bytes)"
                              f" in {self.file} near {self.position}")
        event = payload[1:]
        checked = self.checksum_alg if etype != ev.FORMAT_DESCRIPTION_EVENT else event[-5]
        if checked == ev.CHECKSUM_CRC32 and ev.crc32(event) != _CRC_RESIDUE:
            self._bad_checksum(event, etype, log_pos)
        if log_pos == 0 or flags & ev.LOG_EVENT_ARTIFICIAL_F or etype in _HEARTBEATS:
            self._artificial(etype, event, log_pos)
            return current
        start = (log_pos - length) & _U32
        if start != self.position & _U32:
            if start == 4 and etype == ev.FORMAT_DESCRIPTION_EVENT and self._next_file:
                current = self._begin_file(segments, current)
            else:
                self._misplaced(start, etype, log_pos, length)
        if etype == ev.FORMAT_DESCRIPTION_EVENT:
            self.checksum_alg = event[-5]
            self._check_origin(event)
        if self._expect_replay is not None:
            self._check_replay(event)
            self._groups.ends_group(etype, event)
            return current
        if etype == ev.FORMAT_DESCRIPTION_EVENT:
            if self.file is None or self._next_file not in (None, self.file):
                current = self._begin_file(segments, current)
        elif etype == ev.ROTATE_EVENT:
            self._next_file = ev.parse_rotate(event, self.checksum_alg == ev.CHECKSUM_CRC32).next_file
        if current is None or current.file != self.file:
            current = Segment(self.file, self.position)  # type: ignore[arg-type]
            segments.append(current)
        current.chunks.append(event)
        current.size += length
        self.position += length
        self.event_counts[etype] += 1
        self.event_bytes[etype] += length
        if self._groups.ends_group(etype, event):
            current.committed_end = self.position
            current.last_event_start = self.position - length
            self.last_event_timestamp = timestamp
        return current

    # ------------------------------------------------------------ rarer paths

    def _begin_file(self, segments: list[Segment], current: Segment | None) -> Segment:
        if self._groups.inside_group:
            raise StreamError(f"{self.file} ended inside an event group at {self.position}; "
                              f"the primary started {self._next_file} before the group ended")
        name = self._next_file
        if name is None:
            raise StreamError("the primary started a new binlog file without naming it in a ROTATE event")
        self.file = name
        self.position = 4
        self._next_file = None
        segment = Segment(name, 4, new_file=True)
        segments.append(segment)
        return segment

    def _artificial(self, etype: int, event: bytes | memoryview, log_pos: int) -> None:
        if etype == ev.ROTATE_EVENT:
            rotate = ev.parse_rotate(event, self.checksum_alg == ev.CHECKSUM_CRC32)
            if rotate.next_file != self.file:
                self._next_file = rotate.next_file
            elif rotate.position != self.position:
                raise StreamError(f"the primary resumed {self.file} at {rotate.position}, "
                                  f"but the relay asked for {self.position}")
        elif etype == ev.FORMAT_DESCRIPTION_EVENT:
            self.checksum_alg = event[-5]  # re-sent FDE of a dump that starts past offset 4
            self._check_origin(event)
        elif etype in _HEARTBEATS:
            self.primary_position = ev.parse_heartbeat(event, self.checksum_alg)
            self.heartbeats[etype] += 1

    def _check_origin(self, event: bytes | memoryview) -> None:
        """A stored history is the history of the server that wrote it, whichever server (the
        primary, a relay of it) sends it: the resumed file's FDE names the same writer."""
        expected, self._expect_origin = self._expect_origin, None
        if expected is None:
            return
        writer = int.from_bytes(event[5:9], "little")
        if writer != expected:
            raise StreamError(
                f"{self.file} was written by server_id {expected}, but the upstream's {self.file} by server_id "
                f"{writer}: {MIXED_HISTORIES}")

    def _check_replay(self, event: bytes | memoryview) -> None:
        stored = self._expect_replay
        assert stored is not None
        self._expect_replay = None
        if not _same_event(stored, event):
            raise StreamError(
                f"the primary's binlog history does not match the stored files: the event at "
                f"{self.file}:{self.position} differs from the stored copy: {MIXED_HISTORIES}")
        self.position += len(event)

    def _misplaced(self, start: int, etype: int, log_pos: int, length: int) -> None:
        raise StreamError(
            f"event {ev.event_name(etype)} (log_pos {log_pos}, length {length}) starts at "
            f"{self.file}:{start}, but the stored file ends at {self.position}: refusing to store it "
            "at a different offset than on the primary")

    def _bad_checksum(self, event: bytes | memoryview, etype: int, log_pos: int) -> None:
        # A FDE checksummed with BINLOG_IN_USE cleared is fine (docs/protocol.md 5.3).
        if etype == ev.FORMAT_DESCRIPTION_EVENT and ev.checksum_matches(event):
            return
        raise StreamError(f"event {ev.event_name(etype)} ending at {self.file}:{log_pos} failed its CRC32 "
                          "check: the binlog or the network corrupted it")

    def _end_of_stream(self, payload: bytes | memoryview, segments: list[Segment]) -> None:
        if payload[0] == ERR_PACKET:
            error = parse_err(payload)
            raise error
        if is_eof(payload):
            raise UpstreamEnded("the primary ended the binlog dump (EOF)", segments)
        raise StreamError(f"unexpected packet 0x{payload[0]:02x} in the binlog stream")


def _same_event(stored: bytes, received: bytes | memoryview) -> bool:
    if len(stored) != len(received):
        return False
    if stored[4] == ev.FORMAT_DESCRIPTION_EVENT:
        # The BINLOG_IN_USE flag is the one byte a primary may change in a stored event.
        mask = ev.FLAGS_OFFSET
        return (stored[:mask] == received[:mask] and stored[mask + 1 :] == received[mask + 1 :]
                and (stored[mask] | 1) == (received[mask] | 1))
    return stored == received


__all__ = ["IngestStream", "ResumePoint", "Segment", "ServerError", "StreamError", "UpstreamEnded"]

"""The upstream dump stream, sans-IO: packets in, storage operations out.

``DumpStream.process`` takes the payloads of a COM_BINLOG_DUMP stream (each ``00 |
event``, or an ERR/EOF) and turns them into ``Segment`` operations: bytes to append
to a named file at a given offset, and how far the committed end may move.  It checks
every event's CRC32 and that it starts exactly where the stored file ends, recognises
the artificial events a primary sends (fake ROTATE, the re-sent FDE, heartbeats), which
are never stored, and follows the primary's file rotations.

This is the relay's hot path: per event it unpacks the 19-byte header, checks the
CRC with zlib over the whole event, and slices a memoryview; it never copies bodies.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from ..protocol.packets import is_eof, parse_err, ServerError
from . import events as ev
from .groups import GroupTracker

_HEADER_AFTER_STATUS = struct.Struct("<xIBIIIH")  # the 19-byte header behind the 00 status byte
_CRC = struct.Struct("<I")
_U32 = 0xFFFFFFFF


class StreamError(Exception):
    """The upstream sent something the relay must not store; ingest stops with this message."""


class UpstreamEnded(Exception):
    """The primary ended the dump with EOF (it is shutting down or killed the dump thread)."""


@dataclass
class Segment:
    """Append ``chunks`` to ``file`` at ``start``; then the committed end is ``committed_end``
    (None: no group ended inside this segment).  ``new_file``: create the file first."""

    file: str
    start: int
    chunks: list[memoryview] = field(default_factory=list)
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

    @property
    def request_position(self) -> int:
        return self.position - len(self.last_event) if self.last_event else self.position


class DumpStream:
    def __init__(self, resume: ResumePoint, checksum_alg: int) -> None:
        self.file = resume.file
        self.position = resume.request_position
        self._expect_replay = resume.last_event
        self.checksum_alg = checksum_alg  # of the stream right now: negotiated, then per FDE
        self._next_file: str | None = None
        self._groups = GroupTracker()
        self.primary_position: tuple[str, int] | None = None  # from heartbeats
        self.last_event_timestamp = 0
        self.events_by_type: dict[int, list[int]] = {}  # type -> [count, bytes]; read by metrics

    @property
    def inside_group(self) -> bool:
        return self._groups.inside_group

    def process(self, payloads: list[memoryview]) -> list[Segment]:
        segments: list[Segment] = []
        current: Segment | None = None
        header = _HEADER_AFTER_STATUS.unpack_from
        crc32 = zlib.crc32
        crc = _CRC.unpack_from
        ends_group = self._groups.ends_group
        counts = self.events_by_type
        for payload in payloads:
            if payload[0] != 0:
                self._end_of_stream(payload)
            timestamp, etype, _server_id, length, log_pos, flags = header(payload, 0)
            if length != len(payload) - 1:
                raise StreamError(f"event length {length} does not match its packet ({len(payload) - 1} bytes)"
                                  f" in {self.file} near {self.position}")
            event = payload[1:]
            checked = self.checksum_alg if etype != ev.FORMAT_DESCRIPTION_EVENT else event[-5]
            if checked == ev.CHECKSUM_CRC32 and crc32(event[:-4]) != crc(event, length - 4)[0]:
                self._bad_checksum(event, etype, log_pos)
            if log_pos == 0 or flags & ev.LOG_EVENT_ARTIFICIAL_F or etype == ev.HEARTBEAT_LOG_EVENT:
                self._artificial(etype, event, log_pos)
                continue
            start = (log_pos - length) & _U32
            if start != self.position & _U32:
                if start == 4 and etype == ev.FORMAT_DESCRIPTION_EVENT and self._next_file:
                    current = self._begin_file(segments, current)
                else:
                    self._misplaced(start, etype, log_pos, length)
            if etype == ev.FORMAT_DESCRIPTION_EVENT:
                self.checksum_alg = event[-5]
            if self._expect_replay is not None:
                self._check_replay(event)
                ends_group(etype, event)
                continue
            if etype == ev.FORMAT_DESCRIPTION_EVENT:
                if self.file is None or self._next_file not in (None, self.file):
                    current = self._begin_file(segments, current)
            elif etype == ev.ROTATE_EVENT:
                self._next_file = ev.parse_rotate(event, self.checksum_alg == ev.CHECKSUM_CRC32).next_file
            if current is None:
                current = Segment(self.file, self.position)  # type: ignore[arg-type]
                segments.append(current)
            current.chunks.append(event)
            current.size += length
            self.position += length
            if ends_group(etype, event):
                current.committed_end = self.position
                current.last_event_start = self.position - length
            self.last_event_timestamp = timestamp
            tally = counts.get(etype)
            if tally is None:
                counts[etype] = [1, length]
            else:
                tally[0] += 1
                tally[1] += length
        return segments

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

    def _artificial(self, etype: int, event: memoryview, log_pos: int) -> None:
        if etype == ev.ROTATE_EVENT:
            rotate = ev.parse_rotate(event, self.checksum_alg == ev.CHECKSUM_CRC32)
            if rotate.next_file != self.file:
                self._next_file = rotate.next_file
            elif rotate.position != self.position:
                raise StreamError(f"the primary resumed {self.file} at {rotate.position}, "
                                  f"but the relay asked for {self.position}")
        elif etype == ev.FORMAT_DESCRIPTION_EVENT:
            self.checksum_alg = event[-5]  # re-sent FDE of a dump that starts past offset 4
        elif etype == ev.HEARTBEAT_LOG_EVENT:
            end = len(event) - (4 if self.checksum_alg == ev.CHECKSUM_CRC32 else 0)
            name = bytes(event[ev.HEADER_LEN:end]).decode("utf-8", "replace")
            self.primary_position = (name, log_pos)

    def _check_replay(self, event: memoryview) -> None:
        stored = self._expect_replay
        assert stored is not None
        self._expect_replay = None
        if not _same_event(stored, event):
            raise StreamError(
                f"the primary's binlog history does not match the stored files: the event at "
                f"{self.file}:{self.position} differs from the stored copy. This data_dir was filled "
                "from another primary (or the primary's binlogs were reset); use a new data_dir.")
        self.position += len(event)

    def _misplaced(self, start: int, etype: int, log_pos: int, length: int) -> None:
        raise StreamError(
            f"event {ev.event_name(etype)} (log_pos {log_pos}, length {length}) starts at "
            f"{self.file}:{start}, but the stored file ends at {self.position}: refusing to store it "
            "at a different offset than on the primary")

    def _bad_checksum(self, event: memoryview, etype: int, log_pos: int) -> None:
        # A FDE checksummed with BINLOG_IN_USE cleared is fine (PROTOCOL.md 5.3).
        if etype == ev.FORMAT_DESCRIPTION_EVENT and ev.checksum_matches(event):
            return
        raise StreamError(f"event {ev.event_name(etype)} ending at {self.file}:{log_pos} failed its CRC32 "
                          "check: the binlog or the network corrupted it")

    def _end_of_stream(self, payload: memoryview) -> None:
        if payload[0] == 0xFF:
            error = parse_err(payload)
            raise error
        if is_eof(payload):
            raise UpstreamEnded("the primary ended the binlog dump (EOF)")
        raise StreamError(f"unexpected packet 0x{payload[0]:02x} in the binlog stream")


def _same_event(stored: bytes, received: memoryview) -> bool:
    if len(stored) != len(received):
        return False
    if stored[4] == ev.FORMAT_DESCRIPTION_EVENT:
        # The BINLOG_IN_USE flag is the one byte a primary may change in a stored event.
        mask = ev.FLAGS_OFFSET
        return (stored[:mask] == received[:mask] and stored[mask + 1 :] == received[mask + 1 :]
                and (stored[mask] | 1) == (received[mask] | 1))
    return stored == received


__all__ = ["DumpStream", "ResumePoint", "Segment", "ServerError", "StreamError", "UpstreamEnded"]

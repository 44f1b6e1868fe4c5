"""SHOW BINLOG EVENTS over one stored binlog file (sans-IO): the rows a primary answers, read
from the file's bytes (a buffer: the relay hands it a mapping of the file, so only the pages read
are touched).

The walk is MariaDB's ``mysql_show_binlog_events`` (sql_repl.cc), so that the same statement
gets the same answer, the same error and the rows sent before an error:

- A position past the file's size is refused before anything is read.  The first events are
  read up to the position (the FORMAT_DESCRIPTION, and one more when the position is past it).
- In a file with checksums the position is taken as it is and only the first event read from it
  has its CRC32 checked: a position inside an event reads garbage that fails the check ("Wrong
  offset or I/O error").  Without checksums the events' lengths are added up from there and a
  position between two event starts is refused ("Invalid input pos specified...").
- ``LIMIT offset, count`` reads the events before the offset (their headers) without showing
  them and stops after the count; ``LIMIT 0`` (and ``LIMIT n, 0``) shows the first event, as
  MariaDB's loop sends an event before it compares the count.
- An event that cannot be read ends the rows with "Wrong offset or I/O error" after the rows
  shown before it.

Rows come in batches (``next_rows``) so that the caller can send each, and read a file of
gigabytes with bounded memory; ``done`` and ``error`` say how the walk ended.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..binlog import events as ev
from .eventinfo import EventInfoError, FileFormat, describe, file_format, readable

WRONG_OFFSET = "Wrong offset or I/O error"
INVALID_INPUT_POS = "Invalid input pos specified please provide valid one."
NO_EVENT_LENGTH = "Could not read event_length"
BAD_MAGIC = "Binlog has bad magic number;  It's not a binary log file that can be used by this version of MySQL"
NO_DECRYPTION = "Could not initialize decryption of binlog."
DECRYPTION_FAILED = "Error starting decryption"


def position_past_end(position: int, size: int) -> str:
    return f"Invalid pos specified. Requested from pos:{position} is greater than actual file size:{size}"


@dataclass(frozen=True)
class EventRow:
    log_name: str
    pos: int
    event_type: str
    server_id: int
    end_log_pos: int
    info: bytes

    def values(self) -> tuple[str, int, str, int, int, bytes]:
        return self.log_name, self.pos, self.event_type, self.server_id, self.end_log_pos, self.info


class _Unreadable(Exception):
    """An event the walk cannot read: the rows end with the primary's error text."""


# MariaDB starts a file with a format description of MySQL 4.0 (binlog version 3) until it
# has read the file's own: no checksums, the 4.0 event types.
_BEFORE_FDE = FileFormat(mariadb=True, checksummed=False, post_header_lengths=bytes(13))


class EventLister:
    """One SHOW BINLOG EVENTS walk over the file ``name`` whose bytes are ``data``."""

    def __init__(self, name: str, data: bytes | bytearray | memoryview, position: int = 0, offset: int = 0,
                 count: int | None = None) -> None:
        self.name = name
        self._data = memoryview(data)
        self._size = len(self._data)
        self._requested = position
        if count == 0:  # unit->set_limit: a zero count drops the offset
            offset = 0
        self._offset = offset
        self._end = None if count is None else offset + count
        self._events_read = 0  # the offset's skipped ones included
        self._at: int | None = None  # where the next event starts; None before the walk started
        self._check_next = False
        self._format = _BEFORE_FDE
        self.done = False
        self.error: str | None = None

    @property
    def position(self) -> int:
        """Where the walk stands in the file (what it has read lies below)."""
        return self._at or 0

    def next_rows(self, max_rows: int = 1000, max_events: int = 100_000) -> list[EventRow]:
        """The next rows, at most ``max_rows`` of them and ``max_events`` events read; [] once
        ``done`` (then ``error`` is the primary's message if the walk failed)."""
        rows: list[EventRow] = []
        if self.done:
            return rows
        try:
            if self._at is None:
                self._at = self._start()
            for _ in range(max_events):
                event = self._read(self._at, check=self._check_next)
                if event is None:
                    self.done = True
                    break
                self._check_next = False
                row = self._advance(event)
                if row is not None:
                    rows.append(row)
                if self._end is not None and self._events_read >= self._end:
                    self.done = True
                if self.done or len(rows) >= max_rows:
                    break
        except _Unreadable as exc:
            self.done, self.error = True, str(exc)
        return rows

    def close(self) -> None:
        """Let go of the bytes (a mapping can only be closed once no view of it is left)."""
        self._data.release()
        self.done = True

    # ------------------------------------------------------------ the walk

    def _advance(self, event: memoryview) -> EventRow | None:
        """Move past ``event``; its row unless it is one the offset skips."""
        at = self._at
        assert at is not None
        event_type = event[4]
        if event_type == ev.FORMAT_DESCRIPTION_EVENT:
            self._format = self._file_format(event)
        row = None
        if self._events_read >= self._offset:
            try:
                name, info = describe(event, self._format)
            except EventInfoError:
                raise _Unreadable(WRONG_OFFSET) from None
            _, _, server_id, _, log_pos, _ = ev.HEADER.unpack_from(event)
            row = EventRow(self.name, at, name, server_id, log_pos, info)
        self._at = at + len(event)
        self._events_read += 1
        if event_type == ev.START_ENCRYPTION_EVENT:
            # the relay holds no encryption keys: the rows end where a primary without its key
            # ends them, after this event's row
            self.done, self.error = True, DECRYPTION_FAILED
        return row

    def _start(self) -> int:
        """Check the requested position, read the file's first events, and say where the rows
        begin (sql_repl.cc, before the loop over the events)."""
        if self._requested > self._size:
            raise _Unreadable(position_past_end(self._requested, self._size))
        if bytes(self._data[:4]) != ev.BINLOG_MAGIC:
            raise _Unreadable(BAD_MAGIC)
        position = max(4, self._requested)
        scanned = 4
        while scanned < position:
            event = self._read(scanned, check=False)
            if event is None:
                raise _Unreadable(WRONG_OFFSET)
            scanned += len(event)
            if event[4] != ev.FORMAT_DESCRIPTION_EVENT:
                if event[4] == ev.START_ENCRYPTION_EVENT:
                    raise _Unreadable(NO_DECRYPTION)
                break
            self._format = self._file_format(event)
        if self._requested <= 4:
            return 4
        if self._format.checksummed:
            self._check_next = True  # a position inside an event fails this check
            return position
        return self._walk_lengths(scanned, position)

    def _walk_lengths(self, start: int, position: int) -> int:
        """Without checksums: add up the event lengths from ``start``; ``position`` must be where
        one event ends."""
        at = start
        while at < position:
            if at + ev.HEADER_LEN > self._size:
                raise _Unreadable(NO_EVENT_LENGTH)
            length = struct.unpack_from("<I", self._data, at + 9)[0]
            if length < ev.HEADER_LEN:
                raise _Unreadable(INVALID_INPUT_POS)
            at += length
        if at > position:
            raise _Unreadable(INVALID_INPUT_POS)
        return at

    def _read(self, at: int, check: bool) -> memoryview | None:
        """The whole event at ``at``; None at the file's end (Log_event::read_log_event)."""
        if at == self._size:
            return None
        if at + ev.HEADER_LEN > self._size:
            raise _Unreadable(WRONG_OFFSET)  # a header cut short
        length = struct.unpack_from("<I", self._data, at + 9)[0]
        if length < ev.HEADER_LEN or at + length > self._size:
            raise _Unreadable(WRONG_OFFSET)
        event = self._data[at:at + length]
        event_type = event[4]
        checksummed = self._format.checksummed or event_type == ev.FORMAT_DESCRIPTION_EVENT
        if check and checksummed and not ev.checksum_matches(event):
            raise _Unreadable(WRONG_OFFSET)
        if event_type != ev.FORMAT_DESCRIPTION_EVENT and (
                event_type > self._format.event_types or not readable(event_type, self._format)):
            raise _Unreadable(WRONG_OFFSET)
        return event

    @staticmethod
    def _file_format(event: memoryview) -> FileFormat:
        try:
            return file_format(event)
        except ev.BinlogFormatError:
            raise _Unreadable(WRONG_OFFSET) from None

"""Reading the stored binlog forward for one dump: from (file, position), the committed events in
file order, the start of each next file, or "nothing yet".

The reader knows the relay log's file order and committed end and checks where a dump may
start; it never waits and never sends.  Its only I/O is reading the stored files: the caller
(downstream/dump.py) decides when to poll again and what to send.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from ..binlog import events as ev
from ..binlog.names import file_number, next_file_name
from ..errors import Refusal
from .files import IN_USE_FLAG_OFFSET
from .relaylog import RelayLog
from .scan import BLOCK_SIZE, read_batch
from .shelf import ShelfCopy

# More than a fault maps around the page it needs: Linux maps neighbours already cached (64 KiB by
# default), and all of a large page-cache folio (up to 2 MiB on x86-64).
_FAULT_AROUND = 4 << 20
# Entering a file reads its format description only (a few hundred bytes; a larger one is read
# whole): a full block cost every dump start and rotation the split of a megabyte of events.
_FDE_BLOCK = 4096


class StartRefused(Refusal):
    """The dump cannot start where the client asked: the ERR 1236 text a primary sends."""


class StoredFileDamaged(Refusal):
    """A stored event fails its CRC32 or is cut short: never sent as data (the text names the
    file and the position, as a primary's read error does)."""

    def __init__(self, what: str, file: str, position: int) -> None:
        super().__init__(_read_error(what, file, position))
        self.file = file
        self.position = position


class FileGone(Refusal):
    """The file a dump was reading left the history under it (purged): the primary's ERR 1236."""

    def __init__(self, file: str, position: int) -> None:
        super().__init__(_read_error("could not find next log", file, position))


def _read_error(what: str, file: str, position: int) -> str:
    return (f"{what}; the first event '{file}' at {position}, the last event read from '{file}' at {position}, "
            f"the last byte read from '{file}' at {position}.")


@dataclass(frozen=True)
class FileStart:
    """The dump enters ``file``: the client gets its fake ROTATE and ``fde`` before its events."""

    file: str
    position: int  # where the client starts in it: 4, or what it asked for in the first file
    fde: bytes
    first: bool


@dataclass(frozen=True)
class Available:
    """Committed events of the current file are readable up to ``end``."""

    end: int


@dataclass(frozen=True)
class NothingYet:
    """Everything committed has been read; a commit after ``seen`` (file, end) brings more."""

    seen: tuple[str, int] | None


@dataclass(frozen=True)
class FetchArchived:
    """``file`` is only in the archive: the dump fetches it back (relay_log.shelf), then polls again."""

    file: str


@dataclass(frozen=True)
class FetchGoesOn:
    """The current file is an archived one still being fetched back: every byte of ``copy`` up to
    ``position`` is read; the dump waits for more of it, then polls again."""

    copy: ShelfCopy
    position: int


Step = FileStart | Available | NothingYet | FetchArchived | FetchGoesOn


class TailReader:
    """One dump's read position in the stored files."""

    def __init__(self, relay_log: RelayLog, file: str, position: int) -> None:
        self.relay_log = relay_log
        self.file = file
        # the start as the client named it: a primary's refusal of a start names '.' for no file
        self._named = file or "."
        self.position = position
        self._stored: BinaryIO | None = None
        # A finished file is read through a mapping of it, not copied into the dump's buffer:
        # at a gigabyte a second that copy was a sixth of the relay's CPU.
        self._map: mmap.mmap | None = None
        self._unmapped_below = 0  # pages below this were handed back (MADV_DONTNEED) once sent
        self._opened: FileStart | None = None  # the file just entered, not yet handed out
        self.checksummed = False  # the current file's events end in a CRC32, checked as they are read
        self._pinned: str | None = None  # the archived file whose fetched copy is open
        self._held: str | None = None  # the archived file fetched for the dump, until it enters it
        self._copy: ShelfCopy | None = None  # ... while it is still being fetched

    def first_file_pending(self) -> NothingYet | FetchArchived | None:
        """A relay that just started, or is one rotation behind its primary, may be asked for a
        file it does not have yet but soon will, or whose first event it has not committed yet: a
        blocking dump waits for it (ERR 1236 would stop a replica's IO thread for good)."""
        if not self.file and self.relay_log.shelf is not None:
            served = self.relay_log.served_files()
            if served and self.relay_log.archived_only(served[0]):
                self.file = served[0]  # a dump that names no file starts at the oldest, archived or not
        if self.file and self.relay_log.archived_only(self.file):
            if not 4 <= self.position <= self.relay_log.file_end(self.file):
                return None  # start() refuses it as a primary does, with nothing fetched
            copy = self.relay_log.shelf.entry(self.file)  # type: ignore[union-attr]
            # its first events, and those at the start asked for, fetched back (or being fetched)
            wanted = copy is None or not copy.complete and copy.ready <= self.position
            return FetchArchived(self.file) if wanted else None
        files = self.relay_log.files
        committed = self.relay_log.committed
        if self.relay_log.repairs_pending():  # a file a power cut damaged is fetched again first
            return NothingYet(committed)
        if self.relay_log.tail_may_be_lost() and self.past_the_stored_end():
            return NothingYet(committed)
        if files and self.file == files[-1] and committed == (self.file, 4):
            return NothingYet(committed)  # created, its FORMAT_DESCRIPTION not committed yet (or lost at a power cut)
        if files and (not self.file or self.file in files or self.file != next_file_name(files[-1])):
            return None
        return NothingYet(committed)

    def past_the_stored_end(self) -> bool:
        """The start asked for is further on than the stored history: a later file of the same
        name, or a position past the newest file's committed end."""
        files, committed = self.relay_log.files, self.relay_log.committed
        if not files or committed is None or not self.file:
            return False
        newest = files[-1]
        if self.file == newest:
            return self.position > committed[1]
        asked, stored = file_number(self.file), file_number(newest)
        return asked is not None and stored is not None and asked > stored and \
            self.file.rpartition(".")[0] == newest.rpartition(".")[0]

    def start(self) -> None:
        """Check the requested start and open its file; raises StartRefused as a primary would."""
        files = self.relay_log.served_files()
        file = self.file or (files[0] if files else "")
        if file not in files:
            raise StartRefused("Could not find first log file name in binary log index file")
        self._check_position(file, self.position)
        self._enter(file, self.position, first=True)

    def poll(self) -> Step:
        """What the dump can do next.  The committed end and whether ``file`` is still the
        newest are read together, with no await between: a file no longer current was finished
        before its end was read."""
        if self._opened is not None:
            opened, self._opened = self._opened, None
            return opened
        # a finished file's end is its size when it was mapped (a stat per block cost a tenth)
        if self._copy is not None:
            end = self._copy.end()
            if self._copy.complete:  # fetched whole meanwhile: its mapping holds it all
                self._copy = None
        elif self._map is not None:
            end = len(self._map)
        else:
            try:
                end = self.relay_log.file_end(self.file)
            except FileNotFoundError:  # purged under the dump (retention spares a file a dump reads)
                raise FileGone(self.file, self.position) from None
        if self.position < end:
            return Available(end)
        if self._copy is not None:
            return FetchGoesOn(self._copy, self.position)
        committed = self.relay_log.committed
        if committed is not None and committed[0] != self.file:
            files = self.relay_log.served_files()
            if self.file not in files:  # purged under the dump (retention spares a file a dump reads)
                raise FileGone(self.file, self.position)
            index = files.index(self.file) + 1
            if index < len(files) and committed != (files[index], 4):  # the next file's FDE is committed
                if self.relay_log.read_path(files[index]) is None:
                    return FetchArchived(files[index])
                self._enter(files[index], 4, first=False)
                return self.poll()
        return NothingYet(committed)

    def read_events(self, end: int, block_size: int = BLOCK_SIZE) -> list[memoryview]:
        """The whole events from the position within one block (at least one if one ends before
        ``end``), and moves past them.  Raises StoredFileDamaged for an event that fails its CRC32,
        or that the committed end or the end of a finished file cuts short (the events before it
        are returned first, by the call before)."""
        try:
            events = read_batch(self._file(), self.position, end, block_size)
        except ev.BinlogFormatError as bogus:
            raise StoredFileDamaged(f"{READ_BOGUS} ({bogus})", self.file, self.position) from None
        if not events:
            raise StoredFileDamaged("the stored file ends inside an event", self.file, self.position)
        if self.checksummed:
            for index, event in enumerate(events):
                if not ev.checksum_matches(event):
                    if index == 0:
                        raise StoredFileDamaged("event read from binlog did not pass crc check", self.file,
                                                self.position)
                    events = events[:index]
                    break
        self.position += sum(map(len, events))
        return events

    def event_length_at(self, position: int) -> int:
        """The length the header at ``position`` gives (for reading exactly that event)."""
        header = os.pread(self._file().fileno(), ev.HEADER_LEN, position)
        if len(header) < ev.HEADER_LEN:
            raise StoredFileDamaged("the stored file ends inside an event", self.file, position)
        return int.from_bytes(header[9:13], "little")

    def read_block(self, buffer: memoryview, end: int) -> int:
        """Fill ``buffer`` from the position (up to ``end``) without moving: the caller frames what
        fits and calls ``advance``."""
        return os.preadv(self._file().fileno(), [buffer[: min(len(buffer), end - self.position)]], self.position)

    def read_block_at(self, buffer: memoryview, position: int, end: int) -> int:
        """Fill ``buffer`` from ``position`` (up to ``end``), the read position unchanged."""
        return os.preadv(self._file().fileno(), [buffer[: min(len(buffer), end - position)]], position)

    def mapped_block(self, end: int, size: int) -> memoryview | None:
        """Up to ``size`` bytes from the position (up to ``end``) of a finished file, without
        copying them; None for the file still being written (``read_block`` reads it)."""
        if self._map is None or end > len(self._map):
            return None
        return memoryview(self._map)[self.position : min(end, self.position + size)]

    def advance(self, position: int) -> None:
        self.position = position
        self.hand_back()

    def hand_back(self) -> None:
        """Unmap the mapped pages around the position (they stay in the page cache): the mapping
        of a file of gigabytes would otherwise count in the relay's RSS as it is read.  Behind it,
        what was sent; ahead, the rest of the large folio the last fault mapped whole (up to
        2 MiB), which a hundred dumps waiting for their turn, or streaming an event larger than a
        block, would otherwise hold (relay RSS at 100 clients 133-183 MiB -> 106-109)."""
        if self._map is None:
            return
        done = self.position & ~(mmap.PAGESIZE - 1)
        # from a little before what was handed back: a fault also maps pages behind the position
        start = max(0, self._unmapped_below - _FAULT_AROUND) & ~(mmap.PAGESIZE - 1)
        self._map.madvise(mmap.MADV_DONTNEED, start, min(len(self._map), done + _FAULT_AROUND) - start)
        self._unmapped_below = done  # the position only moves forward

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of it is still held: it closes when that goes
                pass
            self._map = None
        if self._stored is not None:
            self._stored.close()
            self._stored = None
        if self._pinned is not None and self.relay_log.shelf is not None:
            self.relay_log.shelf.done_reading(self._pinned)
        self._pinned = None
        self._copy = None
        self._release_held()

    def _file(self) -> BinaryIO:
        assert self._stored is not None, "read before start()"
        return self._stored

    def hold(self, file: str) -> None:
        """Keeps the copy of the archived ``file``, just fetched for the dump, until the dump enters
        it: called before the dump's next checkpoint (ArchiveShelf.begin)."""
        shelf = self.relay_log.shelf
        if shelf is not None and self._held != file:
            shelf.reading(file)
            self._release_held()
            self._held = file

    def _release_held(self) -> None:
        if self._held is not None and self.relay_log.shelf is not None:
            self.relay_log.shelf.done_reading(self._held)
        self._held = None

    def _enter(self, file: str, position: int, first: bool) -> None:
        path = self.relay_log.read_path(file)
        if path is None:
            self.close()
            raise StoredFileDamaged("the archived file was not fetched back", file, 4)
        shelf = self.relay_log.shelf if self.relay_log.archived_only(file) else None
        if shelf is not None:
            shelf.reading(file)  # its copy stays while it is read (pinned before close lets the last hold go)
        self.close()
        end = path.stat().st_size
        if shelf is not None:
            self._pinned = file
            copy = shelf.entry(file)
            if copy is not None and not copy.complete:
                self._copy, end = copy, copy.end()  # read as it grows, as the file ingest writes
        self._stored = open(path, "rb")  # noqa: SIM115 - held across polls, closed by close()
        first_events = read_batch(self._stored, 4, end, _FDE_BLOCK)
        if not first_events or first_events[0][4] != ev.FORMAT_DESCRIPTION_EVENT:
            raise StoredFileDamaged("Failed to find format descriptor event in start of binlog", file, 4)
        fde = bytes(first_events[0])
        self.checksummed = ev.parse_format_description(fde).checksum_alg == ev.CHECKSUM_CRC32
        if self.checksummed and not ev.checksum_matches(fde):
            raise StoredFileDamaged("event read from binlog did not pass crc check", file, 4)
        self._opened = FileStart(file, position, fde, first)
        self.file = file
        # A finished file's bytes no longer change, nor do those of a copy up to its end (the copy has
        # its whole size from the start, ArchivedFileReader.copy_to): both are read through a mapping.
        if file != self.relay_log.files[-1]:
            self._map_file()
        self.position = max(position, 4 + len(fde)) if position == 4 else position

    def _map_file(self) -> None:
        self._map = mmap.mmap(self._file().fileno(), 0, access=mmap.ACCESS_READ)
        self._map.madvise(mmap.MADV_SEQUENTIAL)
        self._unmapped_below = 0

    def _check_position(self, file: str, position: int) -> None:
        end = self.relay_log.file_end(file)
        if position < 4 or position > end:
            named = self._named
            raise StartRefused(f"Client requested master to start replication from impossible position; the first "
                               f"event '{named}' at {position}, the last event read from '{named}' at 4, the last "
                               f"byte read from '{named}' at 4.")
        if position in (4, end):
            return
        path = self.relay_log.read_path(file)
        if path is None:
            raise StoredFileDamaged("the archived file was not fetched back", file, 4)
        with open(path, "rb") as stored:
            read_at = _as_the_primary_has_it(stored.fileno(), end, still_open=file == self.relay_log.files[-1])
            if _event_starts_at(read_at(position, ev.HEADER_LEN), position):
                return
            what, last_event, last_byte = primary_read_failure(read_at, position, end)
        raise StartRefused(f"{what}; the first event '{self._named}' at {position}, the last event read from "
                           f"'{file}' at {last_event}, the last byte read from '{file}' at {last_byte}.")


def _as_the_primary_has_it(fd: int, end: int, still_open: bool) -> Callable[[int, int], bytes]:
    """read_at(offset, size) of a stored file's first ``end`` bytes, as the primary's copy holds them:
    the primary's file still open has its FDE's BINLOG_IN_USE flag set (its dump sends the FDE with
    the flag cleared, and the relay stores it so)."""

    def read_at(offset: int, size: int) -> bytes:
        data = os.pread(fd, min(size, end - offset), offset)
        if still_open and offset <= IN_USE_FLAG_OFFSET < offset + len(data):
            flagged = bytearray(data)
            flagged[IN_USE_FLAG_OFFSET - offset] |= ev.LOG_EVENT_BINLOG_IN_USE_F
            return bytes(flagged)
        return data

    return read_at


def _event_starts_at(header: bytes, position: int) -> bool:
    if len(header) < ev.HEADER_LEN:
        return False
    parsed = ev.EventHeader.parse(header)
    return parsed.event_length >= ev.HEADER_LEN and parsed.start_pos & 0xFFFFFFFF == position & 0xFFFFFFFF


# What a MariaDB dump thread says when a read fails (sql_repl.cc, set_read_error)
READ_BOGUS = "bogus data in log event"
READ_TRUNCATED = "binlog truncated in the middle of event; consider out of disk space on master"
READ_TOO_LARGE = "log event entry exceeded max_allowed_packet; Increase max_allowed_packet on master"
DUMP_MAX_PACKET = 1 << 30  # a dump thread's max_allowed_packet (MAX_MAX_ALLOWED_PACKET): a longer event is refused
_WALK_LIMIT = 100_000


def primary_read_failure(read_at: Callable[[int, int], bytes], position: int, end: int) -> tuple[str, int, int]:
    """What a MariaDB primary reports for a dump started at ``position``, not the start of an event,
    in a file of ``end`` bytes: (its message, where its last read began, where it stopped).  Its
    dump thread reads an event header there (Log_event::read_log_event) and, while the length it
    finds fits the file, sends those bytes as an event and reads on from their end: it checks no
    CRC32 (master_verify_checksum is off by default).  The relay sends none of those bytes; where
    the walk lands on the end of the file, or goes on too long, a primary would send them all
    without an error, and the relay says the bytes are bogus."""
    at = position
    for _ in range(_WALK_LIMIT):
        if at >= end:
            break
        header = read_at(at, ev.HEADER_LEN)
        if len(header) < ev.HEADER_LEN:
            return READ_TRUNCATED, at, at
        length = int.from_bytes(header[9:13], "little")
        if length < ev.HEADER_LEN:
            return READ_BOGUS, at, at + ev.HEADER_LEN
        if length > DUMP_MAX_PACKET:
            return READ_TOO_LARGE, at, at + ev.HEADER_LEN
        if at + length > end:
            return READ_TRUNCATED, at, at + ev.HEADER_LEN
        at += length
    return READ_BOGUS, position, position

"""SHOW BINLOG EVENTS over the stored files (the trio shell): which file, its bytes, and the walk
of replication/showevents.py run in a worker thread a batch at a time.

A file is read through a mapping of it, up to where readers may read (the committed end of the
file being written), so a LIMIT touches only the pages it reads.  Each batch (at most
``BATCH_ROWS`` rows or ``BATCH_EVENTS`` events) is walked in a worker thread, because a batch
may fault in megabytes from disk, and is sent before the next one is read: a statement over a
whole file of gigabytes holds one batch of rows at a time, never blocks the event loop, and goes
as fast as its client reads.  The pages behind the walk are handed back (MADV_DONTNEED), as a
dump hands back what it sent.  A file only the archive holds is fetched back first
(relay_log.shelf), as a dump fetches it.
"""

from __future__ import annotations

import mmap
from collections.abc import AsyncGenerator
from pathlib import Path

import trio

from ..replication.showevents import EventLister
from ..storage.relaylog import RelayLog
from ..storage.shelf import ArchiveReadError
from .queries import BinlogEventsRequest, Error, binlog_events_error

BATCH_ROWS = 2000
BATCH_EVENTS = 200_000

NOT_FOUND = "Could not find target log"
NOT_OPENED = "Could not open log file"


class _MappedFile:
    """The first ``size`` bytes of a stored file, mapped read-only."""

    def __init__(self, path: Path, size: int) -> None:
        self.map: mmap.mmap | None = None
        if size > 0:
            with open(path, "rb") as stored:
                self.map = mmap.mmap(stored.fileno(), size, access=mmap.ACCESS_READ)
        self.data = memoryview(self.map if self.map is not None else b"")
        self._released = 0

    def release_below(self, position: int) -> None:
        """Hand back the pages the walk has passed: a mapped file of gigabytes would otherwise
        count in the relay's RSS as it is read."""
        done = position & ~(mmap.PAGESIZE - 1)
        if self.map is not None and done > self._released:
            self.map.madvise(mmap.MADV_DONTNEED, self._released, done - self._released)
            self._released = done

    def close(self) -> None:
        self.data.release()
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # a view of it is still held: it closes when that goes
                pass


def _next_batch(lister: EventLister, mapped: _MappedFile) -> list[tuple[object, ...]]:
    rows = lister.next_rows(BATCH_ROWS, BATCH_EVENTS)
    mapped.release_below(lister.position)
    return [row.values() for row in rows]


async def binlog_events(relay_log: RelayLog,
                        request: BinlogEventsRequest) -> AsyncGenerator[list[tuple[object, ...]] | Error, None]:
    """The rows of SHOW BINLOG EVENTS, batch by batch; an Error ends them (queries.StreamedRows)."""
    files = relay_log.served_files()
    name = request.file if request.file is not None else (files[0] if files else None)
    if name is None or name not in files:
        yield binlog_events_error(NOT_FOUND)
        return
    shelf = relay_log.shelf if relay_log.archived_only(name) else None
    if shelf is not None:
        try:
            path = await shelf.fetch(name)
        except ArchiveReadError as exc:
            yield binlog_events_error(f"{NOT_OPENED}: {exc}")
            return
        shelf.reading(name)  # the copy stays while it is read
    else:
        path = relay_log.path(name)
    mapped: _MappedFile | None = None
    lister: EventLister | None = None
    try:
        try:
            mapped = await trio.to_thread.run_sync(_MappedFile, path, relay_log.file_end(name))
        except OSError:
            yield binlog_events_error(NOT_OPENED)
            return
        lister = EventLister(name, mapped.data, request.position, request.offset, request.count)
        while not lister.done:
            rows = await trio.to_thread.run_sync(_next_batch, lister, mapped)
            if rows:
                yield rows
        if lister.error is not None:
            yield binlog_events_error(lister.error)
    finally:
        if lister is not None:
            lister.close()
        if mapped is not None:
            mapped.close()
        if shelf is not None:
            shelf.done_reading(name)

"""Archived files served as if they were local: the shelf of copies fetched back from the archive.

A dump that reaches a file no longer on the local disk but in the archive (older than the oldest
local file) asks the shelf for it: the file is fetched once, frame by frame (ranged GETs streamed
several at once, each frame verified: memory stays at a frame per GET whatever the file's size),
into ``data_dir/archive-cache/``, and read from there.  The copy is read as it grows: its bytes up
to ``ready`` (the end of the whole events fetched from the start of the file) never change, and a
dump serves them while the rest arrives, as it serves the file being written by ingest; a
client's first event does not wait for the whole file.  Dumps asking for the same file share one
fetch.  At most ``keep`` whole copies stay, the least recently used leaving first, never one a
dump reads; the shelf is emptied at start (a copy is only ever a cache).  A fetch stops at its
next frame once nobody reads or waits for it (its clients went away).

What fetches is given (``fetch_file``, blocking, run in a worker thread), so storage does not know
the object store: the relay's wiring hands it the archiver's.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from ..errors import Refusal, RelayError
from ..trio_run import run_abandonable
from .scan import whole_events_end

if TYPE_CHECKING:  # the archive's code is loaded by a relay with an archive only (relay/app.py)
    from ..archive.objects import ArchivedFile

log = logging.getLogger(__name__)

CACHE_DIR = "archive-cache"
DEFAULT_KEEP = 4
MAGIC_END = 4  # a binlog file's events start after its magic number

# fetch_file(name, target, stop, progress): progress(n) says bytes [0, n) of target are written.
FetchFile = Callable[[str, Path, Callable[[], bool], Callable[[int], None]], None]


class ArchiveReadError(Refusal):
    """An archived file could not be fetched back (the store is down, the object is damaged or
    its key is missing); the dump reading it ends with the primary's error for a binlog it cannot
    read."""


class ShelfCopy:
    """One archived file on the shelf.  While it is fetched, ``path`` is its partial copy, whose
    bytes [0, ready) hold whole events and will not change; once ``complete``, ``path`` is the
    whole copy.  Changed only in the trio thread."""

    def __init__(self, name: str, size: int, partial: Path) -> None:
        self.name = name
        self.size = size
        self.path = partial
        self.ready = 0
        self.complete = False
        self.error: ArchiveReadError | None = None
        self.stop = threading.Event()  # asked by the fetch before each frame
        self.waiting = 0  # tasks waiting for more of it
        self._changed = trio.Event()

    @property
    def readable(self) -> bool:
        """Its first event is there, and it is still wanted: readers may open it."""
        return (self.complete or self.ready > MAGIC_END) and self.error is None and not self.stop.is_set()

    def end(self) -> int:
        """How far a reader may read it now."""
        return self.size if self.complete else self.ready

    async def wait_beyond(self, position: int | None) -> None:
        """Until bytes past ``position`` are ready (None: until it is whole); ArchiveReadError if
        the fetch failed."""
        while True:
            if self.error is not None:
                raise self.error
            if self.complete or (position is not None and self.ready > position):
                return
            await self._changed.wait()

    def changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


class ArchiveShelf:
    def __init__(self, data_dir: Path, archived: Callable[[], Mapping[str, ArchivedFile]], fetch_file: FetchFile,
                 keep: int = DEFAULT_KEEP) -> None:
        self.dir = Path(data_dir) / CACHE_DIR
        self.archived = archived  # every archived file, by name
        self.fetch_file = fetch_file
        self.keep = max(1, keep)
        self._copies: OrderedDict[str, ShelfCopy] = OrderedDict()  # least recently used first
        self._readers: dict[str, int] = {}
        self._fetch_numbers = itertools.count()
        shutil.rmtree(self.dir, ignore_errors=True)

    def names_before(self, first_local: str | None) -> list[str]:
        """The archived files older than the oldest local one, in order: the history's beginning."""
        return sorted(name for name in self.archived() if first_local is None or name < first_local)

    def size(self, name: str) -> int:
        return self.archived()[name].file_size

    def start_state(self, name: str) -> tuple[str, ...] | None:
        """The GTID_LIST at the start of the archived ``name`` (None: not known yet)."""
        archived = self.archived().get(name)
        return archived.start_state if archived is not None else None

    def previous_gtids(self, name: str) -> str | None:
        """The PREVIOUS_GTIDS of the archived MySQL-flavoured ``name`` as text ("" for a file without
        one); None: not known yet."""
        archived = self.archived().get(name)
        if archived is None or archived.start_state is None:
            return None
        return archived.previous_gtids or ""

    def entry(self, name: str) -> ShelfCopy | None:
        """The readable copy of an archived file (whole, or being fetched), if there is one."""
        copy = self._copies.get(name)
        if copy is None or not copy.readable:
            return None
        self._copies.move_to_end(name)
        return copy

    def copy(self, name: str) -> Path | None:
        """Where a reader opens an archived file: its copy, whole or growing (None: not fetched)."""
        copy = self.entry(name)
        return copy.path if copy is not None else None

    def whole_copy(self, name: str) -> Path | None:
        """The whole copy of an archived file, if fetched."""
        copy = self.entry(name)
        return copy.path if copy is not None and copy.complete else None

    async def begin(self, name: str) -> ShelfCopy:
        """The copy of the archived ``name``, its fetch started unless it is on the shelf already;
        returned once its first event is there.  The caller registers as its reader (``reading``)
        before its next checkpoint, or the fetch may stop, and the copy leave, for want of readers."""
        copy = self._copies.get(name)
        if copy is None or copy.error is not None or copy.stop.is_set():
            copy = self._start_fetch(name)
        await self.wait(copy, MAGIC_END)
        return copy

    async def fetch(self, name: str) -> Path:
        """The whole copy of the archived ``name``."""
        copy = await self.begin(name)
        await self.wait(copy, None)
        return copy.path

    async def wait(self, copy: ShelfCopy, position: int | None) -> None:
        """Until bytes of ``copy`` past ``position`` are ready (None: all of them).  A waiter that
        is cancelled (its client left) stops the fetch if nobody else wants it."""
        cancelled = False
        copy.waiting += 1
        try:
            await copy.wait_beyond(position)
        except trio.Cancelled:
            cancelled = True
            raise
        finally:
            copy.waiting -= 1
            if cancelled:
                self._stop_if_unwanted(copy)

    def reading(self, name: str) -> None:
        self._readers[name] = self._readers.get(name, 0) + 1

    def done_reading(self, name: str) -> None:
        left = self._readers.get(name, 0) - 1
        if left > 0:
            self._readers[name] = left
            return
        self._readers.pop(name, None)
        copy = self._copies.get(name)
        if copy is not None:
            self._stop_if_unwanted(copy)
        self._evict()

    def _stop_if_unwanted(self, copy: ShelfCopy) -> None:
        if not copy.complete and not copy.waiting and not self._readers.get(copy.name):
            copy.stop.set()  # the fetch stops at its next frame, and takes its partial copy away

    def _start_fetch(self, name: str) -> ShelfCopy:
        self.dir.mkdir(exist_ok=True)
        # A copy's own name: a stopped fetch may still be writing its copy when the next starts.
        copy = ShelfCopy(name, self.size(name), self.dir / f"{name}.{next(self._fetch_numbers)}.part")
        self._copies[name] = copy
        trio.lowlevel.spawn_system_task(self._fetch, copy)
        return copy

    async def _fetch(self, copy: ShelfCopy) -> None:
        """The fetch of one copy (a system task: it outlives the dump that started it, and ends
        with it only through ``stop``)."""
        token = trio.lowlevel.current_trio_token()
        aligned = MAGIC_END

        def written(end: int) -> None:  # in the fetch's threads, one call at a time
            nonlocal aligned
            with open(copy.path, "rb") as partial:
                whole = whole_events_end(partial.fileno(), aligned, end)
            if whole > aligned:
                aligned = whole
                token.run_sync_soon(self._advance, copy, whole)

        try:
            await run_abandonable(self.fetch_file, copy.name, copy.path, copy.stop.is_set, written)
            if self._copies.get(copy.name) is not copy:  # stopped, and a newer fetch took its place
                copy.path.unlink(missing_ok=True)
                return
            final = self.dir / copy.name
            copy.path.rename(final)
        except trio.Cancelled:  # the relay is stopping
            copy.stop.set()
            raise
        except Exception as exc:  # a system task's error would end the relay: it is the fetch's
            # (the archiver logged a read that failed; the dumps waiting log what they end with)
            if not isinstance(exc, (RelayError, OSError)):
                log.exception("archive: the fetch of %s failed", copy.name)
            copy.path.unlink(missing_ok=True)
            if self._copies.get(copy.name) is copy:
                del self._copies[copy.name]
            copy.error = ArchiveReadError(f"could not read {copy.name} back from the archive: {exc}")
            copy.changed()
            return
        copy.path, copy.ready, copy.complete = final, copy.size, True
        self._copies.move_to_end(copy.name)  # its waiters are about to read it: the last to leave
        copy.changed()
        log.info("archive: %s fetched back for a dump (%d bytes)", copy.name, copy.size)
        self._evict()

    @staticmethod
    def _advance(copy: ShelfCopy, ready: int) -> None:
        if not copy.complete and ready > copy.ready:
            copy.ready = ready
            copy.changed()

    def _evict(self) -> None:
        whole = [name for name, copy in self._copies.items() if copy.complete]
        for name in whole[:max(0, len(whole) - self.keep)]:
            # an open copy stays (the dump holds it mapped), and one whose waiters were woken
            if name not in self._readers and not self._copies[name].waiting:
                self._copies.pop(name).path.unlink(missing_ok=True)

    def in_use(self) -> set[str]:
        """The archived files a reader holds or a fetch brings back: archive.retention keeps them."""
        fetching = {name for name, copy in self._copies.items()
                    if copy.waiting or not (copy.complete or copy.stop.is_set() or copy.error)}
        return fetching | set(self._readers)

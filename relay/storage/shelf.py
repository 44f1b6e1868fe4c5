"""Archived files served as if they were local: the shelf of copies fetched back from the archive.

A dump that reaches a file no longer on the local disk but in the archive (older than the oldest
local file) asks the shelf for it: the file is fetched once, frame by frame (ranged GETs, each
frame verified: memory stays at one frame whatever the file's size), into
``data_dir/archive-cache/``, and read from there like any closed file.  Dumps asking for the same
file at once share one fetch.  At most ``keep`` copies stay, the least recently used leaving first,
never one a dump reads; the shelf is emptied at start (a copy is only ever a cache).  A fetch is
the dump's: when it is cancelled (its client went away) the fetch stops at its next frame.

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

import trio

from ..archive.objects import ArchivedFile
from ..errors import Refusal, RelayError
from ..trio_run import run_abandonable

log = logging.getLogger(__name__)

CACHE_DIR = "archive-cache"
DEFAULT_KEEP = 4


class ArchiveReadError(Refusal):
    """An archived file could not be fetched back (the store is down, the object is damaged or
    its key is missing); the dump reading it ends with the primary's error for a binlog it cannot
    read."""


class ArchiveShelf:
    def __init__(self, data_dir: Path, archived: Callable[[], Mapping[str, ArchivedFile]],
                 fetch_file: Callable[[str, Path, Callable[[], bool]], None], keep: int = DEFAULT_KEEP) -> None:
        self.dir = Path(data_dir) / CACHE_DIR
        self.archived = archived  # every archived file, by name
        self.fetch_file = fetch_file
        self.keep = max(1, keep)
        self._copies: OrderedDict[str, Path] = OrderedDict()  # least recently used first
        self._readers: dict[str, int] = {}
        self._fetching: dict[str, trio.Lock] = {}
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

    def copy(self, name: str) -> Path | None:
        """The local copy of an archived file, if fetched."""
        path = self._copies.get(name)
        if path is not None:
            self._copies.move_to_end(name)
        return path

    async def fetch(self, name: str) -> Path:
        """The local copy of the archived ``name``, fetched now unless it is there already."""
        lock = self._fetching.setdefault(name, trio.Lock())
        async with lock:
            path = self.copy(name)
            if path is not None:
                return path
            self.dir.mkdir(exist_ok=True)
            path = self.dir / name
            # A copy's own name: a stopped fetch may still be writing its copy when the next starts.
            partial = self.dir / f"{name}.{next(self._fetch_numbers)}.part"
            stop = threading.Event()
            try:
                await run_abandonable(self._fetch_into, name, partial, stop)
                partial.rename(path)
            except (RelayError, OSError) as exc:
                partial.unlink(missing_ok=True)
                raise ArchiveReadError(f"could not read {name} back from the archive: {exc}") from exc
            except trio.Cancelled:
                stop.set()  # the dump that asked is gone: the thread stops at its next frame
                raise
            self._copies[name] = path
            self._evict()
            log.info("archive: %s fetched back for a dump (%d bytes)", name, path.stat().st_size)
            return path

    def _fetch_into(self, name: str, partial: Path, stop: threading.Event) -> None:
        try:
            self.fetch_file(name, partial, stop.is_set)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def reading(self, name: str) -> None:
        self._readers[name] = self._readers.get(name, 0) + 1

    def done_reading(self, name: str) -> None:
        left = self._readers.get(name, 0) - 1
        if left > 0:
            self._readers[name] = left
        else:
            self._readers.pop(name, None)
            self._evict()

    def _evict(self) -> None:
        for name in list(self._copies):
            if len(self._copies) <= self.keep:
                return
            if name not in self._readers:  # an open copy stays: the dump holds it mapped
                self._copies.pop(name).unlink(missing_ok=True)

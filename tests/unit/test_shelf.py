"""The shelf of archived files fetched back (relay/storage/shelf.py), its fetches given by the test:
a copy whose fetch completes stays until its waiter reads it, however many copies completed
meanwhile, and a stopped fetch that a newer one replaced leaves nothing behind."""

from __future__ import annotations

import itertools
import struct
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from relay.errors import Refusal
from relay.storage.shelf import CACHE_DIR, ArchiveShelf, ShelfCopy

EVENT = 98  # bytes: two events after the magic number make a 200-byte file
SIZE = 4 + 2 * EVENT


@dataclass(frozen=True)
class Archived:
    """What the shelf reads of an archived file (relay.archive.objects.ArchivedFile)."""

    file_size: int = SIZE
    start_state: tuple[str, ...] = ()
    previous_gtids: str | None = None


def _event(end: int) -> bytes:
    """An event of EVENT bytes whose log_pos is ``end``: a header the shelf's scan accepts."""
    return struct.pack("<IBIIIH", 0, 2, 1, EVENT, end, 0).ljust(EVENT, b"x")


class Fetches:
    """fetch_file for the shelf: the nth fetch writes the magic number and the first event, and
    asks for its last frame (the shelf's ``stop`` is checked before each frame: a stop asked
    after that does not stop it); that frame comes once the test says so (``finish(n)``), or
    fails.  In the shelf's worker threads."""

    def __init__(self) -> None:
        self.started = [threading.Event() for _ in range(8)]
        self._release = [threading.Event() for _ in range(8)]
        self._fails = [False] * 8
        self._count = itertools.count()

    def __call__(self, name: str, target: Path, stop: Callable[[], bool], progress: Callable[[int], None]) -> None:
        number = next(self._count)
        target.write_bytes(b"\xfebin" + _event(4 + EVENT))
        progress(4 + EVENT)
        if stop():
            raise Refusal(f"the fetch of {name} was stopped")
        self.started[number].set()
        self._release[number].wait()
        if self._fails[number]:
            raise Refusal(f"the store went away while {name} was fetched")
        with open(target, "ab") as copy:
            copy.write(_event(SIZE))
        progress(SIZE)

    def finish(self, number: int, fails: bool = False) -> None:
        self._fails[number] = fails
        self._release[number].set()


class WatchedShelf(ArchiveShelf):
    """The shelf, the end of each fetch (its copy renamed, deleted or failed) an event to wait for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ended: defaultdict[ShelfCopy, trio.Event] = defaultdict(trio.Event)

    async def _fetch(self, copy: ShelfCopy) -> None:
        try:
            await super()._fetch(copy)
        finally:
            self.ended[copy].set()


def test_a_completed_copy_stays_until_its_waiter_reads_it_though_others_completed_meanwhile(tmp_path):
    """SHOW BINLOG EVENTS waits for the whole copy (``fetch``), then reads it: a copy whose fetch
    began first and ended last, after ``keep`` other copies completed, is the most recently used
    once it completes, and its waiter finds it there (it used to be evicted by its own completion,
    the oldest entry, before its waiter could register as its reader)."""
    names = [f"bin.{number:06d}" for number in range(1, 6)]
    fetches = Fetches()
    shelf = ArchiveShelf(tmp_path, lambda: {name: Archived() for name in names}, fetches, keep=4)
    found: dict[str, int | None] = {}

    async def show_events(name: str) -> None:  # what SHOW BINLOG EVENTS does with an archived file
        path = await shelf.fetch(name)
        shelf.reading(name)
        found[name] = path.stat().st_size if path.exists() else None
        shelf.done_reading(name)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(show_events, names[-1])  # the slow one: the first fetch
            await trio.to_thread.run_sync(fetches.started[0].wait)
            for number, name in enumerate(names[:-1], start=1):  # keep others, fetched and read meanwhile
                fetches.finish(number)
                await show_events(name)
            fetches.finish(0)

    trio.run(main)
    assert found == {name: SIZE for name in names}


async def _stopped_and_replaced(shelf: ArchiveShelf, fetches: Fetches, name: str) -> tuple[ShelfCopy, ShelfCopy]:
    """A dump's fetch of ``name`` (the first) is asked to stop as its client leaves, its last frame
    already on its way; another dump starts a new fetch of the file (the second)."""
    first = await shelf.begin(name)  # its first event is there
    await trio.to_thread.run_sync(fetches.started[0].wait)  # its last frame asked for
    shelf.reading(name)
    shelf.done_reading(name)
    assert first.stop.is_set()
    second = await shelf.begin(name)
    assert second is not first
    return first, second


def test_a_stopped_fetch_that_a_newer_one_replaced_leaves_no_file_behind(tmp_path):
    """The stopped fetch completes nonetheless, but its copy is not the shelf's any more: it
    deletes it, instead of renaming it to the file's name on the shelf (it used to, and that file
    stayed there, unknown to the shelf, when the newer fetch failed)."""
    name = "bin.000001"
    fetches = Fetches()
    shelf = WatchedShelf(tmp_path, lambda: {name: Archived()}, fetches)

    async def main() -> None:
        first, second = await _stopped_and_replaced(shelf, fetches, name)
        fetches.finish(0)
        await shelf.ended[first].wait()
        fetches.finish(1, fails=True)
        await shelf.ended[second].wait()
        assert second.error is not None and shelf.entry(name) is None

    trio.run(main)
    assert list((tmp_path / CACHE_DIR).iterdir()) == []


def test_a_stopped_fetch_that_a_newer_one_replaced_leaves_the_shelfs_copy_alone(tmp_path):
    """The newer fetch completes first: its copy is the shelf's, and the stopped fetch, which
    completes after it, does not rename its own over it (it used to)."""
    name = "bin.000001"
    fetches = Fetches()
    shelf = WatchedShelf(tmp_path, lambda: {name: Archived()}, fetches)

    async def main() -> None:
        first, second = await _stopped_and_replaced(shelf, fetches, name)
        fetches.finish(1)
        await shelf.ended[second].wait()
        copy = shelf.whole_copy(name)
        assert copy is not None
        inode = copy.stat().st_ino
        fetches.finish(0)
        await shelf.ended[first].wait()
        assert shelf.whole_copy(name) == copy and copy.stat().st_ino == inode
        assert list((tmp_path / CACHE_DIR).iterdir()) == [copy]

    trio.run(main)

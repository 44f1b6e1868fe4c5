"""The replica book: which file a replica last read, kept across restarts for replica_grace."""

import json

import pytest
import trio
import trio.testing

from relay.downstream.registry import DumpState, Registry
from relay.storage.replicabook import BOOK_FILE, ReplicaBook

GRACE = 3600.0


def save(book: ReplicaBook, now: float) -> None:
    """What relay/app.py does, in one thread: the book written if it changed enough."""
    document = book.to_write(now)
    if document is not None:
        book.write(document)


def test_a_replica_seen_within_the_grace_keeps_its_file_across_a_restart(tmp_path):
    book = ReplicaBook(tmp_path, GRACE)
    book.load()
    book.seen(5, "mysql-bin.000003", now=1000.0)
    book.seen(0, "mysql-bin.000001", now=1000.0)  # a tool's one-off dump: not a replica
    save(book, now=1000.0)
    again = ReplicaBook(tmp_path, GRACE)
    again.load()
    assert again.needed(now=1000.0 + GRACE) == {"mysql-bin.000003"}
    assert again.needed(now=1000.0 + GRACE + 1) == set()


def test_moving_to_another_file_is_written_at_once_and_expired_replicas_are_dropped(tmp_path):
    book = ReplicaBook(tmp_path, GRACE)
    book.load()
    book.seen(5, "mysql-bin.000003", now=1000.0)
    book.seen(6, "mysql-bin.000002", now=1000.0)
    save(book, now=1000.0)
    book.seen(5, "mysql-bin.000004", now=1001.0)
    save(book, now=1001.0)
    assert json.loads((tmp_path / BOOK_FILE).read_text())["5"]["file"] == "mysql-bin.000004"
    book.seen(5, "mysql-bin.000004", now=1000.0 + GRACE + 10)
    save(book, now=1000.0 + GRACE + 10)  # replica 6 was last seen more than the grace ago
    assert set(json.loads((tmp_path / BOOK_FILE).read_text())) == {"5"}


def test_a_book_that_could_not_be_written_is_given_again(tmp_path):
    book = ReplicaBook(tmp_path / "gone", GRACE)  # its directory is missing: the write fails
    book.load()
    book.seen(5, "mysql-bin.000003", now=1000.0)
    document = book.to_write(1000.0)
    assert document is not None
    with pytest.raises(OSError):
        book.write(document)
    (tmp_path / "gone").mkdir()
    assert book.to_write(1000.5) == document  # not taken as written: the next round writes it
    book.write(document)
    assert book.to_write(1001.0) is None


def test_an_unreadable_book_protects_nothing_and_is_reported(tmp_path, caplog):
    (tmp_path / BOOK_FILE).write_text("{not json")
    book = ReplicaBook(tmp_path, GRACE)
    book.load()
    assert book.needed(now=0.0) == set()
    assert "ignoring unreadable" in caplog.text


def test_a_replicas_dump_start_wakes_the_booking_at_once_a_tools_does_not():
    """The relay books a replica when its dump starts (relay/app.py waits on this), not at the next
    retention round: a relay killed in between would not know, once back, which files it needs."""
    registry = Registry()
    woken: list[int] = []

    async def main() -> None:
        async def booking() -> None:
            while True:
                await registry.wait_for_new_dump()
                woken.append(len(registry.dumps))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(booking)
            await trio.testing.wait_all_tasks_blocked()
            registry.start_dump(DumpState(0, "tool", trio.CancelScope(), "mysql-bin.000001", 4))
            await trio.testing.wait_all_tasks_blocked()
            assert woken == []
            registry.start_dump(DumpState(11, "replica", trio.CancelScope(), "mysql-bin.000002", 4))
            await trio.testing.wait_all_tasks_blocked()
            assert woken == [1]
            nursery.cancel_scope.cancel()

    trio.run(main)

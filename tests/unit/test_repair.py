"""A damaged closed file fetched again (storage/repair.py): storage writes the primary's copy as it
arrives and puts it in place only if what was stored is its prefix and it is whole; ingest only
hands it the bytes (ingest/refetch.py)."""

import os

import pytest

from relay.replication.stream import Segment
from relay.storage.relaylog import RelayLog
from relay.storage.repair import FetchedCopy
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
NAME = "mysql-bin.000001"


@pytest.fixture
def cut_short(tmp_path):
    """A relay log whose closed first file lost its second half (a power cut with storage.sync: none)."""
    relay_log = RelayLog(tmp_path)
    relay_log.open()
    events = file_events(BINLOG)
    chunks = [memoryview(event) for _, event in events]
    relay_log.apply([Segment(NAME, 4, chunks, len(BINLOG) - 4, len(BINLOG), events[-1][0], new_file=True)])
    relay_log.apply([Segment("mysql-bin.000002", 4, new_file=True)])
    os.truncate(tmp_path / NAME, events[len(events) // 2][0] + 7)
    relay_log.mark_cut_short(NAME, len(BINLOG))
    yield relay_log
    relay_log.close()


def _fetch(relay_log: RelayLog, data: bytes, piece: int = 1000) -> FetchedCopy:
    with FetchedCopy(relay_log, NAME) as copy:
        for start in range(4, len(data), piece):
            assert copy.end == start
            copy.append([memoryview(data)[start:start + piece]])
    return copy


def test_the_primarys_whole_copy_replaces_the_damaged_file(cut_short):
    copy = _fetch(cut_short, BINLOG)
    assert copy.put_in_place()
    assert cut_short.path(NAME).read_bytes() == BINLOG
    assert NAME not in cut_short.damaged and not copy.path.exists()


def test_a_copy_of_another_history_is_removed_and_the_stored_file_kept(cut_short):
    stored = cut_short.path(NAME).read_bytes()
    other = bytearray(BINLOG)
    other[200] ^= 0xFF  # inside what was stored
    copy = _fetch(cut_short, bytes(other))
    assert not copy.put_in_place()
    assert cut_short.path(NAME).read_bytes() == stored and NAME in cut_short.damaged
    assert not copy.path.exists()


def test_a_copy_whose_dump_failed_is_removed(cut_short):
    with pytest.raises(ConnectionError), FetchedCopy(cut_short, NAME) as copy:
        copy.append([BINLOG[4:1000]])
        raise ConnectionError("the primary closed the connection")
    assert not copy.path.exists() and NAME in cut_short.damaged

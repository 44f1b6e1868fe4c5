"""Relay log storage: writing segments, recovery of torn tails, the index, the lock."""

import os
import re
import threading
import time
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.binlog import events as ev
from relay.binlog.groups import GroupTracker
from relay.replication.stream import Segment
from relay.sandbox.polling import wait_for
from relay.storage.files import DataDirError
from relay.storage.index import read_index
from relay.storage.relaylog import RelayLog
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
NAME = "mysql-bin.000001"


def _group_ends(data: bytes) -> list[int]:
    tracker = GroupTracker()
    return [offset + len(event) for offset, event in file_events(data) if tracker.ends_group(event[4], event)]


def _store_whole_file(data_dir: Path, sync: str = "commit") -> RelayLog:
    relay_log = RelayLog(data_dir, sync=sync)
    relay_log.open()
    chunks = [memoryview(event) for _, event in file_events(BINLOG)]
    ends = _group_ends(BINLOG)
    last_start = max(offset for offset, event in file_events(BINLOG) if offset + len(event) == ends[-1])
    relay_log.apply([Segment(NAME, 4, chunks, len(BINLOG) - 4, ends[-1], last_start, new_file=True)])
    return relay_log


@pytest.mark.parametrize("sync", ["commit", "interval", "none"])
def test_segments_are_stored_byte_for_byte(tmp_path, sync):
    relay_log = _store_whole_file(tmp_path, sync)
    if sync == "interval":  # published by the first fsync, at most sync_interval later
        wait_for(lambda: relay_log.sync_if_due() or relay_log.committed[1] > 4, 5, "no fsync after the interval")
    assert relay_log.committed == (NAME, len(BINLOG))
    # commit and interval: fsync before the committed end moved; none: no fsync on the way (only at close)
    assert (relay_log.fsync_seconds.count > 0) == (sync != "none")
    relay_log.close()
    assert (tmp_path / NAME).read_bytes() == BINLOG
    assert read_index(tmp_path) == [NAME]
    assert (tmp_path / "binlog.index").read_text() == f"./{NAME}\n"


def test_with_sync_interval_readers_see_a_group_only_once_it_is_on_disk(tmp_path):
    """A power cut takes at most sync_interval of transactions, and never one a replica was sent:
    the committed end waits for the interval's fsync."""
    relay_log = RelayLog(tmp_path, sync="interval", sync_interval=3600)
    relay_log.open()
    events = file_events(BINLOG)
    tracker = GroupTracker()
    ends = [(offset, offset + len(event)) for offset, event in events if tracker.ends_group(event[4], event)]
    relay_log.apply([Segment(NAME, 4, [memoryview(e) for _, e in events], len(BINLOG) - 4, ends[-1][1],
                             ends[-1][0], new_file=True)])
    assert relay_log.committed == (NAME, 4) and relay_log.fsync_seconds.count == 0
    relay_log.sync_if_due()  # the interval has not passed
    assert relay_log.committed == (NAME, 4)
    relay_log._sync_interval = 0  # as if an hour had passed
    relay_log.sync_if_due()
    assert relay_log.committed == (NAME, len(BINLOG)) and relay_log.fsync_seconds.count == 1
    relay_log.close()


def test_second_relay_on_same_data_dir_is_refused(tmp_path):
    relay_log = _store_whole_file(tmp_path)
    with pytest.raises(DataDirError, match="in use"):
        RelayLog(tmp_path).open()
    relay_log.close()


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=4, max_value=len(BINLOG)))
def test_recovery_cuts_to_the_last_group_end(tmp_path_factory, cut):
    data_dir = tmp_path_factory.mktemp("rl")
    _store_whole_file(data_dir).close()
    (data_dir / "relay-state.json").unlink()  # worst case: no checkpoint, scan the whole file
    with open(data_dir / NAME, "r+b") as binlog:
        binlog.truncate(cut)
    relay_log = RelayLog(data_dir)
    relay_log.open()
    expected = max([end for end in _group_ends(BINLOG) if end <= cut], default=4)
    assert relay_log.committed == (NAME, expected)
    assert (data_dir / NAME).read_bytes() == BINLOG[:expected]
    resume = relay_log.resume_point()
    if expected > 4:
        assert BINLOG[resume.request_position : expected] == resume.last_event
    relay_log.close()


def test_recovery_stops_at_a_corrupt_event(tmp_path):
    _store_whole_file(tmp_path).close()
    (tmp_path / "relay-state.json").unlink()
    ends = _group_ends(BINLOG)
    damaged = bytearray(BINLOG)
    damaged[ends[3] + 20] ^= 0xFF  # inside the event that follows the 4th group end
    (tmp_path / NAME).write_bytes(bytes(damaged))
    relay_log = RelayLog(tmp_path)
    relay_log.open()
    assert relay_log.committed == (NAME, ends[3])
    relay_log.close()


def test_uncommitted_tail_is_discarded(tmp_path):
    relay_log = RelayLog(tmp_path)
    relay_log.open()
    events = file_events(BINLOG)
    ends = _group_ends(BINLOG)
    # write up to the middle of the group after ends[2]
    cut = next(offset for offset, _ in events if offset > ends[2] + 1)
    chunks = [memoryview(e) for o, e in events if o < cut]
    relay_log.apply([Segment(NAME, 4, chunks, cut - 4, ends[2],
                             max(o for o, e in events if o + len(e) == ends[2]), new_file=True)])
    assert relay_log.committed == (NAME, ends[2])
    relay_log.keep_whole_groups()
    relay_log.close()
    assert (tmp_path / NAME).read_bytes() == BINLOG[: ends[2]]


def test_missing_indexed_file_is_an_error(tmp_path):
    _store_whole_file(tmp_path).close()
    (tmp_path / "binlog.index").write_text(f"./mysql-bin.000000\n./{NAME}\n")
    with pytest.raises(DataDirError, match="missing"):
        RelayLog(tmp_path).open()


NEXT = "mysql-bin.000002"


def _whole_file_as(name: str) -> Segment:
    chunks = [memoryview(event) for _, event in file_events(BINLOG)]
    return Segment(name, 4, chunks, len(BINLOG) - 4, _group_ends(BINLOG)[-1], 4, new_file=True)


def test_a_file_created_but_not_yet_listed_by_a_crash_is_stored_again_from_the_upstream(tmp_path):
    _store_whole_file(tmp_path).close()
    (tmp_path / NEXT).write_bytes(ev.BINLOG_MAGIC + b"left by a crash before the index named it")
    relay_log = RelayLog(tmp_path)
    relay_log.open()
    assert relay_log.committed == (NAME, len(BINLOG))  # resumes after the listed files only
    relay_log.apply([_whole_file_as(NEXT)])
    relay_log.close()
    assert read_index(tmp_path) == [NAME, NEXT]
    assert (tmp_path / NEXT).read_bytes() == BINLOG


def test_append_at_wrong_offset_is_refused(tmp_path):
    relay_log = _store_whole_file(tmp_path)
    with pytest.raises(DataDirError, match="does not continue"):
        relay_log.apply([Segment(NAME, len(BINLOG) + 10, [memoryview(b"x" * 19)], 19, None)])
    relay_log.close()
    assert ev.BINLOG_MAGIC == (tmp_path / NAME).read_bytes()[:4]


# ------------------------------------------------------------ group commit (sync: commit)


def _group_segments(data: bytes) -> list[Segment]:
    """One segment per event group of ``data``; the first creates the file."""
    tracker, segments, chunks, start = GroupTracker(), [], [], 4
    for offset, event in file_events(data):
        chunks.append(memoryview(event))
        if tracker.ends_group(event[4], event):
            end = offset + len(event)
            segments.append(Segment(NAME, start, chunks, end - start, end, offset, new_file=not segments))
            chunks, start = [], end
    return segments


async def test_committer_publishes_only_after_its_fsync_and_shares_one_among_groups(tmp_path, nursery):
    relay_log = RelayLog(tmp_path, sync="commit", inline_fsync_max_bytes=0)  # the committer's thread
    relay_log.open()
    nursery.start_soon(relay_log.run_committer)
    await trio.testing.wait_all_tasks_blocked()
    segments = _group_segments(BINLOG)
    assert len(segments) > 3
    for segment in segments:  # no await in between: all groups arrive during one "read"
        relay_log.apply([segment])
    assert relay_log.committed == (NAME, 4), "committed before any fsync"
    with trio.fail_after(10):
        assert await relay_log.wait_for_commit((NAME, 4)) == (NAME, len(BINLOG))
    assert relay_log.fsync_seconds.count == 1
    relay_log.close()
    assert (tmp_path / NAME).read_bytes() == BINLOG


async def test_a_lost_upstream_during_an_fsync_keeps_whole_groups_and_cuts_the_rest(tmp_path, nursery,
                                                                                     monkeypatch):
    relay_log = RelayLog(tmp_path, sync="commit", inline_fsync_max_bytes=0)  # the committer's thread
    relay_log.open()
    nursery.start_soon(relay_log.run_committer)
    await trio.testing.wait_all_tasks_blocked()
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fdatasync

    def slow_fsync(fd: int) -> None:
        if threading.current_thread() is not threading.main_thread():  # the committer's worker
            in_fsync.set()
            release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fsync)
    first, second, third, *_ = _group_segments(BINLOG)
    relay_log.apply([first])
    await trio.to_thread.run_sync(in_fsync.wait, 10)
    relay_log.apply([second])
    partial = third.chunks[0]  # written, its group end not yet received: a partial group
    relay_log.apply([Segment(NAME, third.start, [partial], len(partial), None)])
    relay_log.keep_whole_groups()  # a lost upstream while the committer's fsync is in flight
    second_end = second.committed_end
    assert relay_log.committed == (NAME, second_end)
    synced = relay_log.fsync_seconds.count  # keep_whole_groups' own fsync among them
    release.set()
    with trio.fail_after(10):
        while relay_log.fsync_seconds.count == synced:  # the committer is back from its fsync (and decided)
            await trio.sleep(0.001)
    assert relay_log.committed == (NAME, second_end), "the late fsync moved the committed end back"
    relay_log.close()
    assert (tmp_path / NAME).read_bytes() == BINLOG[:second_end]


async def test_a_failed_fsync_stops_ingest_with_the_file_named(tmp_path, monkeypatch):
    relay_log = RelayLog(tmp_path, sync="commit", inline_fsync_max_bytes=0)  # the committer's thread
    relay_log.open()
    real_fsync = os.fdatasync

    def failing_fsync(fd: int) -> None:
        if threading.current_thread() is not threading.main_thread():  # the committer's worker
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", failing_fsync)
    first, *_ = _group_segments(BINLOG)
    # strict, so the error comes in a group on every trio the project allows (0.22 did not group by default)
    with pytest.raises(BaseExceptionGroup) as raised:
        async with trio.open_nursery(strict_exception_groups=True) as nursery:
            nursery.start_soon(relay_log.run_committer)
            await trio.testing.wait_all_tasks_blocked()
            relay_log.apply([first])
    [error] = raised.value.exceptions
    assert isinstance(error, DataDirError)
    assert re.search(f"fsync of .*{NAME} failed: .*Input/output error", str(error))
    assert relay_log.committed == (NAME, 4)  # nothing acknowledged
    relay_log.close()  # nor at close: the written group is cut, not fsynced again and kept
    assert (tmp_path / NAME).read_bytes() == BINLOG[:4]


async def test_a_small_batch_on_a_fast_disk_is_fsynced_and_published_without_a_thread_hand_off(tmp_path, nursery):
    relay_log = RelayLog(tmp_path, sync="commit")
    relay_log.open()
    nursery.start_soon(relay_log.run_committer)
    await trio.testing.wait_all_tasks_blocked()
    first, second, *_ = _group_segments(BINLOG)
    relay_log.apply([first])  # the first fsync of a relay is taken as fast
    assert relay_log.committed == (NAME, first.committed_end), "not committed by apply itself"
    assert relay_log.fsync_seconds.count >= 1, "committed without an fsync"
    relay_log.apply([second])
    assert relay_log.committed == (NAME, second.committed_end)
    relay_log.close()
    assert (tmp_path / NAME).read_bytes()[: second.committed_end] == BINLOG[: second.committed_end]


async def test_the_fsyncs_of_a_slow_disk_go_to_the_committers_thread(tmp_path, nursery, monkeypatch):
    relay_log = RelayLog(tmp_path, sync="commit", inline_fsync_max_bytes=len(BINLOG))
    relay_log.open()
    nursery.start_soon(relay_log.run_committer)
    await trio.testing.wait_all_tasks_blocked()
    real_fsync = os.fdatasync

    def slow_fsync(fd: int) -> None:  # a disk whose fsync takes 5 ms
        time.sleep(0.005)
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fsync)
    segments = _group_segments(BINLOG)
    relay_log.apply([segments[0]])  # inline: nothing known yet about this disk
    assert relay_log.committed == (NAME, segments[0].committed_end)
    for segment in segments[1:]:
        before = relay_log.committed
        relay_log.apply([segment])
        if relay_log.committed == before:  # the moving average passed the limit: the thread's turn
            break
    else:
        raise AssertionError("every fsync of a slow disk ran in the event loop")
    with trio.fail_after(10):
        assert await relay_log.wait_for_commit(before) == (NAME, segment.committed_end)
    relay_log.close()


async def test_a_failed_inline_fsync_stops_ingest_and_acknowledges_nothing(tmp_path, nursery, monkeypatch):
    relay_log = RelayLog(tmp_path, sync="commit")
    relay_log.open()
    nursery.start_soon(relay_log.run_committer)
    await trio.testing.wait_all_tasks_blocked()

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    first, second, *_ = _group_segments(BINLOG)
    relay_log.apply([first])
    monkeypatch.setattr(os, "fdatasync", failing_fsync)
    with pytest.raises(DataDirError, match=f"fsync of .*{NAME} failed: .*Input/output error"):
        relay_log.apply([second])
    assert relay_log.committed == (NAME, first.committed_end)
    monkeypatch.undo()
    relay_log.close()  # the unacknowledged group is cut, not fsynced again and kept
    assert (tmp_path / NAME).read_bytes() == BINLOG[: first.committed_end]


def test_fsync_figures_take_the_same_memory_however_many_fsyncs():
    from relay.stats import FSYNC_BUCKETS, Histogram

    histogram = Histogram(FSYNC_BUCKETS)
    for i in range(100_000):
        histogram.observe(i / 100_000)
    assert len(histogram.counts) == len(FSYNC_BUCKETS) + 1 and histogram.count == 100_000
    cumulative = histogram.cumulative()
    assert cumulative[-1] == ("+Inf", 100_000) and cumulative[0] == ("0.0005", 51)  # 0 .. 0.0005 inclusive


def test_a_closed_file_cut_short_is_marked_damaged_up_to_its_last_whole_event(tmp_path):
    """storage.sync: none and a power cut: a closed file may come back shorter than the primary's.
    It is served up to its last whole event and fetched again, not taken for another history."""
    relay_log = _store_whole_file(tmp_path)
    second = "mysql-bin.000002"
    relay_log.apply([Segment(second, 4, new_file=True)])
    relay_log.close()
    events = file_events(BINLOG)
    cut_inside = events[len(events) // 2][0] + 7
    os.truncate(tmp_path / NAME, cut_inside)
    reopened = RelayLog(tmp_path, sync="commit")
    reopened.open()
    reopened.mark_cut_short(NAME, len(BINLOG))
    assert reopened.damaged[NAME] == events[len(events) // 2][0]
    reopened.close()


def test_a_new_file_that_could_not_be_created_is_not_listed_and_is_created_when_sent_again(tmp_path):
    """A full disk at a rotate: the index does not name the file (whoever reads binlog.index, the
    pipeline's stream or a backup script, finds every file it lists), and ingest, once it has
    paused and reconnected, is sent the new file again and stores it."""
    relay_log = _store_whole_file(tmp_path)
    (tmp_path / NEXT).mkdir()  # the create fails, as on a full or read-only disk
    with pytest.raises(OSError):
        relay_log.apply([_whole_file_as(NEXT)])
    assert read_index(tmp_path) == [NAME]
    relay_log.keep_whole_groups()  # what ingest does after a failed apply
    (tmp_path / NEXT).rmdir()  # space again
    relay_log.apply([_whole_file_as(NEXT)])
    relay_log.close()
    assert read_index(tmp_path) == [NAME, NEXT]
    assert (tmp_path / NAME).read_bytes() == BINLOG and (tmp_path / NEXT).read_bytes() == BINLOG

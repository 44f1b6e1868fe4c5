"""The dump's tail reader over a real relay log: where a dump may start, the order of what it
reads (file start, committed events, the next file) and "nothing yet" at the committed end."""

import os

import pytest

from relay.binlog import events as ev
from relay.binlog.groups import GroupTracker
from relay.binlog.names import next_file_name
from relay.replication.stream import Segment
from relay.storage.reader import (
    Available,
    FileGone,
    FileStart,
    NothingYet,
    StartRefused,
    StoredFileDamaged,
    TailReader,
)
from relay.storage.relaylog import RelayLog
from relay.storage.state import Checkpoint, read_state
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
FIRST, SECOND = "mysql-bin.000001", "mysql-bin.000002"
EVENTS = file_events(BINLOG)


def _whole_file(name: str) -> Segment:
    tracker = GroupTracker()
    ends = [(offset, offset + len(event)) for offset, event in EVENTS if tracker.ends_group(event[4], event)]
    last_start, end = ends[-1]
    return Segment(name, 4, [memoryview(e) for _, e in EVENTS], len(BINLOG) - 4, end, last_start, new_file=True)


@pytest.fixture
def relay_log(tmp_path):
    log = RelayLog(tmp_path, sync="none")
    log.open()
    log.apply([_whole_file(FIRST)])
    yield log
    log.close()


def _read_all(reader: TailReader) -> list[object]:
    """Every step up to "nothing yet", events as their offsets."""
    steps = []
    while not isinstance(step := reader.poll(), NothingYet):
        if isinstance(step, Available):
            start = reader.position
            events = reader.read_events(step.end)
            steps += [start + sum(map(len, events[:i])) for i in range(len(events))]
        else:
            steps.append(step)
    steps.append(step)
    return steps


def test_a_dump_from_the_start_reads_the_fde_then_every_committed_event(relay_log):
    reader = TailReader(relay_log, "", 4)
    assert reader.first_file_pending() is None
    reader.start()
    steps = _read_all(reader)
    fde = EVENTS[0][1]
    assert steps[0] == FileStart(FIRST, 4, bytes(fde), first=True)
    assert steps[1:-1] == [offset for offset, _ in EVENTS[1:]]
    assert steps[-1] == NothingYet((FIRST, relay_log.committed[1]))
    reader.close()


def test_a_dump_from_a_position_starts_there_and_moves_to_the_next_file(relay_log):
    middle = EVENTS[len(EVENTS) // 2][0]
    reader = TailReader(relay_log, FIRST, middle)
    reader.start()
    assert reader.poll() == FileStart(FIRST, middle, bytes(EVENTS[0][1]), first=True)
    relay_log.apply([_whole_file(SECOND)])  # the primary rotated: FIRST is finished
    steps = _read_all(reader)
    assert steps[0] == middle
    second = steps.index(FileStart(SECOND, 4, bytes(EVENTS[0][1]), first=False))
    assert steps[:second] == [offset for offset, _ in EVENTS if offset >= middle]
    assert steps[second + 1:-1] == [offset for offset, _ in EVENTS[1:]]
    reader.close()


@pytest.mark.parametrize("file, position, message", [
    ("mysql-bin.000099", 4, "Could not find first log file name in binary log index file"),
    (FIRST, 3, "impossible position"),
    (FIRST, len(BINLOG) + 1, "impossible position"),
    # what a primary's read of an event header there meets (test_serve_errors.py compares with one)
    (FIRST, EVENTS[3][0] + 1, "bogus data in log event|binlog truncated|exceeded max_allowed_packet"),
])
def test_impossible_starts_are_refused_with_the_primarys_words(relay_log, file, position, message):
    reader = TailReader(relay_log, file, position)
    with pytest.raises(StartRefused, match=message) as refused:
        reader.start()
    # a missing file is refused before any is read: no coordinates (the primary gives none either)
    assert (f"the first event '{file}' at {position}" in str(refused.value)) == (file != "mysql-bin.000099")


def test_the_file_after_the_newest_is_waited_for_not_refused(relay_log):
    assert next_file_name(FIRST) == SECOND
    assert TailReader(relay_log, SECOND, 4).first_file_pending() == NothingYet(relay_log.committed)
    assert TailReader(relay_log, "mysql-bin.000003", 4).first_file_pending() is None  # refused by start()
    relay_log.apply([_whole_file(SECOND)])
    assert TailReader(relay_log, SECOND, 4).first_file_pending() is None


@pytest.mark.parametrize("entered", ["newest", "closed"])
def test_a_file_purged_under_its_dump_ends_it_with_the_primarys_error(relay_log, entered):
    """Retention and PURGE spare a file a dump reads; should it go all the same, the dump reads on
    what it holds open and then gets the primary's "could not find next log" (it used to end with
    EOF, wait for ever, or fail with FileNotFoundError), whether the file was the newest when the
    dump entered it (read to its end first) or a closed one (read from a mapping)."""
    if entered == "closed":
        relay_log.apply([_whole_file(SECOND)])
    reader = TailReader(relay_log, FIRST, 4)
    reader.start()
    assert isinstance(reader.poll(), FileStart)
    if entered == "newest":
        assert isinstance(_read_all(reader)[-1], NothingYet)
    else:
        step = reader.poll()
        assert isinstance(step, Available) and reader.read_events(step.end, block_size=256)
    for name in (SECOND, next_file_name(SECOND)):
        if name not in relay_log.files:
            relay_log.apply([_whole_file(name)])
    relay_log.purge([FIRST])
    with pytest.raises(FileGone, match=f"could not find next log; the first event '{FIRST}' at {len(BINLOG)}"):
        while isinstance(step := reader.poll(), Available):
            reader.read_events(step.end)
    reader.close()


def test_a_block_read_does_not_move_until_advanced(relay_log):
    reader = TailReader(relay_log, FIRST, 4)
    reader.start()
    assert isinstance(reader.poll(), FileStart)
    step = reader.poll()
    assert isinstance(step, Available)
    buffer = memoryview(bytearray(100))
    start = reader.position
    assert reader.read_block(buffer, step.end) == 100
    assert bytes(buffer) == BINLOG[start:start + 100] and reader.position == start
    reader.advance(start + 29)
    assert reader.position == start + 29
    reader.close()


def _damage(relay_log, name: str, offset: int, truncate: bool = False) -> None:
    path = relay_log.path(name)
    data = bytearray(path.read_bytes())
    if truncate:
        del data[offset:]
    else:
        data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_an_event_that_fails_its_crc_is_reported_with_its_position_not_returned(relay_log):
    relay_log.apply([_whole_file(SECOND)])  # FIRST is finished: its bytes are the stored history
    bad_offset = EVENTS[6][0]
    _damage(relay_log, FIRST, bad_offset + ev.HEADER_LEN)
    reader = TailReader(relay_log, FIRST, 4)
    reader.start()
    read = []
    with pytest.raises(StoredFileDamaged, match="did not pass crc check") as damaged:
        while True:
            step = reader.poll()
            if isinstance(step, Available):
                read += reader.read_events(step.end)
    assert (damaged.value.file, damaged.value.position) == (FIRST, bad_offset)
    assert [bytes(event) for event in read] == [bytes(event) for _, event in EVENTS[1:6]]
    reader.close()


def test_a_finished_file_cut_inside_an_event_is_reported(relay_log):
    relay_log.apply([_whole_file(SECOND)])
    cut_offset = EVENTS[-3][0]
    _damage(relay_log, FIRST, cut_offset + 10, truncate=True)
    reader = TailReader(relay_log, FIRST, 4)
    reader.start()
    with pytest.raises(StoredFileDamaged, match="ends inside an event") as damaged:
        while True:
            step = reader.poll()
            if isinstance(step, Available):
                reader.read_events(step.end)
    assert damaged.value.position == cut_offset
    reader.close()


def test_a_finished_file_is_read_through_a_mapping_the_file_being_written_is_not(relay_log):
    relay_log.apply([_whole_file(SECOND)])  # FIRST is finished
    finished, current = TailReader(relay_log, FIRST, 4), TailReader(relay_log, SECOND, 4)
    for reader in (finished, current):
        reader.start()
        assert isinstance(reader.poll(), FileStart) and isinstance(reader.poll(), Available)
    start = finished.position
    with finished.mapped_block(len(BINLOG), 100) as view:
        assert bytes(view) == BINLOG[start:start + 100]
    assert finished.position == start  # moved only by advance
    assert current.mapped_block(len(BINLOG), 100) is None  # read_block reads it
    finished.close()
    current.close()


def _resident_kib(path) -> int:
    """Resident pages of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split(" ", 1)[0]:
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def test_the_pages_of_a_mapped_file_are_handed_back_once_sent(relay_log):
    relay_log.apply([_whole_file(SECOND)])
    path = relay_log.path(FIRST)
    with open(path, "ab") as grown:  # the events again, for pages enough to count
        grown.write(BINLOG[4:] * ((16 << 20) // len(BINLOG)))
    reader = TailReader(relay_log, FIRST, 4)
    reader.start()
    reader.poll()
    end = path.stat().st_size
    most = 0
    while reader.position < end:
        with reader.mapped_block(end, 256 << 10) as view:
            bytes(view)  # read every page of the block, as the framer does
            most = max(most, _resident_kib(path))
            reader.advance(reader.position + len(view))
        # and a stretch not read through the mapping (a large event goes through read_block_at):
        # the next block's fault maps pages of it, behind the position
        reader.advance(min(end, reader.position + (520 << 10) + 12345))
    # a block, and what a fault maps around it (a large folio: 2 MiB), not the 16 MiB read
    assert most <= 6 << 10, f"{most} KiB of {path.name} resident while reading it"
    reader.close()


def test_between_blocks_a_dump_holds_no_page_of_a_mapped_file(relay_log):
    """A fault maps pages ahead of the one read (all of a large folio, up to 2 MiB): a hundred dumps
    waiting for their clients would hold them all that time.  After each block, and before an event
    larger than a block is streamed, none stays mapped."""
    relay_log.apply([_whole_file(SECOND)])
    path = relay_log.path(FIRST)
    with open(path, "ab") as grown:  # written in one piece: large folios where the kernel makes them
        grown.write(BINLOG[4:] * ((8 << 20) // len(BINLOG)))
    reader = TailReader(relay_log, FIRST, 4)
    reader.start()
    reader.poll()
    end = path.stat().st_size
    while reader.position < end:
        with reader.mapped_block(end, 128 << 10) as view:
            bytes(view[:100])  # a look at the first event only, as before a large one
            assert _resident_kib(path) > 0
            reader.hand_back()
            assert _resident_kib(path) == 0, "pages left mapped before a large event is streamed"
            bytes(view)
            reader.advance(reader.position + len(view))
        assert _resident_kib(path) == 0, f"pages left mapped at {reader.position} between blocks"
    reader.close()


def test_a_new_file_is_not_entered_before_its_format_description_is_committed(relay_log):
    """After a rotation the newest file exists with nothing committed in it (its FORMAT_DESCRIPTION
    still on its way, or lost at a power cut): a dump waits there instead of reading an empty file."""
    reader = TailReader(relay_log, FIRST, 4)
    reader.start()
    assert _read_all(reader)[-1] == NothingYet((FIRST, relay_log.committed[1]))
    relay_log.apply([Segment(SECOND, 4, new_file=True)])  # created, nothing committed in it
    assert relay_log.committed == (SECOND, 4)
    assert reader.poll() == NothingYet((SECOND, 4))
    assert TailReader(relay_log, SECOND, 4).first_file_pending() == NothingYet((SECOND, 4))
    fde = bytes(EVENTS[0][1])
    relay_log.apply([Segment(SECOND, 4, [fde], len(fde), 4 + len(fde), 4)])
    assert reader.poll() == FileStart(SECOND, 4, fde, first=False)
    assert TailReader(relay_log, SECOND, 4).first_file_pending() is None
    reader.close()


def test_dumps_wait_for_the_upstream_to_check_a_closed_file_a_power_cut_may_have_cut(tmp_path):
    """A closed file that does not end with its ROTATE (a power cut took its tail, whole events may
    remain) is compared with the primary's once the upstream connects, and fetched again: until
    then a dump starting waits (ending at the cut would stop a replica's IO thread for good)."""
    import trio
    import trio.testing

    stored = RelayLog(tmp_path, sync="none")
    stored.open()
    stored.apply([_whole_file(FIRST)])
    stored.apply([_whole_file(SECOND)])
    stored.close()
    os.truncate(tmp_path / FIRST, EVENTS[3][0])  # cut at an event boundary: whole events remain
    relay_log = RelayLog(tmp_path, sync="none")
    relay_log.open()
    assert not relay_log.damaged and relay_log.repairs_pending()
    reader = TailReader(relay_log, FIRST, 4)
    assert reader.first_file_pending() == NothingYet(relay_log.committed)

    async def wait_then_repair() -> None:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay_log.wait_for_commit, relay_log.committed)
                await trio.testing.wait_all_tasks_blocked()
                relay_log.repairs_tried()  # the upstream compared and fetched: the waiting dump returns

    trio.run(wait_then_repair)
    assert not relay_log.repairs_pending() and reader.first_file_pending() is None
    relay_log.close()


def _cut_tail_after_clean_close(tmp_path, sync: str) -> RelayLog:
    """A relay log whose newest file lost its tail after the relay stopped (a power cut took what
    the OS had not written): its checkpoint names a point past what is left."""
    stored = RelayLog(tmp_path, sync=sync)
    stored.open()
    stored.apply([_whole_file(FIRST)])
    stored.close()
    os.truncate(tmp_path / FIRST, EVENTS[3][0])
    relay_log = RelayLog(tmp_path, sync=sync)
    relay_log.open()
    return relay_log


def test_after_a_cut_with_sync_none_dumps_ahead_of_the_stored_end_wait_for_the_refetch(tmp_path, monkeypatch):
    """With storage.sync: none a replica may have been sent what a power cut then took, whole files
    even: for a while after such a start, a blocking dump asking for a later file or a position past
    the end waits for ingest to fetch them again; after that window it is refused as a primary would."""
    import trio

    from relay.storage import relaylog

    monkeypatch.setattr(relaylog, "REPAIR_WAIT_SECONDS", 0.3)
    relay_log = _cut_tail_after_clean_close(tmp_path, "none")
    end = relay_log.committed
    assert end == (FIRST, EVENTS[3][0]) and relay_log.tail_may_be_lost()
    past_end = TailReader(relay_log, FIRST, len(BINLOG))
    two_files_on = TailReader(relay_log, next_file_name(SECOND), 4)
    assert past_end.first_file_pending() == NothingYet(end)
    assert two_files_on.first_file_pending() == NothingYet(end)
    assert TailReader(relay_log, "other-bin.000009", 4).first_file_pending() is None  # another name: refused now

    async def wait_out_the_window() -> None:
        with trio.fail_after(5):
            assert await relay_log.wait_for_commit(end) == end  # returned as the window closed

    trio.run(wait_out_the_window)
    assert not relay_log.tail_may_be_lost()
    for reader in (past_end, two_files_on):
        assert reader.first_file_pending() is None
        with pytest.raises(StartRefused):
            reader.start()
    relay_log.close()


def test_a_dump_past_the_end_waits_until_ingest_brings_it_back(tmp_path):
    relay_log = _cut_tail_after_clean_close(tmp_path, "none")
    reader = TailReader(relay_log, FIRST, EVENTS[5][0])
    assert isinstance(reader.first_file_pending(), NothingYet)
    tail = EVENTS[3:]
    relay_log.apply([Segment(FIRST, EVENTS[3][0], [memoryview(e) for _, e in tail], sum(len(e) for _, e in tail),
                             len(BINLOG), tail[-1][0])])
    assert relay_log.committed == (FIRST, len(BINLOG)) and reader.first_file_pending() is None
    reader.start()
    reader.close()
    relay_log.close()


def test_a_cut_back_to_the_checkpoint_a_new_file_wrote_is_not_taken_for_a_clean_stop(tmp_path):
    """The checkpoint written as a file begins names (file, 4); a power cut with sync: none can take
    everything written after it, and the file's end then equals the checkpoint, as after a clean
    stop.  Only close() marks a stop clean: here the dumps past the end still wait."""
    stored = RelayLog(tmp_path, sync="none")
    stored.open()
    stored.apply([_whole_file(FIRST)])
    assert read_state(tmp_path).checkpoint == Checkpoint(FIRST, 4, 4)  # the premise: nothing later written
    os.close(stored._fd)  # the process dies: no close()
    stored._lock.release()
    os.truncate(tmp_path / FIRST, 4)  # what the OS had not written is gone
    relay_log = RelayLog(tmp_path, sync="none")
    relay_log.open()
    assert relay_log.committed == (FIRST, 4) and relay_log.tail_may_be_lost()
    assert isinstance(TailReader(relay_log, FIRST, EVENTS[3][0]).first_file_pending(), NothingYet)
    relay_log.close()


@pytest.mark.parametrize("sync", ["commit", "none"])
def test_no_wait_past_the_end_when_nothing_sent_can_have_been_lost(tmp_path, sync):
    """sync: commit never sends what is not durable; a clean stop (close) loses nothing: a start past
    the end is refused at once, as the primary refuses it."""
    if sync == "commit":
        relay_log = _cut_tail_after_clean_close(tmp_path, sync)
    else:
        relay_log = RelayLog(tmp_path, sync=sync)
        relay_log.open()
        relay_log.apply([_whole_file(FIRST)])
        relay_log.close()
        relay_log = RelayLog(tmp_path, sync=sync)
        relay_log.open()
    assert not relay_log.tail_may_be_lost()
    assert TailReader(relay_log, next_file_name(SECOND), 4).first_file_pending() is None
    relay_log.close()

"""Walking stored files for a few event types, or every event in batches (relay/storage/scan.py):
the same events as the full walk, compiled and in Python, whole or a budget at a time."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.binlog import events as ev
from relay.storage import scan
from relay.storage.scan import event_types, events_of_types, find_event, iter_event_batches, iter_events, split_events
from tests.support.binlogs import MARIADB_MIXED_BINLOG
from tests.support.loops import LOOPS, python_loop, select_loop

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()


def _full_walk(data: bytes, types: bytes, block_size: int) -> list[tuple[int, bytes]]:
    return [(offset, bytes(event)) for offset, event in iter_events(io.BytesIO(data), 4, len(data), block_size)
            if types[event[4]]]


def _typed_walk(data: bytes, types: bytes, block_size: int) -> list[tuple[int, bytes]]:
    found, _ = events_of_types(io.BytesIO(data), 4, len(data), types, block_size=block_size)
    return found


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("block_size", [64, 200, 4096, 1 << 20])  # 64 and 200: events larger than a block
@pytest.mark.parametrize("wanted",
                         [(ev.GTID_EVENT,), (ev.XID_EVENT, ev.QUERY_EVENT), (ev.FORMAT_DESCRIPTION_EVENT,), ()])
def test_the_typed_walk_finds_what_the_full_walk_finds(loop, block_size, wanted, monkeypatch):
    select_loop(loop, monkeypatch, scan, "_compiled_find")
    types = event_types(*wanted)
    expected = _full_walk(BINLOG, types, block_size)
    assert _typed_walk(BINLOG, types, block_size) == expected
    if wanted == (ev.GTID_EVENT,):
        assert len(expected) > 10, "the fixture has GTID events"


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("budget", [1, 300, 5000])
def test_a_walk_a_budget_at_a_time_finds_what_one_walk_finds(loop, budget, monkeypatch):
    select_loop(loop, monkeypatch, scan, "_compiled_find")
    types = event_types(ev.GTID_EVENT, ev.XID_EVENT)
    stream, found, offset, steps = io.BytesIO(BINLOG), [], 4, 0
    while True:
        step, walked = events_of_types(stream, offset, len(BINLOG), types, budget, block_size=256)
        found += step
        steps += 1
        if walked == offset:
            break
        assert walked - offset < budget + 256 or len(step) == 1, "one block past the budget at most"
        offset = walked
    assert offset == len(BINLOG), "every whole event walked"
    assert found == _full_walk(BINLOG, types, 4096)
    assert steps > 2 or budget > len(BINLOG)  # walked in several steps when the budget is short


@pytest.mark.parametrize("loop", LOOPS)
def test_the_walk_stops_at_a_torn_tail_and_at_a_bogus_length(loop, monkeypatch):
    select_loop(loop, monkeypatch, scan, "_compiled_find")
    every = event_types(*range(256))
    whole = _full_walk(BINLOG, every, 4096)
    torn = BINLOG[: whole[-1][0] + 7]  # the last event cut after 7 bytes
    assert _typed_walk(torn, every, 4096) == whole[:-1]
    assert events_of_types(io.BytesIO(torn), 4, len(torn), every)[1] == whole[-1][0], "walked up to the cut"
    bogus = bytearray(BINLOG)
    third = whole[2][0]
    bogus[third + 9 : third + 13] = (5).to_bytes(4, "little")  # shorter than a header
    assert _typed_walk(bytes(bogus), every, 4096) == whole[:2]


def _batched_walk(data: bytes, block_size: int) -> list[tuple[int, bytes]]:
    return [event for batch in iter_event_batches(io.BytesIO(data), 4, len(data), block_size) for event in batch]


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("block_size", [64, 200, 4096, 1 << 20])  # 64 and 200: events larger than a block
def test_the_walk_in_batches_gives_every_event_of_the_full_walk(loop, block_size, monkeypatch):
    select_loop(loop, monkeypatch, scan, "_compiled_split")
    expected = _full_walk(BINLOG, event_types(*range(256)), block_size)
    batches = list(iter_event_batches(io.BytesIO(BINLOG), 4, len(BINLOG), block_size))
    assert [event for batch in batches for event in batch] == expected
    assert all(type(event) is bytes for batch in batches for _, event in batch), "copies, not views of a block"
    if block_size == 4096:
        assert len(batches) < len(expected) / 4, "several events a batch"


@pytest.mark.parametrize("loop", LOOPS)
def test_the_walk_in_batches_stops_at_a_torn_tail_and_at_a_bogus_length(loop, monkeypatch):
    select_loop(loop, monkeypatch, scan, "_compiled_split")
    whole = _full_walk(BINLOG, event_types(*range(256)), 4096)
    torn = BINLOG[: whole[-1][0] + 7]
    assert _batched_walk(torn, 4096) == whole[:-1]
    assert _batched_walk(torn, 64) == whole[:-1]
    assert list(iter_event_batches(io.BytesIO(torn), 4, len(BINLOG), 4096))[-1][-1] == whole[-2], \
        "a file shorter than the caller thought ends the walk"
    bogus = bytearray(BINLOG)
    third = whole[2][0]
    bogus[third + 9 : third + 13] = (5).to_bytes(4, "little")
    assert _batched_walk(bytes(bogus), 4096) == whole[:2]
    assert _batched_walk(bytes(bogus), 64) == whole[:2]


@given(data=st.binary(max_size=600), base=st.integers(0, 1 << 40))
@settings(max_examples=400, deadline=None)
def test_split_compiled_and_in_python_agree_on_any_bytes(data, base):
    block = SMALL_EVENTS + data
    compiled = split_events(block, base)
    with python_loop(scan, "_compiled_split"):
        in_python = split_events(block, base)
    assert compiled == in_python
    assert compiled[1] >= len(SMALL_EVENTS)


@given(data=st.binary(max_size=600), start=st.integers(0, 700), size=st.integers(-5, 700),
       marked=st.sets(st.integers(0, 255), max_size=4))
@settings(max_examples=400, deadline=None)
def test_find_compiled_and_in_python_agree_on_any_bytes(data, start, size, marked):
    """On corrupt or cut input too: the same offset and answer, never a read past ``size``."""
    types = event_types(*marked)
    block = SMALL_EVENTS + data
    size = min(size, len(block))
    compiled = find_event(block, start, size, types)
    with python_loop(scan, "_compiled_find"):
        in_python = find_event(block, start, size, types)
    assert compiled == in_python


def _small_events() -> bytes:
    """A run of whole events after the format description, a few hundred bytes long."""
    events = _full_walk(BINLOG, event_types(*range(256)), 4096)[1:]
    run = b""
    for _, event in events:
        if len(run) + len(event) > 500:
            break
        run += event
    assert len(run) > 200
    return run


SMALL_EVENTS = _small_events()


@pytest.mark.parametrize("loop", LOOPS)
def test_whole_events_end_is_the_end_of_the_last_whole_event(loop, monkeypatch, tmp_path):
    """How far a copy growing from its start may be read (storage/shelf.py): every cut of the file
    ends the readable part at the last event boundary before it."""
    select_loop(loop, monkeypatch, scan, "_compiled_find")
    path = tmp_path / "binlog"
    path.write_bytes(BINLOG)
    ends = [offset + len(event) for offset, event in iter_events(io.BytesIO(BINLOG), 4, len(BINLOG))]
    with open(path, "rb") as stored:
        for cut in sorted({4, 5, *ends, *(end - 1 for end in ends), *(end + 7 for end in ends[:-1])}):
            expected = max([4, *(end for end in ends if end <= cut)])
            assert scan.whole_events_end(stored.fileno(), 4, cut) == expected, cut
        # from a boundary other than the first
        assert scan.whole_events_end(stored.fileno(), ends[3], len(BINLOG)) == len(BINLOG)

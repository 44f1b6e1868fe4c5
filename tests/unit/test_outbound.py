"""What a dump sends: the loop filter and the one-pass block framer, on a real MariaDB binlog."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.binlog import events as ev
from relay.gtid.gtid import BinlogState, Gtid
from relay.protocol.packets import PacketReader
from relay.replication import outbound
from relay.replication.gtidstart import GtidStart
from relay.replication.outbound import DumpOptions, OutboundStream, frame_block
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events
from tests.support.loops import LOOPS, python_loop, select_loop

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
PRIMARY_ID = 7  # the fixture's server_id


def _events() -> list[memoryview]:
    return [memoryview(event) for _, event in file_events(BINLOG)]


def _payloads(data: bytes, seq: int) -> list[bytes]:
    reader = PacketReader()
    reader.next_seq = seq
    reader.feed(data)
    packets = []
    while (payload := reader.next_packet()) is not None:
        packets.append(bytes(payload))
    return packets


def _options(**changes) -> DumpOptions:
    base = dict(relay_server_id=1001, replica_server_id=None, checksum_declared=True, first_rotate_crc=True)
    return DumpOptions(**{**base, **changes})


# frame_block runs the compiled loop of relay/binlog/_scan.c when it is built, else the same
# loop in Python: the framing tests run both ways.
@pytest.fixture(params=LOOPS)
def frame_loop(request, monkeypatch):
    return select_loop(request.param, monkeypatch, outbound, "_compiled_frame")


def test_frame_block_frames_every_whole_event(frame_loop):
    body = memoryview(BINLOG)[4:]
    run = frame_block(body, len(body) - 10, 5, None)  # the last event is cut short
    events = _events()
    assert run.events == len(events) - 1
    assert run.used == sum(len(e) for e in events[:-1])
    assert _payloads(bytes(run.data), 5) == [b"\x00" + bytes(e) for e in events[:-1]]


def test_frame_block_fills_the_dumps_buffer_and_stops_before_a_packet_that_would_not_fit(frame_loop):
    body = memoryview(BINLOG)[4:]
    events = _events()
    packets = [len(e) + outbound.EVENT_PACKET_OVERHEAD for e in events]
    room = sum(packets[:3]) + packets[3] - 1  # the fourth packet lacks a byte
    tight = bytearray(room)
    run = frame_block(body, len(body), 9, None, out=tight)
    assert (run.events, run.used) == (3, sum(len(e) for e in events[:3]))
    assert _payloads(bytes(run.data), 9) == [b"\x00" + bytes(e) for e in events[:3]]
    assert run.data.obj is tight  # framed in place, not copied
    roomy = bytearray(outbound.framed_capacity(len(body)))
    assert frame_block(body, len(body), 9, None, out=roomy).events == len(events)


def test_frame_block_stops_before_the_replicas_own_group(frame_loop):
    body = memoryview(BINLOG)[4:]
    run = frame_block(body, len(body), 1, PRIMARY_ID)
    first_gtid = next(i for i, e in enumerate(_events()) if e[4] == ev.GTID_EVENT)
    assert run.events == first_gtid
    assert run.last_event == sum(len(e) for e in _events()[: first_gtid - 1])
    assert frame_block(body, len(body), 1, PRIMARY_ID + 1).events == len(_events())


def _framed(block: bytes, size: int, seq: int, stop_at_origin, verify_crc=False, leave_out=bytes(256), room=None):
    out = None if room is None else bytearray(room)
    run = frame_block(memoryview(block), size, seq, stop_at_origin, verify_crc, leave_out, out)
    return bytes(run.data), run.used, run.events, run.last_event


@settings(max_examples=300, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), max_size=3),
       cut=st.integers(min_value=0, max_value=len(BINLOG)), seq=st.integers(min_value=0, max_value=255),
       stop_at_origin=st.sampled_from([None, PRIMARY_ID, 0, 0xFFFFFFFF]), verify_crc=st.booleans(),
       leave_out=st.sets(st.integers(min_value=0, max_value=255), max_size=4),
       room=st.none() | st.integers(min_value=0, max_value=len(BINLOG) + 4096))
def test_compiled_framer_agrees_with_the_python_one(flips, cut, seq, stop_at_origin, verify_crc, leave_out, room):
    # Stored files are read back, but a damaged disk or a bug must not make the two loops
    # differ (or the compiled one read past the block).
    block = bytearray(BINLOG[4:])
    for offset, xor in flips:
        block[offset % len(block)] ^= xor
    block = bytes(block)
    size = min(cut, len(block))
    table = bytes(t in leave_out for t in range(256))
    compiled = _framed(block, size, seq, stop_at_origin, verify_crc, table, room)
    with python_loop(outbound, "_compiled_frame"):
        assert compiled == _framed(block, size, seq, stop_at_origin, verify_crc, table, room)


def test_frame_block_leaves_out_annotations_the_replica_did_not_ask_for(frame_loop):
    after_fde = file_events(BINLOG)[1][0]
    body = BINLOG[after_fde:]
    events = [event for _, event in file_events(BINLOG)[1:]]
    assert any(event[4] == ev.ANNOTATE_ROWS_EVENT for event in events), "the fixture has no annotations"
    stream = OutboundStream(_options(send_annotate_rows=False, replica_capability=4))
    assert stream.fast_path_allowed()
    run = frame_block(memoryview(body), len(body), 7, None, leave_out=stream.left_out_types())
    kept = [event for event in events if event[4] != ev.ANNOTATE_ROWS_EVENT]
    assert (run.used, run.events) == (len(body), len(kept))
    expected, seq = b"", 7
    for event in kept:  # sequence ids run on over the left-out events
        expected += (len(event) + 1).to_bytes(3, "little") + bytes((seq, 0)) + bytes(event)
        seq = (seq + 1) & 0xFF
    assert bytes(run.data) == expected
    # what the general path sends this replica is the same
    assert [bytes(e) for e in stream.filter([memoryview(e) for e in events], len(body))] == [bytes(e) for e in kept]


def test_frame_block_stops_before_an_event_that_fails_its_crc(frame_loop):
    # After the FDE, as a dump frames (the FDE of an active file has a CRC without its in-use flag).
    after_fde = file_events(BINLOG)[1][0]
    body = bytearray(BINLOG[after_fde:])
    offsets = [offset - after_fde for offset, _ in file_events(BINLOG)[1:]]
    body[offsets[5] + ev.HEADER_LEN + 1] ^= 0x40  # inside the sixth event's body
    checked = frame_block(memoryview(bytes(body)), len(body), 1, None, verify_crc=True)
    assert (checked.events, checked.used) == (5, offsets[5])
    assert frame_block(memoryview(bytes(body)), len(body), 1, None).events == len(offsets)  # unchecked: framed
    intact = BINLOG[after_fde:]
    assert frame_block(memoryview(intact), len(intact), 1, None, verify_crc=True).events == len(offsets)


def test_filter_skips_whole_groups_of_ignored_servers_and_counts_them():
    stream = OutboundStream(_options(ignore_server_ids=frozenset({PRIMARY_ID})))
    sent = stream.filter(_events(), len(BINLOG))
    groups = sum(1 for e in _events() if e[4] == ev.GTID_EVENT)
    assert all(e[4] != ev.GTID_EVENT for e in sent)
    assert {e[4] for e in sent} <= {ev.FORMAT_DESCRIPTION_EVENT, ev.GTID_LIST_EVENT, ev.BINLOG_CHECKPOINT_EVENT}
    assert stream.skipped == {"ignore_server_ids": groups}
    assert not stream.fast_path_allowed()


def test_a_registered_replica_still_gets_other_servers_groups():
    stream = OutboundStream(_options(replica_server_id=99))
    assert stream.fast_path_allowed() and not stream.sends_everything()
    assert [bytes(e) for e in stream.filter(_events(), len(BINLOG))] == [bytes(e) for e in _events()]


_GTID_OFFSETS = [(offset, ev.parse_mariadb_gtid(e)) for offset, e in file_events(BINLOG) if e[4] == ev.GTID_EVENT]


@pytest.mark.parametrize("have", range(len(_GTID_OFFSETS) - 1))
def test_gtid_dump_skips_groups_the_replica_has_and_announces_where_it_starts(have):
    # The fixture's groups follow one another, so a group ends where the next GTID starts; they
    # include a standalone DDL, a transaction with a statement that is not its COMMIT, and XA.
    events = _events()
    (_, last_had), (next_offset, _) = _GTID_OFFSETS[have], _GTID_OFFSETS[have + 1]
    wanted = Gtid(last_had.domain_id, last_had.server_id, last_had.seq_no)
    stream = OutboundStream(_options(), gtid_start=GtidStart({wanted.domain_id: wanted}, set(), False, BinlogState))
    stream.checksum_alg = ev.CHECKSUM_CRC32
    sent = stream.filter(events, len(BINLOG))
    later = [offset for offset, e in file_events(BINLOG) if offset >= next_offset]
    fake = sent[len(sent) - len(later) - 1]
    assert [bytes(e) for e in sent[len(sent) - len(later):]] == [bytes(e) for e in events[-len(later):]]
    assert [e[4] for e in sent[:len(sent) - len(later) - 1]] == [
        ev.FORMAT_DESCRIPTION_EVENT, ev.GTID_LIST_EVENT, ev.BINLOG_CHECKPOINT_EVENT]
    # Right before the first group sent: an artificial GTID_LIST naming the replica's GTID, with
    # the position where its group ends.
    header = ev.EventHeader.parse(fake)
    assert (header.event_type, header.flags, header.log_pos) == (
        ev.GTID_LIST_EVENT, ev.LOG_EVENT_ARTIFICIAL_F, next_offset)
    assert ev.checksum_matches(fake)
    assert [(g.domain_id, g.server_id, g.seq_no) for g in ev.parse_gtid_list(fake)] == [
        (wanted.domain_id, wanted.server_id, wanted.seq_no)]
    assert stream.skipped == {outbound.SKIP_ALREADY_APPLIED: have + 1}
    assert stream.gtid_start is None  # the start is met: the fast path may take over


def test_frame_block_leaves_an_event_of_16_mb_to_the_general_path(frame_loop):
    # Its packet needs splitting into 16 MB chunks, which the framer does not do.
    first = _events()[0]
    big = bytearray(0xFFFFFE)  # with the 00 status byte: a payload of exactly 0xFFFFFF bytes
    big[:ev.HEADER_LEN] = bytes(first[:ev.HEADER_LEN])
    big[9:13] = len(big).to_bytes(4, "little")
    block = bytes(first) + bytes(big)
    run = frame_block(memoryview(block), len(block), 1, None)
    assert (run.events, run.used) == (1, len(first))
    smaller = bytes(first) + bytes(big[:-1])[:9] + (len(big) - 1).to_bytes(4, "little") + bytes(big[13:-1])
    assert frame_block(memoryview(smaller), len(smaller), 1, None).events == 2


@pytest.mark.parametrize("crc", [True, False])
def test_the_next_files_rotate_sent_ahead_is_the_one_file_start_sends(crc):
    """A dump reaching an archived file sends its fake ROTATE before fetching it (downstream/dump.py):
    the same bytes as the ROTATE that opens it otherwise, and it is not sent twice."""
    fde = bytes(_events()[0])
    plain, ahead = OutboundStream(_options(first_rotate_crc=crc)), OutboundStream(_options(first_rotate_crc=crc))
    for stream in (plain, ahead):
        stream.file_start("mysql-bin.000001", 4, fde, first=True)
    opened = plain.file_start("mysql-bin.000002", 4, fde, first=False)
    announced = ahead.announce("mysql-bin.000002")
    assert [announced, *ahead.file_start("mysql-bin.000002", 4, fde, first=False)] == opened
    rotate = ev.parse_rotate(announced, ahead.checksum_alg == ev.CHECKSUM_CRC32)
    assert (rotate.next_file, rotate.position) == ("mysql-bin.000002", 4)
    # announced for one file, another opened (the dump moved on otherwise): that one gets its own
    other = OutboundStream(_options(first_rotate_crc=crc))
    other.file_start("mysql-bin.000001", 4, fde, first=True)
    other.announce("mysql-bin.000002")
    assert len(other.file_start("mysql-bin.000003", 4, fde, first=False)) == 2

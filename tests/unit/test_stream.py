"""The dump stream and group boundaries, on a real MariaDB 10.11 dump (tests/fixtures/wire)."""

import struct
import zlib
from pathlib import Path

import pytest

from relay.binlog import events as ev
from relay.binlog.groups import GroupTracker
from relay.binlog.stream import DumpStream, ResumePoint, StreamError, UpstreamEnded
from relay.protocol.packets import PacketReader
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

WIRE = Path(__file__).parent.parent / "fixtures" / "wire"
BINLOG = MARIADB_MIXED_BINLOG.read_bytes()


def _dump_packets() -> list[memoryview]:
    reader = PacketReader()
    reader.next_seq = 1  # the dump reply follows the client's packet 0
    reader.feed((WIRE / "dump_nonblocking.bin").read_bytes())
    packets = []
    while (payload := reader.next_packet()) is not None:
        packets.append(payload)
    return packets


def _clear_in_use(data: bytes) -> bytes:
    raw = bytearray(data)
    raw[4 + ev.FLAGS_OFFSET] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
    return bytes(raw)


def test_fresh_dump_reproduces_the_primarys_file():
    packets = _dump_packets()
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    segments = stream.process(packets[:-1])
    assert [(s.file, s.start, s.new_file) for s in segments] == [("mysql-bin.000001", 4, True)]
    stored = ev.BINLOG_MAGIC + b"".join(bytes(c) for c in segments[0].chunks)
    # identical up to the BINLOG_IN_USE flag of the (still active) file's FDE
    assert stored == _clear_in_use(BINLOG)
    with pytest.raises(UpstreamEnded):
        stream.process(packets[-1:])


def test_committed_end_only_at_group_ends():
    # In a MariaDB binlog every group starts with a GTID event, so the group ends are
    # exactly the offsets where a GTID starts, plus the file end when it is between groups.
    events = file_events(BINLOG)
    gtid_starts = {offset for offset, event in events if event[4] == ev.GTID_EVENT}
    reported = set()
    tracker = GroupTracker()
    for offset, event in events:
        if tracker.ends_group(event[4], event):
            reported.add(offset + len(event))
    first_gtid = min(gtid_starts)
    assert gtid_starts - {first_gtid} <= reported
    assert all(end in gtid_starts or end == len(BINLOG) or end < first_gtid for end in reported)
    assert len(gtid_starts) >= 8  # DDL, InnoDB, MyISAM, rollback, XA parts: the fixture has them


def test_committed_end_advances_per_batch_to_last_group_end():
    packets = _dump_packets()[:-1]
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    ends = []
    for packet in packets:
        for segment in stream.process([packet]):
            if segment.committed_end is not None:
                ends.append(segment.committed_end)
    tracker = GroupTracker()
    expected = [offset + len(event) for offset, event in file_events(BINLOG)
                if tracker.ends_group(event[4], event)]
    assert ends == expected


def test_event_not_starting_at_stored_end_is_refused():
    packets = _dump_packets()[:-1]
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    stream.process(packets[:4])
    with pytest.raises(StreamError, match="stored file ends at"):
        stream.process(packets[5:6])  # skips one event


def test_corrupt_event_fails_crc_check():
    packets = _dump_packets()[:-1]
    damaged = bytearray(packets[6])
    damaged[25] ^= 0xFF
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    stream.process(packets[:6])
    with pytest.raises(StreamError, match="CRC32"):
        stream.process([memoryview(bytes(damaged))])


def test_resume_checks_the_last_stored_event():
    events = file_events(BINLOG)
    offset, last = events[5]
    packets = _dump_packets()[:-1]
    # the primary re-sends from that event's start: fake rotate, FDE, then the events
    resumed = [p for p in packets if p[0] == 0 and (
        struct.unpack_from("<I", p, 14)[0] == 0 or struct.unpack_from("<I", p, 14)[0] > offset)]
    stream = DumpStream(ResumePoint("mysql-bin.000001", offset + len(last), last), ev.CHECKSUM_CRC32)
    rotate = _fake_rotate("mysql-bin.000001", offset)
    segments = stream.process([memoryview(b"\x00" + rotate)] + resumed[1:])
    assert segments[0].start == offset + len(last)
    other = bytearray(last)
    other[0] ^= 1  # another timestamp: another history
    stream = DumpStream(ResumePoint("mysql-bin.000001", offset + len(last), bytes(other)), ev.CHECKSUM_CRC32)
    with pytest.raises(StreamError, match="history does not match"):
        stream.process([memoryview(b"\x00" + rotate)] + resumed[1:])


def _fake_rotate(name: str, position: int) -> bytes:
    return ev.build_rotate(1, name, position, with_crc=True)


def test_rotation_to_next_file():
    packets = _dump_packets()[:-1]
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    stream.process(packets)
    end = len(BINLOG)
    real_rotate = bytearray(ev.build_rotate(7, "mysql-bin.000002", 4, True, timestamp=1, log_pos=end + 0,
                                            flags=0))
    length = len(real_rotate)
    struct.pack_into("<I", real_rotate, 13, end + length)
    real_rotate[-4:] = zlib.crc32(real_rotate[:-4]).to_bytes(4, "little")
    fde = bytes(packets[1][1:])  # the first file's FDE, moved to the new file (log_pos stays valid at 4)
    segments = stream.process([memoryview(b"\x00" + bytes(real_rotate)),
                               memoryview(b"\x00" + _fake_rotate("mysql-bin.000002", 4)),
                               memoryview(b"\x00" + fde)])
    assert [(s.file, s.start, s.new_file, s.committed_end) for s in segments] == [
        ("mysql-bin.000001", end, False, end + length),
        ("mysql-bin.000002", 4, True, 4 + len(fde)),
    ]


def _stored_bytes(segments) -> bytes:
    return b"".join(bytes(chunk) for segment in segments for chunk in segment.chunks)


@pytest.mark.parametrize("step", [1, 7, 64, 1000, 1 << 20])
def test_receive_raw_bytes_in_any_chunking_matches_the_file(step):
    raw = (WIRE / "dump_nonblocking.bin").read_bytes()
    raw = raw[: len(raw) - 9]  # without the closing EOF packet (5 bytes + 4 header)
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    segments = []
    for start in range(0, len(raw), step):
        segments.extend(stream.receive(raw[start : start + step]))
    assert ev.BINLOG_MAGIC + _stored_bytes(segments) == _clear_in_use(BINLOG)
    assert [s.committed_end for s in segments if s.committed_end][-1] == len(BINLOG)
    assert stream.event_counts[ev.GTID_EVENT] == len(
        [1 for _, e in file_events(BINLOG) if e[4] == ev.GTID_EVENT])


def test_receive_ends_at_eof_packet():
    raw = (WIRE / "dump_nonblocking.bin").read_bytes()
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    with pytest.raises(UpstreamEnded):
        stream.receive(raw)


def test_receive_joins_an_event_of_more_than_16_mb():
    from relay.protocol.packets import frame

    packets = _dump_packets()[:-1]
    seq = 1
    raw = b""
    for packet in packets:
        data, seq = frame(packet, seq)
        raw += data
    end = len(BINLOG)
    # a 17 MB ROTATE-sized event is unrealistic; a big QUERY (DDL) is a group of its own
    body = struct.pack("<IIBHH", 1, 0, 0, 0, 0) + b"\x00" + b"CREATE TABLE x (a INT) COMMENT '" + b"c" * (17 << 20) + b"'"
    length = ev.HEADER_LEN + len(body) + 4
    query = ev.with_checksum(ev.HEADER.pack(5, ev.QUERY_EVENT, 7, length, end + length, 0) + body)
    data, seq = frame(b"\x00" + query, seq)
    raw += data
    stream = DumpStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    segments = []
    for start in range(0, len(raw), 1 << 20):
        segments.extend(stream.receive(raw[start : start + (1 << 20)]))
    assert _stored_bytes(segments)[-len(query):] == query
    assert segments[-1].committed_end == end + length

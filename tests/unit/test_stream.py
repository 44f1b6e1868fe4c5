"""The dump stream and group boundaries, on a real MariaDB 10.11 dump (tests/fixtures/wire)."""

import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.binlog import events as ev
from relay.binlog.groups import GroupTracker
from relay.protocol.packets import PacketReader
from relay.replication import stream as stream_module
from relay.replication.stream import IngestStream, ResumePoint, StreamError, UpstreamEnded
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events
from tests.support.loops import LOOPS, NOT_BUILT, python_loop, select_loop

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
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
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
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
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
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    stream.process(packets[:4])
    with pytest.raises(StreamError, match="stored file ends at"):
        stream.process(packets[5:6])  # skips one event


def test_corrupt_event_fails_crc_check():
    packets = _dump_packets()[:-1]
    damaged = bytearray(packets[6])
    damaged[25] ^= 0xFF
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
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
    stream = IngestStream(ResumePoint("mysql-bin.000001", offset + len(last), last), ev.CHECKSUM_CRC32)
    rotate = _fake_rotate("mysql-bin.000001", offset)
    segments = stream.process([memoryview(b"\x00" + rotate)] + resumed[1:])
    assert segments[0].start == offset + len(last)
    other = bytearray(last)
    other[0] ^= 1  # another timestamp: another history
    stream = IngestStream(ResumePoint("mysql-bin.000001", offset + len(last), bytes(other)), ev.CHECKSUM_CRC32)
    with pytest.raises(StreamError, match="history does not match"):
        stream.process([memoryview(b"\x00" + rotate)] + resumed[1:])


@pytest.mark.parametrize("writer, accepted", [(7, True), (8, False)])  # the fixture's primary is server_id 7
def test_resume_checks_who_wrote_the_file(writer, accepted):
    events = file_events(BINLOG)
    offset, last = events[5]
    resumed = [p for p in _dump_packets()[:-1] if p[0] == 0 and (
        struct.unpack_from("<I", p, 14)[0] == 0 or struct.unpack_from("<I", p, 14)[0] > offset)]
    # a dump resumed past offset 4 opens with the file's FDE, in-use flag cleared and log_pos 0
    fde = bytearray(events[0][1][:-4])
    fde[ev.FLAGS_OFFSET] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
    fde[13:17] = bytes(4)
    stream = IngestStream(ResumePoint("mysql-bin.000001", offset + len(last), last, writer), ev.CHECKSUM_CRC32)
    packets = [memoryview(b"\x00" + _fake_rotate("mysql-bin.000001", offset)),
               memoryview(b"\x00" + ev.with_checksum(bytes(fde)))] + resumed[1:]
    if accepted:
        assert stream.process(packets)[0].start == offset + len(last)
    else:
        with pytest.raises(StreamError, match="written by server_id 8, but the upstream's mysql-bin.000001 by "
                                              "server_id 7: refusing to mix"):
            stream.process(packets)


def _fake_rotate(name: str, position: int) -> bytes:
    return ev.build_rotate(1, name, position, with_crc=True)


def test_rotation_to_next_file():
    packets = _dump_packets()[:-1]
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
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


# ``receive`` runs group content through the compiled loop (relay/binlog/_scan.c) when it is
# built, else through the same checks in Python: every receive test runs both ways.
COMPILED_SCAN = stream_module._compiled_scan


@pytest.fixture(params=LOOPS)
def scan_loop(request, monkeypatch):
    return select_loop(request.param, monkeypatch, stream_module, "_compiled_scan")


def _stored_bytes(segments) -> bytes:
    return b"".join(bytes(chunk) for segment in segments for chunk in segment.chunks)


@pytest.mark.parametrize("step", [1, 7, 64, 1000, 1 << 20])
def test_receive_raw_bytes_in_any_chunking_matches_the_file(step, scan_loop):
    raw = (WIRE / "dump_nonblocking.bin").read_bytes()
    raw = raw[: len(raw) - 9]  # without the closing EOF packet (5 bytes + 4 header)
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    segments = []
    for start in range(0, len(raw), step):
        segments.extend(stream.receive(raw[start : start + step]))
    assert ev.BINLOG_MAGIC + _stored_bytes(segments) == _clear_in_use(BINLOG)
    assert [s.committed_end for s in segments if s.committed_end][-1] == len(BINLOG)
    assert stream.event_counts[ev.GTID_EVENT] == len(
        [1 for _, e in file_events(BINLOG) if e[4] == ev.GTID_EVENT])


def test_receive_ends_at_eof_packet(scan_loop):
    raw = (WIRE / "dump_nonblocking.bin").read_bytes()
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    with pytest.raises(UpstreamEnded):
        stream.receive(raw)


def test_receive_joins_an_event_of_more_than_16_mb(scan_loop):
    from relay.protocol.packets import frame

    packets = _dump_packets()[:-1]
    seq = 1
    raw = b""
    for packet in packets:
        data, seq = frame(packet, seq)
        raw += data
    end = len(BINLOG)
    # a 17 MB ROTATE-sized event is unrealistic; a big QUERY (DDL) is a group of its own
    body = (struct.pack("<IIBHH", 1, 0, 0, 0, 0) + b"\x00"
            + b"CREATE TABLE x (a INT) COMMENT '" + b"c" * (17 << 20) + b"'")
    length = ev.HEADER_LEN + len(body) + 4
    query = ev.with_checksum(ev.HEADER.pack(5, ev.QUERY_EVENT, 7, length, end + length, 0) + body)
    data, seq = frame(b"\x00" + query, seq)
    raw += data
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    segments = []
    for start in range(0, len(raw), 1 << 20):
        segments.extend(stream.receive(raw[start : start + (1 << 20)]))
    assert _stored_bytes(segments)[-len(query):] == query
    assert segments[-1].committed_end == end + length


# ------------------------------------------------------------ the compiled loop


def _dump_bytes() -> bytes:
    raw = (WIRE / "dump_nonblocking.bin").read_bytes()
    return raw[: len(raw) - 9]  # without the closing EOF packet


def _receive_all(raw: bytes, step: int) -> tuple[list, IngestStream]:
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    segments = []
    for start in range(0, len(raw), step):
        segments.extend(stream.receive(raw[start : start + step]))
    return segments, stream


def _outcome(segments, stream):
    return ([(s.file, s.start, s.size, s.committed_end, s.last_event_start, s.new_file,
              b"".join(bytes(c) for c in s.chunks)) for s in segments],
            stream.event_counts, stream.event_bytes, stream.position, stream.last_event_timestamp)


@pytest.mark.parametrize("step", [1, 5, 24, 100, 333, 4096, 1 << 20])
def test_compiled_loop_gives_what_the_python_loop_gives(step):
    compiled = _outcome(*_receive_all(_dump_bytes(), step))
    with python_loop(stream_module, "_compiled_scan"):
        assert compiled == _outcome(*_receive_all(_dump_bytes(), step))


def _packet_offsets(raw: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(raw):
        offsets.append(pos)
        pos += 4 + int.from_bytes(raw[pos : pos + 3], "little")
    return offsets


def _rows_packet_offsets(raw: bytes) -> list[int]:
    """Packets of rows events (MariaDB writes v1 rows events)."""
    return [pos for pos in _packet_offsets(raw) if raw[pos + 9] in (23, 24, 25)]


def test_compiled_loop_takes_group_content():
    # The speed comes from the compiled loop taking the group content itself; this fails if it
    # stops taking it (the other tests would still pass, through the Python loop).
    assert COMPILED_SCAN is not None, NOT_BUILT
    raw = _dump_bytes()
    packets = _packet_offsets(raw)
    first = next(i for i, pos in enumerate(packets) if raw[pos + 9] == ev.ANNOTATE_ROWS_EVENT)
    xid = next(i for i in range(first, len(packets)) if raw[packets[i] + 9] == ev.XID_EVENT)
    content = [raw[pos + 5 : pos + 5 + _event_length(raw, pos)] for pos in packets[first:xid]]
    assert [event[4] for event in content] == [ev.ANNOTATE_ROWS_EVENT, ev.TABLE_MAP_EVENT, 23]
    start = packets[first]
    counts, sizes = [0] * 256, [0] * 256
    stopped_at, seq, position, run = COMPILED_SCAN(
        raw, start, raw[start + 3], _log_pos(raw, start) - _event_length(raw, start), True,
        stream_module._COMPILED_KINDS, counts, sizes)
    assert run == b"".join(content)
    assert [(t, counts[t], sizes[t]) for t in range(256) if counts[t]] == sorted(
        (event[4], 1, len(event)) for event in content)
    # it stops at the group end (XID), which is the Python loop's to handle
    assert stopped_at == packets[xid] and seq == raw[packets[xid] + 3]
    assert position == _log_pos(raw, packets[xid]) - _event_length(raw, packets[xid])


def _event_length(raw: bytes, packet: int) -> int:
    return struct.unpack_from("<I", raw, packet + 5 + 9)[0]


def _log_pos(raw: bytes, packet: int) -> int:
    return struct.unpack_from("<I", raw, packet + 5 + 13)[0]


def _damaged(raw: bytes, packet: int, offset_in_event: int, xor: int = 0xFF) -> bytes:
    data = bytearray(raw)
    data[packet + 5 + offset_in_event] ^= xor
    return bytes(data)


def test_receive_refuses_a_corrupt_rows_event(scan_loop):
    raw = _dump_bytes()
    rows_at = _rows_packet_offsets(raw)[1]
    with pytest.raises(StreamError, match="failed its CRC32"):
        _receive_all(_damaged(raw, rows_at, 25), 1 << 20)


def test_receive_refuses_a_rows_event_at_the_wrong_position(scan_loop):
    raw = _dump_bytes()
    rows_at = _rows_packet_offsets(raw)[1]
    data = bytearray(raw)
    struct.pack_into("<I", data, rows_at + 5 + 13, _log_pos(raw, rows_at) + 8)
    data[rows_at + 4 + _event_length(raw, rows_at) + 1 - 4 : rows_at + 4 + _event_length(raw, rows_at) + 1] = \
        zlib.crc32(data[rows_at + 5 : rows_at + 1 + _event_length(raw, rows_at)]).to_bytes(4, "little")
    with pytest.raises(StreamError, match="stored file ends at"):
        _receive_all(bytes(data), 1 << 20)


def test_receive_refuses_a_wrong_sequence_id_inside_a_group(scan_loop):
    raw = _dump_bytes()
    rows_at = _rows_packet_offsets(raw)[1]
    data = bytearray(raw)
    data[rows_at + 3] = (data[rows_at + 3] + 1) & 0xFF
    with pytest.raises(StreamError, match="sequence number wrong"):
        _receive_all(bytes(data), 1 << 20)


@given(st.binary(max_size=3000), st.integers(0, 17), st.integers(0, 2**32 - 1))
def test_compiled_crc32_equals_zlib(data, offset, start):
    """Any length (the carry-less path takes 64 bytes and more, by 16), any alignment, any start."""
    from relay.binlog import _scan

    view = memoryview(data)[offset:]
    assert _scan.crc32(view, start) == zlib.crc32(view, start)
    assert _scan.crc32(view) == zlib.crc32(view)


def test_compiled_crc32_without_carry_less_multiplication_equals_zlib():
    """The table path alone (CPUs without PCLMULQDQ), forced in a process of its own."""
    from relay.binlog import _scan

    cpu_flags = Path("/proc/cpuinfo").read_text().split()
    assert _scan.CLMUL == ("pclmulqdq" in cpu_flags and "sse4_1" in cpu_flags), "the CPU's loop is not chosen"
    check = ("import os, zlib; from relay.binlog import _scan; data = os.urandom(1 << 16); "
             "assert not _scan.CLMUL, 'BINLOG_RELAY_NO_CLMUL ignored'; "
             "assert all(_scan.crc32(data[i:i + n], i) == zlib.crc32(data[i:i + n], i) "
             "for i in range(9) for n in (0, 1, 63, 64, 65, 1000, 40000))")
    subprocess.run([sys.executable, "-c", check], check=True, env={**os.environ, "BINLOG_RELAY_NO_CLMUL": "1"})


DUMP_BYTES = _dump_bytes()


def _outcome_or_error(raw: bytes, step: int):
    try:
        return _outcome(*_receive_all(raw, step))
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return type(exc).__name__, str(exc)


@settings(max_examples=400, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
                      min_size=1, max_size=4),
       step=st.sampled_from([3, 64, 1000, 1 << 20]))
def test_compiled_loop_agrees_on_damaged_streams(flips, step):
    # The compiled loop reads bytes from the network: on any damage it must stop where the
    # Python loop would decide, never take what Python would refuse, and never crash.
    raw = bytearray(DUMP_BYTES)
    for offset, xor in flips:
        raw[offset % len(raw)] ^= xor
    compiled = _outcome_or_error(bytes(raw), step)
    with python_loop(stream_module, "_compiled_scan"):
        assert compiled == _outcome_or_error(bytes(raw), step)


def _heartbeat_v2(name: str, position: int) -> bytes:
    """HEARTBEAT_LOG_EVENT_V2 as MySQL 8.0.26+ writes it (libbinlogevents Heartbeat codec: fields
    of a length-encoded type and length, the position a length-encoded integer, 0 ends them)."""
    encoded_position = b"\xfe" + position.to_bytes(8, "little")
    body = bytes([1, len(name)]) + name.encode() + bytes([2, len(encoded_position)]) + encoded_position + b"\x00"
    header = struct.pack("<IBIIIH", 0, ev.HEARTBEAT_LOG_EVENT_V2, 7, ev.HEADER_LEN + len(body) + 4, 0,
                         ev.LOG_EVENT_ARTIFICIAL_F)
    return ev.with_checksum(header + body)


def test_a_mysql_heartbeat_v2_is_read_not_stored(scan_loop):
    packets = _dump_packets()[:-1]
    beyond_4_gib = (5 << 32) + 123
    heartbeat = b"\x00" + _heartbeat_v2("binlog.000042", beyond_4_gib)
    middle = len(packets) // 2
    payloads = [bytes(p) for p in packets[:middle]] + [heartbeat] + [bytes(p) for p in packets[middle:]]
    data, seq = bytearray(), 1
    for payload in payloads:
        data += struct.pack("<I", len(payload) | (seq << 24)) + payload
        seq = (seq + 1) & 0xFF
    stream = IngestStream(ResumePoint(None, 4), ev.CHECKSUM_CRC32)
    segments = stream.receive(bytes(data))
    stored = ev.BINLOG_MAGIC + b"".join(bytes(c) for s in segments for c in s.chunks)
    assert stored == _clear_in_use(BINLOG)
    assert stream.primary_position == ("binlog.000042", beyond_4_gib)

"""Framing and generic packets: bytes in, bytes out."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.protocol.packets import (
    MAX_CHUNK,
    PacketReader,
    ProtocolError,
    build_err,
    build_ok,
    frame,
    frame_events,
    lenenc_int,
    parse_err,
    parse_ok,
    read_lenenc_count,
    read_lenenc_int,
)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_lenenc_roundtrip(value):
    encoded = lenenc_int(value)
    assert read_lenenc_int(encoded, 0) == (value, len(encoded))


def _read_all(data: bytes, step: int) -> list[bytes]:
    reader = PacketReader()
    out = []
    for start in range(0, len(data), step):
        reader.feed(data[start : start + step])
        while (payload := reader.next_packet()) is not None:
            out.append(bytes(payload))
    return out


@pytest.mark.parametrize("size", [0, 1, MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK])
def test_large_payloads_split_and_join(size):
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    data, next_seq = frame(payload, 0)
    chunks = size // MAX_CHUNK + 1
    assert next_seq == chunks
    # an exact multiple of 0xFFFFFF is closed by an empty chunk
    assert len(data) == size + 4 * chunks
    if size and size % MAX_CHUNK == 0:
        assert data[-4:] == bytes((0, 0, 0, chunks - 1))
    assert _read_all(data, 1 << 20) == [payload]


@settings(max_examples=50)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8), st.integers(min_value=1, max_value=64))
def test_reader_handles_any_chunking(payloads, step):
    seq = 0
    stream = b""
    for payload in payloads:
        data, seq = frame(payload, seq)
        stream += data
    assert _read_all(stream, step) == payloads


def test_wrong_sequence_number_is_an_error():
    data, _ = frame(b"abc", 5)
    reader = PacketReader()
    reader.feed(data)
    with pytest.raises(ProtocolError, match="sequence"):
        reader.next_packet()


def test_ok_and_err_roundtrip():
    ok = parse_ok(build_ok(affected_rows=300, last_insert_id=7, status=2, warnings=1))
    assert (ok.affected_rows, ok.last_insert_id, ok.status, ok.warnings) == (300, 7, 2, 1)
    err = parse_err(build_err(1236, "Could not find first log file name in binary log index file"))
    assert (err.code, err.sqlstate) == (1236, "HY000")
    assert "first log file" in err.message


def test_truncated_lenenc_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        read_lenenc_int(b"\xfc\x01", 0)


def test_a_count_is_read_by_the_same_reader_with_the_callers_error():
    # the binlog and row decoders read lenenc counts with it, raising their own kind
    assert read_lenenc_count(b"\x00\xfd\x01\x02\x03", 1) == (0x030201, 5)
    for bad in (b"\xfb", b"\xff", b"\xfe\x01", b""):
        with pytest.raises(KeyError):
            read_lenenc_count(bad, 0, KeyError)
    with pytest.raises(ProtocolError):
        read_lenenc_count(b"\xfb", 0)


def test_frame_events_matches_frame_of_each_dump_packet():
    events = [b"\x01" * 10, memoryview(b"\x02" * 300), b"\x03" * (MAX_CHUNK - 1), b"\x04" * MAX_CHUNK]
    parts: list = []
    assert frame_events(events, 250, parts) == (250 + 1 + 1 + 2 + 2) & 0xFF
    expected, seq = b"", 250
    for event in events:
        data, seq = frame(b"\x00" + bytes(event), seq)
        expected += data
    assert b"".join(parts) == expected


def test_a_packet_over_the_limit_is_refused_from_its_header():
    from relay.protocol.packets import PacketTooLarge

    reader = PacketReader()
    reader.max_packet = 1000
    reader.feed(b"\xff\xff\xff\x00" + b"\x00" * 100)  # a 16 MB chunk announced, 100 bytes of it here
    with pytest.raises(PacketTooLarge) as refused:
        reader.next_packet()
    assert (refused.value.length, refused.value.limit) == (0xFFFFFF, 1000)
    reader = PacketReader()
    reader.max_packet = 1000
    reader.feed(struct.pack("<I", 1000) + b"x" * 1000)  # exactly the limit: fine
    assert len(reader.next_packet()) == 1000

"""The replica side of semi-sync: a MariaDB semi-sync dump turned into a plain one, with the
events to acknowledge, and the ACK packet (semisync_slave.cc)."""

import struct

from relay.binlog import events as ev
from relay.protocol.packets import PacketReader
from relay.replication.semisync import Ack, SemiSyncDeframer, build_ack
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
EVENTS = [bytes(event) for _, event in file_events(BINLOG)]


def _semi_sync_dump() -> tuple[bytes, list[int]]:
    """The fixture's events as a semi-sync primary sends them: ef 01 on each XID (a transaction's
    last event), numbering from 1 again after each of those; and the positions to acknowledge."""
    fake_rotate = ev.build_rotate(7, "mysql-bin.000001", 4, with_crc=True)
    data, seq, wanted = bytearray(), 1, []
    for event in [fake_rotate, *EVENTS]:
        flag = 1 if event[4] == ev.XID_EVENT else 0
        payload = b"\x00\xef" + bytes([flag]) + event
        data += struct.pack("<I", len(payload) | (seq << 24)) + payload
        seq = 1 if flag else seq + 1
        if flag:
            wanted.append(ev.EventHeader.parse(event).log_pos)
    return bytes(data), wanted


def test_the_plain_stream_comes_out_cut_after_each_event_to_acknowledge():
    data, wanted = _semi_sync_dump()
    deframer = SemiSyncDeframer(ev.CHECKSUM_CRC32)
    pieces = []
    for start in range(0, len(data), 333):
        pieces += deframer.feed(data[start:start + 333])
    assert [ack for _, ack in pieces if ack] == [Ack("mysql-bin.000001", position) for position in wanted]
    by_end = {ev.EventHeader.parse(e).log_pos: e for e in EVENTS}
    assert all(piece.endswith(by_end[ack.position]) for piece, ack in pieces if ack)  # cut right after it
    reader = PacketReader()
    reader.next_seq = 1
    reader.feed(b"".join(piece for piece, _ in pieces))
    plain = []
    while (payload := reader.next_packet()) is not None:
        assert payload[0] == 0
        plain.append(bytes(payload[1:]))
    assert plain[1:] == EVENTS


def test_the_ack_names_the_position_and_file_in_its_own_packet():
    packet = build_ack(Ack("mysql-bin.000042", 123456))
    assert packet[:4] == struct.pack("<I", 1 + 8 + 16)  # sequence 0
    assert packet[4:] == b"\xef" + struct.pack("<Q", 123456) + b"mysql-bin.000042"

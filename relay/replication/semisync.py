"""Semi-sync on the replica side (MariaDB semisync_slave.cc): the primary prefixes every event
packet of the dump with ``ef | flag`` and, when flag bit 0 is set, waits for an ACK of that
event (the last of a transaction) before the commit returns to its client.

Sans-IO.  ``SemiSyncDeframer`` takes the raw dump bytes and gives them back as a plain dump
stream (``00 | event`` packets, numbered 1, 2, ... as the dump parsers expect), cut after each
event that wants an ACK, with what to acknowledge; ``build_ack`` makes the ACK packet.  On the
primary's side the dump's packets (``00 ef flag | event``) are ``ServerConnection.send_events``'s.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..binlog import events as ev
from ..errors import RetryableError
from ..protocol.codes import ACK_WANTED, EVENT_PACKET, SEMI_SYNC_MAGIC
from ..protocol.packets import PacketReader, frame


@dataclass(frozen=True)
class Ack:
    """Acknowledge the event that ends at ``position`` of the primary's ``file``."""

    file: str
    position: int


class SemiSyncError(RetryableError):
    """The primary's semi-sync stream is not as MariaDB sends it."""


class SemiSyncDeframer:
    def __init__(self, checksum_alg: int) -> None:
        self._reader = PacketReader()
        self._reader.next_seq = 1  # the dump's replies follow the client's packet 0
        self._out_seq = 1
        self.checksum_alg = checksum_alg
        self.primary_file = ""  # from the primary's ROTATE events, for the ACKs

    def feed(self, data: bytes | bytearray) -> list[tuple[bytes, Ack | None]]:
        """Plain dump bytes, in pieces: each piece that ends with an event to acknowledge comes
        with its Ack (to send once that event is safely stored)."""
        self._reader.feed(data)
        pieces: list[tuple[bytes, Ack | None]] = []
        out = bytearray()
        payload: bytes | memoryview | None  # bytes once a semi-sync header is taken off
        while (payload := self._reader.next_packet()) is not None:
            ack = None
            if payload[0] == EVENT_PACKET:
                if len(payload) < 3 or payload[1] != SEMI_SYNC_MAGIC:
                    raise SemiSyncError("Missing magic number for semi-sync packet")
                event = payload[3:]
                self._follow(event)
                if payload[2] & ACK_WANTED:
                    ack = Ack(self.primary_file, ev.EventHeader.parse(event).log_pos)
                payload = bytes((EVENT_PACKET,)) + bytes(event)
            data, self._out_seq = frame(payload, self._out_seq)
            out += data
            if ack is not None:
                pieces.append((bytes(out), ack))
                out = bytearray()
                # the primary starts its numbering again after an event it waits on (flush_net)
                self._reader.next_seq = 1
        if out:
            pieces.append((bytes(out), None))
        return pieces

    def _follow(self, event: memoryview) -> None:
        etype = event[4]
        if etype == ev.FORMAT_DESCRIPTION_EVENT:
            self.checksum_alg = event[-5]
        elif etype == ev.ROTATE_EVENT:
            self.primary_file = ev.parse_rotate(event, self.checksum_alg == ev.CHECKSUM_CRC32).next_file


def build_ack(ack: Ack) -> bytes:
    """The ACK packet (its own sequence, starting at 0): ef | position u64 | file name."""
    payload = bytes([SEMI_SYNC_MAGIC]) + struct.pack("<Q", ack.position) + ack.file.encode("utf-8")
    return frame(payload, 0)[0]


# ------------------------------------------------------------ the primary side (downstream)


class AckReader:
    """The ACKs a semi-sync replica sends during a dump: each its own packet (sequence 0) of
    ``ef | position u64 | file name`` (semisync_slave.cc slave_reply)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray) -> list[Ack]:
        self._buffer += data
        acks = []
        while len(self._buffer) >= 4:
            length = int.from_bytes(self._buffer[:3], "little")
            if len(self._buffer) < 4 + length:
                break
            payload = bytes(self._buffer[4:4 + length])
            del self._buffer[:4 + length]
            if len(payload) < 9 or payload[0] != SEMI_SYNC_MAGIC:
                raise SemiSyncError(f"a packet that is not a semi-sync ACK during the dump ({payload[:9].hex()})")
            acks.append(Ack(payload[9:].decode("utf-8", "replace"), struct.unpack_from("<Q", payload, 1)[0]))
        return acks

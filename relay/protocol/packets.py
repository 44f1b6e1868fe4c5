"""MySQL packet framing and the generic OK / ERR / EOF packets (docs/protocol.md 1).

A packet is ``len u24 LE | seq u8 | payload``.  A payload of 0xFFFFFF bytes or more
is cut into 0xFFFFFF-byte chunks, and a message whose length is an exact multiple of
0xFFFFFF is closed by an empty chunk.  Everything here works on bytes only.

The framing functions here are the only Python that writes a packet header; the connections
(``client.ClientConnection``, ``server.ServerConnection``) are the only callers that number
packets.  The one other framer is the serve loop of ``binlog/_scan.c``, which numbers a block from
the id ``ServerConnection.sequence_id`` gives it and hands the block back to the connection.

The length-encoded integer reader here is the only one: the binlog and row decoders use it too
(``read_lenenc_count``, with their own error kind).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InputError, RetryableError
from .codes import EOF_PACKET, ERR_PACKET, EVENT_PACKET, OK_PACKET

MAX_CHUNK = 0xFFFFFF

_U16 = struct.Struct("<H")
_U24_SEQ = struct.Struct("<HBB")  # low u16, high u8, seq
_PACKET_HEADER = struct.Struct("<I")  # u24 length | seq << 24
_EVENT_PACKET_HEADER = struct.Struct("<IB")  # the same, then a dump packet's first byte (00)
EVENT_PACKET_OVERHEAD = _EVENT_PACKET_HEADER.size  # what a dump packet adds to its event


class ProtocolError(InputError):
    """The peer sent bytes that do not follow the MySQL protocol.  Of no kind of its own: the caller
    that knows the peer decides (ingest retries, a downstream session is closed)."""


class PacketTooLarge(ProtocolError):
    """A packet over the reader's limit, refused from its header before its body is buffered.
    ``seq`` is the sequence id of the refused chunk: the error reply takes the one after it."""

    def __init__(self, length: int, limit: int, seq: int = 0, which_limit: str = "") -> None:
        super().__init__(f"a packet of {length} bytes or more, over the limit of {limit} bytes{which_limit}")
        self.length = length
        self.limit = limit
        self.seq = seq


PACKET_TOO_LARGE_MESSAGE = "Got a packet bigger than 'max_allowed_packet' bytes"


@dataclass(frozen=True)
class ServerError(RetryableError):
    """An ERR packet: the peer refused what we asked."""

    code: int
    sqlstate: str
    message: str

    def __str__(self) -> str:
        return f"ERROR {self.code} ({self.sqlstate}): {self.message}"


@dataclass(frozen=True)
class OkPacket:
    affected_rows: int
    last_insert_id: int
    status: int
    warnings: int
    info: bytes


# ---------------------------------------------------------------- lenenc integers


def lenenc_int(value: int) -> bytes:
    if value < 0xFB:
        return bytes((value,))
    if value <= 0xFFFF:
        return b"\xfc" + value.to_bytes(2, "little")
    if value <= 0xFFFFFF:
        return b"\xfd" + value.to_bytes(3, "little")
    return b"\xfe" + value.to_bytes(8, "little")


def lenenc_str(value: bytes) -> bytes:
    return lenenc_int(len(value)) + value


def read_lenenc_int(data: bytes | memoryview, pos: int) -> tuple[int | None, int]:
    """Returns (value, next position); value is None for the NULL marker 0xFB."""
    try:
        first = data[pos]
        if first < 0xFB:
            return first, pos + 1
        if first == 0xFB:
            return None, pos + 1
        width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
        if width is None or pos + 1 + width > len(data):
            raise ProtocolError(f"bad length-encoded integer at offset {pos}")
        return int.from_bytes(data[pos + 1 : pos + 1 + width], "little"), pos + 1 + width
    except IndexError:
        raise ProtocolError(f"length-encoded integer runs past the packet at offset {pos}") from None


def read_lenenc_count(data: bytes | memoryview, pos: int,
                      error: type[Exception] = ProtocolError) -> tuple[int, int]:
    """(value, next position) of a length-encoded integer where a count or a length must be: a
    NULL marker, a bad first byte or one running past ``data`` raise ``error`` (the caller's
    layer's kind: the binlog and row decoders read the same integers as the protocol)."""
    try:
        value, end = read_lenenc_int(data, pos)
    except ProtocolError as bad:
        raise error(str(bad)) from None
    if value is None:
        raise error(f"a NULL marker where a length-encoded integer belongs at offset {pos}")
    return value, end


def read_lenenc_str(data: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_lenenc_int(data, pos)
    if length is None:
        return None, pos
    if pos + length > len(data):
        raise ProtocolError(f"length-encoded string runs past the packet at offset {pos}")
    return bytes(data[pos : pos + length]), pos + length


def read_nul_str(data: bytes | memoryview, pos: int) -> tuple[bytes, int]:
    raw = bytes(data[pos:])
    end = raw.find(b"\x00")
    if end < 0:
        raise ProtocolError(f"string at offset {pos} has no terminating NUL")
    return raw[:end], pos + end + 1


# ---------------------------------------------------------------- framing


def frame(payload: bytes | memoryview, seq: int) -> tuple[bytes, int]:
    """Frame one message; returns (bytes to send, next sequence id)."""
    size = len(payload)
    if size < MAX_CHUNK:
        return _PACKET_HEADER.pack(size | seq << 24) + bytes(payload), (seq + 1) & 0xFF
    parts = []
    offset = 0
    while True:
        chunk = payload[offset : offset + MAX_CHUNK]
        parts.append(_PACKET_HEADER.pack(len(chunk) | seq << 24))
        parts.append(bytes(chunk))
        seq = (seq + 1) & 0xFF
        offset += len(chunk)
        if len(chunk) < MAX_CHUNK:
            return b"".join(parts), seq


def frame_events(events: Iterable[bytes | memoryview], seq: int, out: list[bytes | bytearray | memoryview]) -> int:
    """Dump packets ``00 | event`` numbered from ``seq``, appended to ``out``: each a header and
    the event itself (not copied), or for an event of 16 MB or more the chunks ``frame`` cuts.
    Returns the next sequence id."""
    pack = _EVENT_PACKET_HEADER.pack
    status = EVENT_PACKET
    for event in events:
        size = len(event) + 1
        if size >= MAX_CHUNK:
            data, seq = frame(bytes((status,)) + bytes(event), seq)
            out.append(data)
            continue
        out.append(pack(size | (seq << 24), status))
        out.append(event)
        seq = (seq + 1) & 0xFF
    return seq


def event_packet_header(length: int, seq: int, prefix: bytes = bytes((EVENT_PACKET,))) -> bytes:
    """The start of a dump packet for an event of ``length`` bytes whose bytes follow apart
    (streamed from a file): the packet header and ``prefix`` (``00``, or semi-sync's ``00 ef 00``).
    The packet must be whole: ``length + len(prefix)`` under 16 MB."""
    size = length + len(prefix)
    if size >= MAX_CHUNK:
        raise ValueError(f"an event of {length} bytes needs more than one packet")
    return _PACKET_HEADER.pack(size | seq << 24) + prefix


class PacketReader:
    """Splits a byte stream into logical packets (continuation chunks joined).

    Bytes arrive in chunks of any size.  The reader keeps one contiguous ``bytes``
    buffer and joins later chunks only once a packet needs them, so a 20 MB packet
    arriving in 64 KB reads costs one join, not hundreds.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0
        self._pending: list[bytes | bytearray] = []
        self._pending_size = 0
        self.next_seq = 0  # the sequence id the next chunk must carry
        self.check_seq = True
        self.max_packet: int | None = None  # a logical packet longer than this raises PacketTooLarge

    def feed(self, data: bytes | bytearray) -> None:
        if data:
            self._pending.append(data)
            self._pending_size += len(data)

    def take_unparsed(self) -> bytes:
        rest = b"".join([self._buf[self._pos :], *self._pending])
        self._buf, self._pos = b"", 0
        self._pending.clear()
        self._pending_size = 0
        return rest

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos + self._pending_size

    def _ensure(self, needed: int) -> bool:
        """Make at least ``needed`` bytes contiguous from the current position."""
        available = len(self._buf) - self._pos
        if available >= needed:
            return True
        if available + self._pending_size < needed:
            return False
        self._buf = b"".join([self._buf[self._pos :], *self._pending])
        self._pos = 0
        self._pending.clear()
        self._pending_size = 0
        return True

    def next_packet(self) -> memoryview | None:
        """The next complete logical packet's payload, or None if more bytes are needed."""
        if not self._ensure(4):
            return None
        low, high, seq = _U24_SEQ.unpack_from(self._buf, self._pos)
        length = low | (high << 16)
        self._check_size(length, seq)
        if length == MAX_CHUNK:
            return self._next_multi_chunk_packet()
        if not self._ensure(4 + length):
            return None
        self._check_seq(seq)
        start = self._pos + 4
        self._pos = start + length
        return memoryview(self._buf)[start : self._pos]

    def _next_multi_chunk_packet(self) -> memoryview | None:
        # Walk the chunk headers without consuming until the whole message is here.
        total_needed = 0
        offset = 0
        seqs = []
        while True:
            if not self._ensure(offset + 4):
                return None
            low, high, seq = _U24_SEQ.unpack_from(self._buf, self._pos + offset)
            length = low | (high << 16)
            seqs.append(seq)
            offset += 4 + length
            total_needed += length
            self._check_size(total_needed, seq)
            if not self._ensure(offset):
                return None
            if length < MAX_CHUNK:
                break
        parts = []
        pos = self._pos
        for seq in seqs:
            self._check_seq(seq)
            low, high, _ = _U24_SEQ.unpack_from(self._buf, pos)
            length = low | (high << 16)
            parts.append(self._buf[pos + 4 : pos + 4 + length])
            pos += 4 + length
        self._pos = pos
        return memoryview(b"".join(parts))

    def _check_size(self, length: int, seq: int) -> None:
        if self.max_packet is not None and length > self.max_packet:
            raise PacketTooLarge(length, self.max_packet, seq)

    def _check_seq(self, seq: int) -> None:
        if self.check_seq and seq != self.next_seq:
            raise ProtocolError(f"packet sequence number wrong: got {seq}, expected {self.next_seq}")
        self.next_seq = (seq + 1) & 0xFF


# ---------------------------------------------------------------- generic replies


def is_err(payload: bytes | memoryview) -> bool:
    return len(payload) >= 3 and payload[0] == ERR_PACKET


def is_eof(payload: bytes | memoryview) -> bool:
    return len(payload) < 9 and payload[0] == EOF_PACKET


def parse_ok(payload: bytes | memoryview) -> OkPacket:
    affected, pos = read_lenenc_int(payload, 1)
    insert_id, pos = read_lenenc_int(payload, pos)
    if pos + 4 > len(payload):
        raise ProtocolError("OK packet too short")
    status, warnings = struct.unpack_from("<HH", payload, pos)
    return OkPacket(affected or 0, insert_id or 0, status, warnings, bytes(payload[pos + 4 :]))


def parse_err(payload: bytes | memoryview) -> ServerError:
    if len(payload) < 3 or payload[0] != ERR_PACKET:
        raise ProtocolError("not an ERR packet")
    code = _U16.unpack_from(payload, 1)[0]
    rest = bytes(payload[3:])
    sqlstate = "HY000"
    if rest[:1] == b"#" and len(rest) >= 6:
        sqlstate = rest[1:6].decode("ascii", "replace")
        rest = rest[6:]
    return ServerError(code, sqlstate, rest.decode("utf-8", "replace"))


def build_ok(affected_rows: int = 0, last_insert_id: int = 0, status: int = 0x0002,
             warnings: int = 0, info: bytes = b"") -> bytes:
    return (bytes((OK_PACKET,)) + lenenc_int(affected_rows) + lenenc_int(last_insert_id)
            + struct.pack("<HH", status, warnings) + info)


def build_err(code: int, message: str, sqlstate: str = "HY000") -> bytes:
    return bytes((ERR_PACKET,)) + _U16.pack(code) + b"#" + sqlstate.encode("ascii") + message.encode("utf-8")


def build_eof(warnings: int = 0, status: int = 0x0002) -> bytes:
    return bytes((EOF_PACKET,)) + struct.pack("<HH", warnings, status)

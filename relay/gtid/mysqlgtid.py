"""MySQL GTIDs: sets of ``uuid[:tag]:interval`` (gtid_executed, PREVIOUS_GTIDS, the set a replica
sends with COM_BINLOG_DUMP_GTID), and the GTID of a GTID or GTID_TAGGED event.

Binary set encoding (Gtid_set::encode, sql/rpl_gtid_set.cc): u64 number of SIDs, then per SID
its 16-byte UUID, u64 number of intervals, and each interval as u64 start and u64 end
(exclusive).  MySQL 8.4+ writes a tagged form when a tag is present: the top byte of the first
u64 is the format (1), the count moves up by one byte, and each UUID is followed by its tag as a
length-prefixed string (mysql::serialization).  GTID_TAGGED_LOG_EVENT (42) is a
mysql::serialization message; only its UUID, GNO and tag fields are read here.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..binlog import events as ev
from ..errors import InputError

_U64 = struct.Struct("<Q")
_TAGGED_FORMAT = 1
_TEXT_SID = re.compile(r"^\s*([0-9a-fA-F-]{32,36})((?::[^,]*)?)\s*$")


class MysqlGtidError(InputError):
    """A GTID set or GTID event that cannot be decoded."""


@dataclass(frozen=True, order=True)
class Tsid:
    """A source: its server UUID and, MySQL 8.4+, a tag ('' for none)."""

    uuid: uuid.UUID
    tag: str = ""

    def __str__(self) -> str:
        return f"{self.uuid}:{self.tag}" if self.tag else str(self.uuid)


@dataclass(frozen=True)
class MysqlGtid:
    tsid: Tsid
    gno: int

    def __str__(self) -> str:
        return f"{self.tsid}:{self.gno}"


class GtidSet:
    """Per source, sorted disjoint [start, end) intervals of transaction numbers."""

    def __init__(self) -> None:
        self._intervals: dict[Tsid, list[list[int]]] = {}

    # ------------------------------------------------------------ building

    def add(self, gtid: MysqlGtid) -> None:
        self.add_interval(gtid.tsid, gtid.gno, gtid.gno + 1)

    def add_interval(self, tsid: Tsid, start: int, end: int) -> None:
        if end <= start:
            return
        merged: list[list[int]] = []
        for low, high in self._intervals.get(tsid, []):
            if high < start or low > end:
                merged.append([low, high])
            else:
                start, end = min(start, low), max(end, high)
        merged.append([start, end])
        self._intervals[tsid] = sorted(merged)

    def update(self, other: GtidSet) -> None:
        for tsid, intervals in other._intervals.items():
            for start, end in intervals:
                self.add_interval(tsid, start, end)

    def copy(self) -> GtidSet:
        result = GtidSet()
        result.update(self)
        return result

    # ------------------------------------------------------------ questions

    def __contains__(self, gtid: MysqlGtid) -> bool:
        return any(start <= gtid.gno < end for start, end in self._intervals.get(gtid.tsid, []))

    def issubset(self, other: GtidSet) -> bool:
        return not self.minus(other)

    def minus(self, other: GtidSet) -> GtidSet:
        """What this set has and ``other`` has not."""
        result = GtidSet()
        for tsid, intervals in self._intervals.items():
            for start, end in intervals:
                cursor = start
                for low, high in other._intervals.get(tsid, []):
                    if high <= cursor or low >= end:
                        continue
                    result.add_interval(tsid, cursor, low)
                    cursor = max(cursor, high)
                result.add_interval(tsid, cursor, end)
        return result

    def only(self, server_uuid: uuid.UUID) -> GtidSet:
        """The part written under one server UUID (any tag)."""
        result = GtidSet()
        for tsid, intervals in self._intervals.items():
            if tsid.uuid == server_uuid:
                for start, end in intervals:
                    result.add_interval(tsid, start, end)
        return result

    def __bool__(self) -> bool:
        return bool(self._intervals)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GtidSet) and self._intervals == other._intervals

    def items(self) -> Iterator[tuple[Tsid, list[tuple[int, int]]]]:
        for tsid in sorted(self._intervals):
            yield tsid, [(start, end) for start, end in self._intervals[tsid]]

    # ------------------------------------------------------------ text: '3e11...:1-5:7,4f22...:tag:1-3'

    def __str__(self) -> str:
        by_uuid: dict[uuid.UUID, list[str]] = {}
        for tsid, intervals in self.items():
            parts = by_uuid.setdefault(tsid.uuid, [str(tsid.uuid)])
            if tsid.tag:
                parts.append(tsid.tag)
            parts += [f"{start}" if end == start + 1 else f"{start}-{end - 1}" for start, end in intervals]
        return ",\n".join(":".join(parts) for parts in by_uuid.values())

    def __repr__(self) -> str:
        return f"GtidSet({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> GtidSet:
        result = cls()
        for part in filter(None, (p.strip() for p in text.replace("\n", "").split(","))):
            match = _TEXT_SID.match(part)
            if match is None:
                raise MysqlGtidError(f"Malformed GTID set specification '{text}'.")
            try:
                server = uuid.UUID(match.group(1))
            except ValueError:
                raise MysqlGtidError(f"Malformed GTID set specification '{text}'.") from None
            tag = ""
            for item in filter(None, match.group(2).split(":")):
                if re.fullmatch(r"\d+(-\d+)?", item):
                    low, _, high = item.partition("-")
                    result.add_interval(Tsid(server, tag), int(low), int(high or low) + 1)
                elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,31}", item):
                    tag = item.lower()
                else:
                    raise MysqlGtidError(f"Malformed GTID set specification '{text}'.")
        return result

    # ------------------------------------------------------------ binary

    def encode(self) -> bytes:
        tagged = any(tsid.tag for tsid in self._intervals)
        count = len(self._intervals)
        head = (_TAGGED_FORMAT << 56) | (count << 8) | _TAGGED_FORMAT if tagged else count
        out = bytearray(_U64.pack(head))
        for tsid, intervals in self.items():
            out += tsid.uuid.bytes
            if tagged:
                out += _varint(len(tsid.tag)) + tsid.tag.encode()
            out += _U64.pack(len(intervals))
            for start, end in intervals:
                out += struct.pack("<qq", start, end)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> GtidSet:
        if len(data) < 8:
            raise MysqlGtidError("Malformed GTID_set encoding.")
        head = _U64.unpack_from(data)[0]
        tagged = head >> 56 == _TAGGED_FORMAT
        count = (head & 0x00FFFFFFFFFFFF00) >> 8 if tagged else head
        result, pos = cls(), 8
        try:
            for _ in range(count):
                server = uuid.UUID(bytes=bytes(data[pos:pos + 16]))
                pos += 16
                tag = ""
                if tagged:
                    length, pos = _read_varint(data, pos)
                    tag = bytes(data[pos:pos + length]).decode("ascii")
                    pos += length
                (n_intervals,) = _U64.unpack_from(data, pos)
                pos += 8
                for _ in range(n_intervals):
                    start, end = struct.unpack_from("<qq", data, pos)
                    pos += 16
                    if end <= start:
                        raise MysqlGtidError("Malformed GTID_set encoding.")
                    result.add_interval(Tsid(server, tag), start, end)
        except (struct.error, ValueError, UnicodeDecodeError):
            raise MysqlGtidError("Malformed GTID_set encoding.") from None
        if pos != len(data):
            raise MysqlGtidError("Malformed GTID_set encoding.")
        return result


def gtid_of_event(event: bytes | memoryview) -> MysqlGtid | None:
    """The GTID of a GTID_LOG_EVENT (33) or GTID_TAGGED_LOG_EVENT (42); None for an anonymous one."""
    etype = event[4]
    body = ev.HEADER_LEN
    if etype == ev.GTID_LOG_EVENT:
        server = uuid.UUID(bytes=bytes(event[body + 1:body + 17]))
        (gno,) = struct.unpack_from("<q", event, body + 17)
        return MysqlGtid(Tsid(server), gno)
    if etype == ev.GTID_TAGGED_LOG_EVENT:
        return _tagged_gtid(event, body)
    return None


def previous_gtids(event: bytes | memoryview, checksum_alg: int) -> GtidSet:
    """The set a PREVIOUS_GTIDS_LOG_EVENT (35) carries: every GTID before its file."""
    end = len(event) - (ev.CRC_LEN if checksum_alg == ev.CHECKSUM_CRC32 else 0)
    return GtidSet.decode(memoryview(event)[ev.HEADER_LEN:end])


def gtids_in(events: Iterable[bytes | memoryview]) -> GtidSet:
    result = GtidSet()
    for event in events:
        gtid = gtid_of_event(event)
        if gtid is not None:
            result.add(gtid)
    return result


# ------------------------------------------------------------ mysql::serialization

def _varint(value: int) -> bytes:
    """An unsigned variable-length integer: the count of low 1-bits in the first byte is the
    number of bytes that follow it (mysql/serialization/variable_length_integers.h)."""
    for extra in range(8):
        if value < 1 << (7 * (extra + 1)):
            encoded = (value << (extra + 1)) | ((1 << extra) - 1)
            return encoded.to_bytes(extra + 1, "little")
    return b"\xff" + _U64.pack(value)


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    first = data[pos]
    extra = 0
    while extra < 8 and first & (1 << extra):
        extra += 1
    if pos + extra + 1 > len(data):
        raise MysqlGtidError("variable-length integer runs past the data")
    if extra == 8:
        return _U64.unpack_from(data, pos + 1)[0], pos + 9
    raw = int.from_bytes(bytes(data[pos:pos + extra + 1]), "little")
    return raw >> (extra + 1), pos + extra + 1


def _read_signed(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value, pos = _read_varint(data, pos)
    return (value >> 1) ^ -(value & 1), pos


def _tagged_gtid(event: bytes | memoryview, pos: int) -> MysqlGtid:
    """A GTID_TAGGED_LOG_EVENT message: format version, size, last non-ignorable field id, then
    numbered fields: 0 flags, 1 the UUID (16 integers), 2 the GNO (signed), 3 the tag (string)."""
    try:
        _, pos = _read_varint(event, pos)  # format version
        _, pos = _read_varint(event, pos)  # message size
        _, pos = _read_varint(event, pos)  # last non-ignorable field
        server, gno, tag = None, None, ""
        while pos < len(event):
            field, pos = _read_varint(event, pos)
            if field == 0:
                _, pos = _read_varint(event, pos)
            elif field == 1:
                raw = bytearray()
                for _ in range(16):
                    byte, pos = _read_varint(event, pos)
                    raw.append(byte)
                server = uuid.UUID(bytes=bytes(raw))
            elif field == 2:
                gno, pos = _read_signed(event, pos)
            elif field == 3:
                length, pos = _read_varint(event, pos)
                tag = bytes(event[pos:pos + length]).decode("ascii")
                break
            else:
                break
    except (IndexError, ValueError, UnicodeDecodeError):
        raise MysqlGtidError("GTID_TAGGED_LOG_EVENT cannot be decoded") from None
    if server is None or gno is None:
        raise MysqlGtidError("GTID_TAGGED_LOG_EVENT without its UUID or GNO")
    return MysqlGtid(Tsid(server, tag), gno)


class ExcludedGroups:
    """COM_BINLOG_DUMP_GTID leaves out the groups whose GTID the replica has
    (Binlog_sender::skip_event): a GTID event decides for the events after it, up to the next
    GTID event or ROTATE, which are never left out; an anonymous group is sent."""

    def __init__(self, replica_has: GtidSet) -> None:
        self.replica_has = replica_has
        self.excluding = False

    def accept(self, event: bytes | memoryview) -> bool:
        etype = event[4]
        if etype in (ev.GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT):
            gtid = gtid_of_event(event)
            assert gtid is not None  # these two event types always carry a GTID
            self.excluding = gtid in self.replica_has
        elif etype in (ev.ANONYMOUS_GTID_LOG_EVENT, ev.ROTATE_EVENT):
            self.excluding = False
        return not self.excluding

"""Walking the events of a stored binlog file in large blocks."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

from ..binlog import events as ev

BLOCK_SIZE = 1 << 20
_LENGTH = struct.Struct("<I")


def iter_events(stream: BinaryIO, start: int, end: int, block_size: int = BLOCK_SIZE
                ) -> Iterator[tuple[int, memoryview]]:
    """Yield (offset, event) for every whole event in [start, end) of an open binlog file.

    Reads ``block_size`` at a time and slices events out of each block; an event larger
    than a block is read whole.  Stops silently at a partial event (a torn tail)."""
    offset = start
    while offset + ev.HEADER_LEN <= end:
        stream.seek(offset)
        block = memoryview(stream.read(min(block_size, end - offset)))
        if len(block) < ev.HEADER_LEN:
            return  # the file is shorter than the caller thought
        pos = 0
        while pos + ev.HEADER_LEN <= len(block):
            length = int.from_bytes(block[pos + 9 : pos + 13], "little")
            if length < ev.HEADER_LEN:
                return  # garbage: the caller's checks report it
            if pos + length > len(block):
                break
            yield offset + pos, block[pos : pos + length]
            pos += length
        if pos == 0:  # one event bigger than the block
            length = int.from_bytes(block[9:13], "little")
            if length < ev.HEADER_LEN or offset + length > end:
                return
            stream.seek(offset)
            whole = memoryview(stream.read(length))
            if len(whole) < length:
                return
            yield offset, whole
            pos = length
        offset += pos



def read_batch(stream: BinaryIO, start: int, end: int, block_size: int = BLOCK_SIZE) -> list[memoryview]:
    """The whole events found from ``start`` within one block (at least one event if one ends
    before ``end``, however large).  Raises BinlogFormatError for a header that cannot be right."""
    if start + ev.HEADER_LEN > end:
        return []
    stream.seek(start)
    block = memoryview(stream.read(min(block_size, end - start)))
    events = []
    append = events.append
    length_at = _LENGTH.unpack_from
    pos = 0
    size = len(block)
    while pos + ev.HEADER_LEN <= size:
        length = length_at(block, pos + 9)[0]
        if length < ev.HEADER_LEN:
            raise ev.BinlogFormatError(f"bogus event length {length} at {start + pos}")
        if pos + length > size:
            break
        append(block[pos : pos + length])
        pos += length
    if not events:
        length = int.from_bytes(block[9:13], "little")
        if length < ev.HEADER_LEN:
            raise ev.BinlogFormatError(f"bogus event length {length} at {start}")
        if start + length > end:
            return []
        stream.seek(start)
        events.append(memoryview(stream.read(length)))
    return events

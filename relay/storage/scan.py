"""Walking the events of a stored binlog file in large blocks."""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..binlog import events as ev

try:
    from ..binlog._scan import find as _compiled_find
    from ..binlog._scan import split as _compiled_split
except ImportError:  # built without the C module: the Python loops below
    _compiled_find = _compiled_split = None

BLOCK_SIZE = 1 << 20
_LENGTH = struct.Struct("<I")


PassOver = Callable[[memoryview, int, int], int]
_NO_TYPES = bytes(256)


def iter_events(stream: BinaryIO, start: int, end: int, block_size: int = BLOCK_SIZE, pass_over: PassOver | None = None
                ) -> Iterator[tuple[int, memoryview]]:
    """Yield (offset, event) for every whole event in [start, end) of an open binlog file.

    Reads ``block_size`` at a time and slices events out of each block; an event larger
    than a block is read whole.  Stops silently at a partial event (a torn tail).
    ``pass_over(block, pos, offset)``, asked before each event, returns where in the block
    the next event to yield is: the events it passes over (checked by the caller's C loop,
    say) are not yielded."""
    offset = start
    while offset + ev.HEADER_LEN <= end:
        stream.seek(offset)
        block = memoryview(stream.read(min(block_size, end - offset)))
        if len(block) < ev.HEADER_LEN:
            return  # the file is shorter than the caller thought
        pos = 0
        while pos + ev.HEADER_LEN <= len(block):
            if pass_over is not None:
                pos = pass_over(block, pos, offset + pos)
                if pos + ev.HEADER_LEN > len(block):
                    break
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


def iter_event_batches(stream: BinaryIO, start: int, end: int, block_size: int = BLOCK_SIZE
                       ) -> Iterator[list[tuple[int, bytes]]]:
    """The events iter_events yields, a list per block read and each copied out as bytes, for a
    reader that takes every event (the pipeline's decoders): no line of Python per event to
    find it, and no block kept alive by a view of one of its events."""
    offset = start
    while offset + ev.HEADER_LEN <= end:
        stream.seek(offset)
        block = stream.read(min(block_size, end - offset))
        events, pos = split_events(block, offset)
        if events:
            yield events
        if len(block) - pos >= ev.HEADER_LEN and _LENGTH.unpack_from(block, pos + 9)[0] < ev.HEADER_LEN:
            return  # garbage: the caller's checks report it
        if pos == 0:  # one event bigger than the block, or the file is shorter than the caller thought
            if len(block) < ev.HEADER_LEN:
                return
            length = _LENGTH.unpack_from(block, 9)[0]
            if offset + length > end:
                return
            stream.seek(offset)
            whole = stream.read(length)
            if len(whole) < length:
                return
            yield [(offset, whole)]
            pos = length
        offset += pos


def split_events(block: bytes, base: int) -> tuple[list[tuple[int, bytes]], int]:
    """The whole events at the start of ``block`` as (``base`` + offset, bytes), and where they
    end (at a partial event, or a header whose length cannot be right)."""
    if _compiled_split is not None:
        return _compiled_split(block, 0, len(block), base)
    events, pos = [], 0
    while pos + ev.HEADER_LEN <= len(block):
        length = _LENGTH.unpack_from(block, pos + 9)[0]
        if length < ev.HEADER_LEN or pos + length > len(block):
            break
        events.append((base + pos, block[pos : pos + length]))
        pos += length
    return events, pos


def whole_events_end(fd: int, start: int, end: int) -> int:
    """Where the whole events from ``start`` end in the bytes [start, end) of a binlog file (at
    ``start`` if the first is cut short or its header cannot be right).  Only the headers are read,
    through a mapping: the bytes are not copied."""
    with mmap.mmap(fd, end, access=mmap.ACCESS_READ) as view:
        whole, _ = find_event(view, start, end, _NO_TYPES)
    return whole


def event_types(*types: int) -> bytes:
    """The ``types`` argument of find_event and events_of_types: one byte per event type."""
    return bytes(t in types for t in range(256))


def find_event(block: memoryview | bytes | mmap.mmap, pos: int, size: int, types: bytes) -> tuple[int, bool]:
    """The first whole event from ``pos`` in ``block[:size]`` whose type is marked in ``types``:
    (its offset, True); else (where the whole events end, False).  Only headers are read."""
    if _compiled_find is not None:
        return _compiled_find(block, pos, size, types)
    length_at = _LENGTH.unpack_from
    while pos + ev.HEADER_LEN <= size:
        length = length_at(block, pos + 9)[0]
        if length < ev.HEADER_LEN or pos + length > size:
            break
        if types[block[pos + 4]]:
            return pos, True
        pos += length
    return pos, False


def events_of_types(stream: BinaryIO, start: int, end: int, types: bytes, budget: int | None = None,
                    block_size: int | None = None) -> tuple[list[tuple[int, bytes]], int]:
    """The (offset, event) of every whole event in [start, end) whose type is marked in ``types``
    (event_types), and where the whole events walked end.  The others are passed over by their
    headers, many times faster than slicing each out.  The events are copies, meant for small
    ones such as GTIDs: a walk of a whole file keeps none of its blocks.  With ``budget`` the walk
    stops at the first block boundary past ``start + budget`` (an event larger than a block is
    still read whole); its blocks are no larger than the budget (default block size).  It stops
    silently at a partial event or a bogus length (the callers' checks report it)."""
    if block_size is None:
        block_size = min(budget, BLOCK_SIZE) if budget else BLOCK_SIZE
    found: list[tuple[int, bytes]] = []
    offset = start
    while offset + ev.HEADER_LEN <= end and (budget is None or offset - start < budget):
        stream.seek(offset)
        block = memoryview(stream.read(min(block_size, end - offset)))
        size = len(block)
        if size < ev.HEADER_LEN:
            break
        pos, hit = find_event(block, 0, size, types)
        while hit:
            length = _LENGTH.unpack_from(block, pos + 9)[0]
            found.append((offset + pos, bytes(block[pos : pos + length])))
            pos, hit = find_event(block, pos + length, size, types)
        if pos == 0:  # one event bigger than the block, or garbage
            length = _LENGTH.unpack_from(block, 9)[0]
            if length < ev.HEADER_LEN or offset + length > end:
                break
            if types[block[4]]:
                stream.seek(offset)
                whole = stream.read(length)
                if len(whole) < length:
                    break
                found.append((offset, whole))
            pos = length
        offset += pos
    return found, offset


_GTID_TYPES = event_types(ev.GTID_EVENT, ev.GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT, ev.ANONYMOUS_GTID_LOG_EVENT)


def count_gtid_events(path: str | os.PathLike[str], start: int, end: int) -> int:
    """GTID events (either flavour's, anonymous ones too) starting in [start, end) of a stored
    file: the groups that begin there (headers only)."""
    with open(path, "rb") as stored:
        return len(events_of_types(stored, start, end, _GTID_TYPES)[0])


def read_batch(stream: BinaryIO, start: int, end: int, block_size: int = BLOCK_SIZE) -> list[memoryview]:
    """The whole events found from ``start`` within one block (at least one event if one ends
    before ``end``, however large).  Raises BinlogFormatError for a header that cannot be right."""
    if start + ev.HEADER_LEN > end:
        return []
    stream.seek(start)
    block = memoryview(stream.read(min(block_size, end - start)))
    events: list[memoryview] = []
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

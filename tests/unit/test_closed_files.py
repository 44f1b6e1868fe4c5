"""The start-up check of closed stored files (relaylog.closed_file_end) on binlog files real servers
wrote: MySQL's fixtures (some end with a ROTATE or STOP, some were cut by a crash or a copy) and
MariaDB's.  Intact, each must end at its size; cut anywhere, at the start of the event cut short."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from relay.storage.relaylog import closed_file_end

FIXTURES = Path(__file__).parent.parent / "fixtures"
BINLOGS = sorted(p for p in (FIXTURES / "mysql").iterdir() if p.suffix != ".md") + sorted(
    (FIXTURES / "rows").glob("*.binlog"))


def _event_starts(data: bytes) -> list[int]:
    """Offsets of each event, from the length field at byte 9 of every header."""
    starts, pos = [], 4
    while pos + 19 <= len(data):
        starts.append(pos)
        pos += struct.unpack_from("<I", data, pos + 9)[0]
    assert pos == len(data), "the fixture itself is not whole"
    return starts


@pytest.mark.parametrize("path", BINLOGS, ids=lambda p: p.name)
def test_an_intact_file_ends_at_its_size(path):
    data = path.read_bytes()
    assert closed_file_end(io.BytesIO(data), len(data)) == len(data)


def _positions_are_its_own(data: bytes) -> bool:
    """Every event's log_pos is its end in this file: a binlog, not a replica's relay log (one fixture
    is: its events carry the source's positions), whose positions no check can trust."""
    return all(struct.unpack_from("<I", data, start + 13)[0] == start + struct.unpack_from("<I", data, start + 9)[0]
               for start in _event_starts(data))


@pytest.mark.parametrize("path", [p for p in BINLOGS if _positions_are_its_own(p.read_bytes())], ids=lambda p: p.name)
def test_a_file_cut_short_ends_before_the_torn_event(path):
    data = path.read_bytes()
    starts = _event_starts(data)
    for cut in (1, 4, 7, 19, len(data) - starts[-1] + 3):
        size = len(data) - cut
        torn = max(start for start in starts if start < size)
        assert closed_file_end(io.BytesIO(data[:size]), size) == torn, (cut, size)


def test_a_flipped_byte_in_the_last_event_is_found_when_checksummed():
    data = bytearray((FIXTURES / "mysql" / "time_issue.000001").read_bytes())
    last = _event_starts(bytes(data))[-1]
    data[-6] ^= 0x01  # inside the last event's body, before its CRC32
    assert closed_file_end(io.BytesIO(bytes(data)), len(data)) == last

"""Reading binlog bytes in tests, independently of the code under test: header lengths only."""

from __future__ import annotations

import struct
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MARIADB_MIXED_BINLOG = FIXTURES / "wire" / "mariadb-10.11-mixed.000001"  # DDL, InnoDB, MyISAM, XA, ...


def file_events(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, event) for every event of a binlog file's bytes (after the 4-byte magic)."""
    events, offset = [], 4
    while offset < len(data):
        length = struct.unpack_from("<I", data, offset + 9)[0]
        events.append((offset, data[offset : offset + length]))
        offset += length
    return events

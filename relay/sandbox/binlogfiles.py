"""Binlog files read by their event headers only: what the harness needs to know of a server's
binlog (when it has settled) and what tests check in stored files, without the relay's own
decoding (relay/binlog/, gtid/, replication/), which is the code under test."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BINLOG_MAGIC = b"\xfebin"
HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_length, log_pos, flags
HEADER_LEN = HEADER.size
GTID_EVENT = 162  # MariaDB GTID: starts every event group
BINLOG_CHECKPOINT_EVENT = 161
_NAME_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class Event:
    type: int
    server_id: int
    length: int
    log_pos: int
    flags: int
    timestamp: int
    data: bytes


def split_events(data: bytes) -> Iterator[Event]:
    """Events of a binlog file's bytes (after the 4-byte magic) or of concatenated events."""
    pos = 0
    while pos + HEADER_LEN <= len(data):
        timestamp, etype, server_id, length, log_pos, flags = HEADER.unpack_from(data, pos)
        if length < HEADER_LEN:
            raise ValueError(f"bad event length {length} at {pos}")
        yield Event(etype, server_id, length, log_pos, flags, timestamp, data[pos:pos + length])
        pos += length


def binlog_events(path: Path) -> list[Event]:
    data = path.read_bytes()
    if data[:4] != BINLOG_MAGIC:
        raise ValueError(f"{path} is not a binlog file")
    return list(split_events(data[4:]))


def last_checkpoint(path: Path) -> str | None:
    """The file named by the last BINLOG_CHECKPOINT event of a binlog file (None: it has none)."""
    checkpoints = [event for event in binlog_events(path) if event.type == BINLOG_CHECKPOINT_EVENT]
    if not checkpoints:
        return None
    body = checkpoints[-1].data[HEADER_LEN:]
    length = _NAME_LENGTH.unpack_from(body)[0]
    return body[4:4 + length].decode()

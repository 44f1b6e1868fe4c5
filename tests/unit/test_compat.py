"""Events rewritten for replicas without MariaDB GTID support: the shapes the integration test
(test_serve_clients, against a real primary) does not meet: GTIDs with a commit id, events too
short for a dummy query, events too short for any dummy."""

import struct
import zlib

import pytest

from relay.binlog import events as ev
from relay.replication import compat


def _event(etype: int, body: bytes, flags: int = 0x4, crc: bool = True) -> bytes:
    length = ev.HEADER_LEN + len(body) + (4 if crc else 0)
    event = ev.HEADER.pack(1700000000, etype, 1, length, 1000, flags) + body
    return event + zlib.crc32(event).to_bytes(4, "little") if crc else event


def _query_text(event: bytes) -> bytes:
    status_len = struct.unpack_from("<H", event, ev.HEADER_LEN + 11)[0]
    return event[ev.HEADER_LEN + 13 + status_len + 1 : -4]


@pytest.mark.parametrize("commit_id", [False, True])
def test_gtid_becomes_a_begin_of_the_same_length(commit_id):
    body = struct.pack("<QIB", 42, 0, ev.FL_GROUP_COMMIT_ID if commit_id else 0)
    body += struct.pack("<Q", 7) if commit_id else bytes(6)
    gtid = _event(ev.GTID_EVENT, body)
    begin = compat.for_replica(gtid, compat.CAPABILITY_UNKNOWN, False, crc=True)
    assert len(begin) == len(gtid) and begin[4] == ev.QUERY_EVENT
    assert _query_text(begin) == b"BEGIN"
    assert zlib.crc32(begin) == 0x2144DF1C  # the CRC residue: a valid trailing checksum
    flags = struct.unpack_from("<H", begin, ev.FLAGS_OFFSET)[0]
    assert flags & 0x8 and not flags & 0x4  # SUPPRESS_USE set, THREAD_SPECIFIC cleared


@pytest.mark.parametrize("body_len", [6, 10, 14, 15, 16, 40, 100])
def test_short_events_become_a_null_user_variable_or_a_comment(body_len):
    checkpoint = _event(ev.BINLOG_CHECKPOINT_EVENT, bytes(range(body_len)), crc=False)
    dummy = compat.for_replica(checkpoint, compat.CAPABILITY_UNKNOWN, False, crc=False)
    assert len(dummy) == len(checkpoint)
    if len(checkpoint) < 34:
        name_len = struct.unpack_from("<I", dummy, ev.HEADER_LEN)[0]
        assert dummy[4] == ev.USER_VAR_EVENT
        assert dummy[ev.HEADER_LEN + 4 :] == b"!dummyvar"[:name_len] + b"\x01"
    else:
        comment = f"# Dummy event replacing event type {ev.BINLOG_CHECKPOINT_EVENT} that slave cannot handle."
        assert dummy[4] == ev.QUERY_EVENT
        assert dummy[33:] == comment.encode()[: len(dummy) - 33].ljust(len(dummy) - 33, b" ")


def test_an_event_too_short_for_any_dummy_is_refused():
    with pytest.raises(compat.IncompatibleEvent, match="too small"):
        compat.dummy_event(_event(ev.BINLOG_CHECKPOINT_EVENT, b"abc"), crc=True)


def test_replicas_that_tolerate_holes_get_no_dummies():
    checkpoint = _event(ev.BINLOG_CHECKPOINT_EVENT, b"x" * 30)
    assert compat.for_replica(checkpoint, compat.CAPABILITY_TOLERATE_HOLES, True, crc=True) is None
    assert compat.for_replica(checkpoint, compat.CAPABILITY_BINLOG_CHECKPOINT, True, crc=True) is checkpoint

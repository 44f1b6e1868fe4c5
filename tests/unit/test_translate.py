"""Storing another primary's events in the relay's own files (replication.translate), fed with the
events of a real MariaDB 10.11 binlog (tests/fixtures/wire) as the new primary's dump."""

import pytest

from relay.binlog import events as ev
from relay.binlog.names import file_number, next_file_name, valid_binlog_name
from relay.gtid.gtid import BinlogState, Gtid
from relay.replication.translate import TranslatingStream
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
EVENTS = [bytes(event) for _, event in file_events(BINLOG)]  # FDE, GTID_LIST, checkpoint, groups
PRIMARY_ID = 7
RELAY_STATE = BinlogState([Gtid(0, 1, 50), Gtid(0, PRIMARY_ID, 0)])


def _packets(events: list[bytes]) -> bytes:
    data, seq = bytearray(), 1
    for event in events:
        payload = b"\x00" + event
        data += len(payload).to_bytes(3, "little") + bytes([seq]) + payload
        seq = (seq + 1) & 0xFF
    return bytes(data)


def _dump_of_two_files() -> list[bytes]:
    """What the new primary sends a GTID replica: a fake ROTATE to its file, the file from the top
    (FDE, GTID_LIST, checkpoint, groups), its ROTATE to the next file, and that file."""
    fake = ev.build_rotate(PRIMARY_ID, "other-bin.000004", 4, with_crc=True)
    end = len(BINLOG)
    rotate = ev.build_rotate(PRIMARY_ID, "other-bin.000005", 4, with_crc=True, log_pos=end + 19 + 8 + 16 + 4,
                             flags=0)
    return [fake, *EVENTS, rotate, *EVENTS]


def _apply(files: dict[str, bytearray], segments) -> None:
    for segment in segments:
        if segment.new_file:
            assert segment.file not in files
            files[segment.file] = bytearray(ev.BINLOG_MAGIC)
        stored = files[segment.file]
        assert segment.start == len(stored), "segments continue the stored file"
        for chunk in segment.chunks:
            stored += chunk
        if segment.committed_end is not None:
            assert segment.committed_end <= len(stored)


def _check_positions(data: bytes) -> list[bytes]:
    """Every event says where it ends in this file, and passes its CRC32."""
    events = []
    for offset, event in file_events(bytes(data)):
        assert ev.EventHeader.parse(event).log_pos == offset + len(event)
        assert ev.checksum_matches(event)
        events.append(bytes(event))
    return events


def _translate(stream: TranslatingStream, files: dict[str, bytearray]) -> None:
    data = _packets(_dump_of_two_files())
    for start in range(0, len(data), 977):  # packets split across reads anywhere
        _apply(files, stream.receive(data[start:start + 977]))


def test_a_switch_closes_the_old_file_and_continues_in_files_of_the_relay():
    old = bytearray(BINLOG[:EVENT_END_OF_FIRST_GROUP])
    files = {"mysql-bin.000007": old}
    stream = TranslatingStream("mysql-bin.000007", len(old), ev.CHECKSUM_CRC32, RELAY_STATE)
    _translate(stream, files)
    assert list(files) == ["mysql-bin.000007", "mysql-bin.000008", "mysql-bin.000009"]
    closed = _check_positions(files["mysql-bin.000007"])
    assert closed[-1][4] == ev.ROTATE_EVENT and ev.parse_rotate(closed[-1], True).next_file == "mysql-bin.000008"
    first = _check_positions(files["mysql-bin.000008"])
    assert first[0][4] == ev.FORMAT_DESCRIPTION_EVENT and first[0][ev.HEADER_LEN:-4] == EVENTS[0][ev.HEADER_LEN:-4]
    assert [(g.domain_id, g.server_id, g.seq_no) for g in ev.parse_gtid_list(first[1])] == [
        (g.domain_id, g.server_id, g.seq_no) for g in RELAY_STATE.gtid_list()]
    # the new primary's own file header (GTID_LIST, checkpoint) is not repeated inside the file
    groups = [e for e in EVENTS if e[4] not in (ev.FORMAT_DESCRIPTION_EVENT, ev.GTID_LIST_EVENT,
                                                   ev.BINLOG_CHECKPOINT_EVENT)]
    assert [e[ev.HEADER_LEN:-4] for e in first[2:-1]] == [e[ev.HEADER_LEN:-4] for e in groups]
    assert ev.parse_rotate(first[-1], True).next_file == "mysql-bin.000009"
    # from the primary's next file on, the stored file is that file byte for byte (its FDE as a
    # primary sends it: without the in-use flag, which its CRC32 never covers)
    expected = bytearray(BINLOG)
    expected[4 + ev.FLAGS_OFFSET] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
    assert bytes(files["mysql-bin.000009"]) == bytes(expected)
    assert stream.file == "mysql-bin.000009" and stream.position == len(BINLOG)


def test_a_switch_interrupted_after_its_rotate_does_not_write_a_second_one():
    rotated = bytearray(BINLOG[:EVENT_END_OF_FIRST_GROUP])
    rotate_len = ev.HEADER_LEN + 8 + len("mysql-bin.000008") + 4
    rotated += ev.build_rotate(1, "mysql-bin.000008", 4, True, log_pos=len(rotated) + rotate_len, flags=0)
    files = {"mysql-bin.000007": bytearray(rotated)}
    _translate(TranslatingStream("mysql-bin.000007", len(rotated), ev.CHECKSUM_CRC32, RELAY_STATE,
                                 ends_with_rotate=True), files)
    assert bytes(files["mysql-bin.000007"]) == bytes(rotated)
    assert ev.parse_gtid_list(_check_positions(files["mysql-bin.000008"])[1])


def test_an_empty_file_left_by_a_crash_is_filled_not_skipped():
    files = {"mysql-bin.000008": bytearray(ev.BINLOG_MAGIC)}
    _translate(TranslatingStream("mysql-bin.000008", 4, ev.CHECKSUM_CRC32, RELAY_STATE), files)
    first = _check_positions(files["mysql-bin.000008"])
    assert [first[0][4], first[1][4]] == [ev.FORMAT_DESCRIPTION_EVENT, ev.GTID_LIST_EVENT]


def test_resuming_in_an_own_file_appends_after_what_is_stored():
    own = bytearray(BINLOG[:EVENT_END_OF_FIRST_GROUP])
    files = {"mysql-bin.000008": own}
    stream = TranslatingStream("mysql-bin.000008", len(own), ev.CHECKSUM_CRC32, None)
    _translate(stream, files)
    appended = _check_positions(files["mysql-bin.000008"])
    assert sum(1 for e in appended if e[4] == ev.FORMAT_DESCRIPTION_EVENT) == 1
    assert sum(1 for e in appended if e[4] == ev.GTID_LIST_EVENT) == 1  # the one it had


def test_the_one_rule_for_binlog_file_names():
    assert next_file_name("mysql-bin.000009") == "mysql-bin.000010"
    assert next_file_name("b.999999") == "b.1000000"
    with pytest.raises(ValueError, match="does not end in a number"):
        next_file_name("binlog")
    assert [valid_binlog_name(n) for n in ("mysql-bin.000001", "a/b.000001", "x.12345", "x.1234567")] == [
        True, False, False, True]
    assert (file_number("mysql-bin.000042"), file_number("binlog.index")) == (42, None)


EVENT_END_OF_FIRST_GROUP = next(offset for offset, event in file_events(BINLOG) if event[4] == ev.GTID_EVENT
                                and offset > 400)

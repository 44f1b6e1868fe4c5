"""MySQL GTID sets and GTID events (relay.gtid.mysqlgtid), on bytes MySQL servers wrote
(tests/fixtures/mysql): the binary form round-trips to MySQL's exact bytes, and the values are
read back with struct from the fields' documented offsets."""

import struct
import uuid
from pathlib import Path

import pytest

from relay.binlog import events as ev
from relay.gtid.mysqlgtid import (
    ExcludedGroups,
    GtidSet,
    MysqlGtid,
    MysqlGtidError,
    Tsid,
    gtid_of_event,
    previous_gtids,
)
from tests.support.binlogs import file_events

MYSQL = Path(__file__).resolve().parents[1] / "fixtures" / "mysql"


def _events(name: str) -> list[bytes]:
    return [bytes(event) for _, event in file_events((MYSQL / name).read_bytes())]


@pytest.mark.parametrize("name", ["binlog_transaction_previous_GTID_no_tag.000001",
                                  "binlog_transaction_with_GTID_TAG.000001", "binlog-invisible-columns.000001"])
def test_previous_gtids_decode_and_encode_to_mysqls_bytes(name):
    previous = next(e for e in _events(name) if e[4] == ev.PREVIOUS_GTIDS_LOG_EVENT)
    body = previous[ev.HEADER_LEN:-ev.CRC_LEN]
    assert previous_gtids(previous, ev.CHECKSUM_CRC32).encode() == body


def test_an_untagged_set_reads_as_its_fields_say():
    previous = next(e for e in _events("binlog_transaction_previous_GTID_no_tag.000001")
                    if e[4] == ev.PREVIOUS_GTIDS_LOG_EVENT)
    body = previous[ev.HEADER_LEN:-ev.CRC_LEN]
    count, server, intervals, start, end = struct.unpack_from("<Q16sQqq", body)
    assert (count, intervals) == (1, 1)
    decoded = GtidSet.decode(body)
    assert str(decoded) == f"{uuid.UUID(bytes=server)}:{start}-{end - 1}"
    assert [MysqlGtid(Tsid(uuid.UUID(bytes=server)), gno) in decoded for gno in (start - 1, start, end - 1, end)] == [
        False, True, True, False]


def test_a_tagged_set_and_a_tagged_gtid_event():
    events = _events("binlog_transaction_with_GTID_TAG.000001")
    previous = previous_gtids(next(e for e in events if e[4] == ev.PREVIOUS_GTIDS_LOG_EVENT), ev.CHECKSUM_CRC32)
    tagged = gtid_of_event(next(e for e in events if e[4] == ev.GTID_TAGGED_LOG_EVENT))
    assert tagged.tsid.tag == "mytag"
    assert tagged not in previous  # the file's transaction is the one after those before it
    before = MysqlGtid(tagged.tsid, tagged.gno - 1)
    assert before in previous and str(tagged.tsid.uuid) in str(previous)
    assert GtidSet.parse(str(previous)) == previous


def test_untagged_gtid_events_match_the_bytes():
    events = [e for e in _events("binlog-invisible-columns.000001") if e[4] == ev.GTID_LOG_EVENT]
    for event in events:
        flags, server, gno = struct.unpack_from("<B16sq", event, ev.HEADER_LEN)
        assert gtid_of_event(event) == MysqlGtid(Tsid(uuid.UUID(bytes=server)), gno)


def test_set_arithmetic_and_text():
    a = GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,4f22fa47-71ca-11e1-9e33-c80aa9429562:tag:3")
    b = GtidSet.parse("3E11FA47-71CA-11E1-9E33-C80AA9429562:2-8")
    assert str(a.minus(b)).replace("\n", "") == \
        "3e11fa47-71ca-11e1-9e33-c80aa9429562:1:9,4f22fa47-71ca-11e1-9e33-c80aa9429562:tag:3"
    assert not b.issubset(a) and GtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:2-4").issubset(a)
    assert GtidSet.decode(a.encode()) == a
    with pytest.raises(MysqlGtidError):
        GtidSet.parse("not-a-uuid:1-3")
    with pytest.raises(MysqlGtidError):
        GtidSet.decode(b"\x01\x00\x00\x00\x00\x00\x00\x00" + bytes(10))


def test_excluded_groups_are_left_out_up_to_the_next_gtid_or_rotate():
    events = _events("binlog-invisible-columns.000001")
    gtids = [gtid_of_event(e) for e in events if e[4] == ev.GTID_LOG_EVENT]
    has = GtidSet()
    for gtid in gtids[:2] + gtids[3:4]:
        has.add(gtid)
    excluded = ExcludedGroups(has)
    sent = [e for e in events if excluded.accept(e)]
    assert [gtid_of_event(e) for e in sent if e[4] == ev.GTID_LOG_EVENT] == [gtids[2], gtids[4]]
    assert sent[0][4] == ev.FORMAT_DESCRIPTION_EVENT and sent[-1][4] == events[-1][4]


@pytest.mark.parametrize("v2", [False, True])
def test_a_heartbeat_moves_the_replica_past_what_was_left_out(v2):
    from relay.replication.outbound import DumpOptions, OutboundStream

    offsets_events = file_events((MYSQL / "binlog-invisible-columns.000001").read_bytes())
    events = [memoryview(bytes(e)) for _, e in offsets_events[1:]]  # after the FDE, as a dump reads them
    gtids = [gtid_of_event(e) for e in events if e[4] == ev.GTID_LOG_EVENT]
    has = GtidSet()
    has.add(gtids[0])
    stream = OutboundStream(DumpOptions(1001, None, True, True, heartbeat_v2=v2),
                            file="binlog-invisible-columns.000001", checksum_alg=ev.CHECKSUM_CRC32,
                            excluded=ExcludedGroups(has))
    end = offsets_events[-1][0] + len(offsets_events[-1][1])
    sent = stream.filter(events, end)
    second_gtid_at = next(o for o, e in offsets_events if e[4] == ev.GTID_LOG_EVENT and gtid_of_event(e) == gtids[1])
    beat = next(e for e in sent if e[4] in (ev.HEARTBEAT_LOG_EVENT, ev.HEARTBEAT_LOG_EVENT_V2))
    assert ev.parse_heartbeat(beat, ev.CHECKSUM_CRC32) == ("binlog-invisible-columns.000001", second_gtid_at)
    assert beat[4] == (ev.HEARTBEAT_LOG_EVENT_V2 if v2 else ev.HEARTBEAT_LOG_EVENT) and ev.checksum_matches(beat)
    assert bytes(sent[sent.index(beat) + 1]) == bytes(next(e for o, e in offsets_events if o == second_gtid_at))

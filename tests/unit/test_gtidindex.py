"""Where a GTID dump starts, while the newest file has nothing committed but its header: the
window between a rotation and the commit of the new file's GTID_LIST (group commit makes it
last an fsync)."""

from pathlib import Path

import pytest

from relay.binlog import events as ev
from relay.binlog.groups import GroupTracker
from relay.gtid.gtid import parse_gtid_position
from relay.gtid.mysqlgtid import gtid_of_event
from relay.replication.stream import Segment
from relay.storage.gtidindex import GtidIndex, MysqlGtidIndex
from relay.storage.importer import import_binlogs
from relay.storage.relaylog import RelayLog
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
FIRST, SECOND = "mysql-bin.000001", "mysql-bin.000002"
MYSQL_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "mysql"


def _whole_file_segment(name: str) -> Segment:
    events = file_events(BINLOG)
    tracker = GroupTracker()
    ends = [(offset, offset + len(event)) for offset, event in events if tracker.ends_group(event[4], event)]
    last_start, end = ends[-1]
    return Segment(name, 4, [memoryview(e) for _, e in events], len(BINLOG) - 4, end, last_start, new_file=True)


def _gtids(data: bytes) -> list[str]:
    return [f"{g.domain_id}-{g.server_id}-{g.seq_no}" for _, e in file_events(data) if e[4] == ev.GTID_EVENT
            for g in [ev.parse_mariadb_gtid(e)]]


def test_a_new_file_without_its_gtid_list_yet_is_not_where_a_replica_starts(tmp_path):
    relay_log = RelayLog(tmp_path, sync="none")
    relay_log.open()
    relay_log.apply([_whole_file_segment(FIRST)])
    fde = file_events(BINLOG)[0][1]
    assert fde[4] == ev.FORMAT_DESCRIPTION_EVENT
    relay_log.apply([Segment(SECOND, 4, [memoryview(fde)], len(fde), None, 0, new_file=True)])
    assert relay_log.committed == (SECOND, 4)  # the FDE is written, not committed
    index = GtidIndex(relay_log)
    gtids = _gtids(BINLOG)
    assert len(gtids) > 2
    plan = index.plan_dump(parse_gtid_position(gtids[0]), strict=False, ignore_duplicates=False)
    assert plan.file == FIRST  # (the new file would skip everything after gtids[0])
    assert index.current_state() == parse_gtid_position(gtids[-1])
    assert index.position_at(SECOND, 4) == parse_gtid_position(gtids[-1])
    relay_log.close()


def test_the_state_read_a_group_at_a_time_is_the_state_read_at_once(tmp_path):
    """The newest file's GTIDs are read from where the last read stopped (after its last GTID
    event): after each commit the state is the last GTID of each domain committed so far."""
    relay_log = RelayLog(tmp_path, sync="none")
    relay_log.open()
    index = GtidIndex(relay_log)
    tracker, chunks, start, committed_gtids = GroupTracker(), [], 4, []
    for offset, event in file_events(BINLOG):
        chunks.append(memoryview(event))
        if event[4] == ev.GTID_EVENT:
            committed_gtids.append(_gtids(BINLOG[:4] + bytes(event))[0])
        if tracker.ends_group(event[4], event):
            end = offset + len(event)
            relay_log.apply([Segment(FIRST, start, chunks, end - start, end, offset, new_file=start == 4)])
            chunks, start = [], end
            expected = parse_gtid_position(",".join({g.split("-")[0]: g for g in committed_gtids}.values()))
            assert index.current_state() == expected, offset
            assert GtidIndex(relay_log).current_state() == expected, offset  # read at once
    assert len(committed_gtids) > 2
    relay_log.close()


@pytest.mark.parametrize("name", ["binlog-invisible-columns.000001", "mysql-enum-string-set.000001",
                                  "binlog_transaction_with_GTID_TAG.000001"])
def test_a_mysql_history_executed_set_is_every_gtid_of_its_files(tmp_path, name):
    """gtid_executed of an imported MySQL file: its PREVIOUS_GTIDS and every GTID event in it
    (tagged ones too), as a full walk of the file finds them."""
    source = MYSQL_FIXTURES / name
    import_binlogs(tmp_path / "data", [source])
    relay_log = RelayLog(tmp_path / "data", sync="none")
    relay_log.open()
    try:
        index = MysqlGtidIndex(relay_log)
        expected = index.previous(name).copy()
        walked = [gtid_of_event(event) for _, event in file_events(source.read_bytes())]
        for gtid in filter(None, walked):
            expected.add(gtid)
        assert [g for g in walked if g is not None], "the fixture has GTID events"
        assert index.executed() == expected
        assert index.newest_source() == [g for g in walked if g is not None][-1]
    finally:
        relay_log.close()

"""Where a MariaDB GTID dump starts, event by event (relay.replication.gtidstart), and the binlog state
it is decided against.  The integration test tests/integration/test_gtid_dump.py holds the same
decisions against a real primary; these cover the branches one at a time."""

import struct

import pytest

from relay.binlog import events as ev
from relay.gtid.gtid import BinlogState, Gtid, start_missing_message
from relay.replication.gtidstart import GtidStart, GtidStartError


def _event(event_type: int, server_id: int, body: bytes) -> bytes:
    return ev.HEADER.pack(0, event_type, server_id, ev.HEADER_LEN + len(body), 0, 0) + body


def _group(domain: int, server: int, seq: int, standalone: bool = False) -> list[bytes]:
    flags2 = ev.FL_STANDALONE if standalone else 0
    gtid = _event(ev.GTID_EVENT, server, struct.pack("<QIB", seq, domain, flags2) + bytes(6))
    if standalone:
        return [gtid, _event(ev.QUERY_EVENT, server, bytes(13) + b"db\x00CREATE TABLE t (a INT)")]
    return [gtid, _event(ev.QUERY_EVENT, server, bytes(13) + b"db\x00BEGIN"),
            _event(ev.TABLE_MAP_EVENT, server, bytes(8)),
            _event(ev.QUERY_EVENT, server, bytes(13) + b"db\x00SAVEPOINT `a`"),
            _event(ev.XID_EVENT, server, bytes(8))]


def _sent_groups(start: GtidStart, groups: list[list[bytes]]) -> list[str]:
    """The GTIDs of the groups sent whole ('list' where an artificial GTID_LIST goes out)."""
    sent = []
    for group in groups:
        accepted = [start.accept(event, event[4], crc=False) for event in group]
        assert accepted in ([True] * len(group), [False] * len(group))  # groups go whole or not at all
        if accepted[0]:
            sent.append(str(ev.parse_mariadb_gtid(group[0])))
        if start.take_fake_list():
            sent.append("list")
    return sent


def _start(wanted: str, strict: bool = False, empty: set[int] = frozenset(), state: BinlogState = None) -> GtidStart:
    gtid = Gtid(*map(int, wanted.split("-")))
    return GtidStart({gtid.domain_id: gtid}, set(empty), strict, lambda: state or BinlogState())


def test_binlog_state_lists_domains_in_hash_order_with_each_domains_most_recent_last():
    # MariaDB 10.11 lists domain 7 before domain 0 whichever came first (seen in a GTID_LIST it
    # sent; tests/integration/test_gtid_dump.py compares many more with the primary's own).
    state = BinlogState([Gtid(0, 1, 5), Gtid(7, 1, 15), Gtid(0, 2, 6), Gtid(7, 2, 5), Gtid(0, 1, 7)])
    assert state.gtid_list() == [Gtid(7, 1, 15), Gtid(7, 2, 5), Gtid(0, 2, 6), Gtid(0, 1, 7)]
    assert state.most_recent() == {0: Gtid(0, 1, 7), 7: Gtid(7, 2, 5)}
    assert (state.seq_of(7, 1), state.seq_of(7, 3), state.seq_of(9, 1)) == (15, None, None)
    copy = state.copy()
    copy.update(Gtid(7, 1, 16))
    assert state.seq_of(7, 1) == 15 and copy != state


def test_the_start_is_the_replicas_own_gtid_not_a_higher_seq_no_of_another_server():
    groups = [_group(0, 2, 9), _group(0, 1, 5), _group(0, 1, 6, standalone=True), _group(0, 2, 3)]
    start = _start("0-1-5")
    assert _sent_groups(start, groups) == ["list", "0-1-6", "0-2-3"]  # lower seq_no after the start: sent
    assert start.done and start.seen.gtid_list() == [Gtid(0, 2, 9), Gtid(0, 1, 5)]


def test_without_strict_mode_a_hole_starts_at_the_next_gtid_of_the_same_server():
    start = _start("0-1-5")
    assert _sent_groups(start, [_group(0, 1, 4), _group(0, 1, 7), _group(0, 1, 8)]) == ["0-1-7", "list", "0-1-8"]


def test_strict_mode_refuses_a_hole_where_the_replicas_gtid_should_be():
    start = _start("0-1-5", strict=True)
    with pytest.raises(GtidStartError, match="missing the GTID 0-1-5 requested by the slave"):
        _sent_groups(start, [_group(0, 1, 4), _group(0, 1, 7)])


def test_a_domain_empty_at_connect_is_checked_again_when_it_appears():
    state = BinlogState([Gtid(3, 1, 2)])
    start = _start("3-1-9", empty={3}, state=state)
    assert start.reached  # nothing of the binlog is waited for: FDE 'created' is not zeroed
    with pytest.raises(GtidStartError) as raised:
        _sent_groups(start, [_group(3, 1, 1)])
    assert str(raised.value) == start_missing_message(Gtid(3, 1, 9), state)


def test_other_domains_flow_while_one_is_still_skipped():
    gtid = Gtid(0, 1, 2)
    start = GtidStart({0: gtid}, set(), False, BinlogState)
    assert _sent_groups(start, [_group(0, 1, 1), _group(5, 1, 1), _group(0, 1, 2), _group(0, 1, 3)]) == [
        "5-1-1", "list", "0-1-3"]

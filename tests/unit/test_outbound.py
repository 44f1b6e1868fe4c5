"""What a dump sends: the loop filter and the one-pass block framer, on a real MariaDB binlog."""


from relay.binlog import events as ev
from relay.binlog.outbound import DumpOptions, OutboundStream, frame_block
from relay.protocol.packets import PacketReader
from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

BINLOG = MARIADB_MIXED_BINLOG.read_bytes()
PRIMARY_ID = 7  # the fixture's server_id


def _events() -> list[memoryview]:
    return [memoryview(event) for _, event in file_events(BINLOG)]


def _payloads(data: bytes, seq: int) -> list[bytes]:
    reader = PacketReader()
    reader.next_seq = seq
    reader.feed(data)
    packets = []
    while (payload := reader.next_packet()) is not None:
        packets.append(bytes(payload))
    return packets


def _options(**changes) -> DumpOptions:
    base = dict(relay_server_id=1001, replica_server_id=None, checksum_declared=True, first_rotate_crc=True)
    return DumpOptions(**{**base, **changes})


def test_frame_block_frames_every_whole_event():
    body = memoryview(BINLOG)[4:]
    run = frame_block(body, len(body) - 10, 5, None)  # the last event is cut short
    events = _events()
    assert run.events == len(events) - 1
    assert run.used == sum(len(e) for e in events[:-1])
    assert run.next_sequence_id == (5 + run.events) & 0xFF
    assert _payloads(bytes(run.data), 5) == [b"\x00" + bytes(e) for e in events[:-1]]


def test_frame_block_stops_before_the_replicas_own_group():
    body = memoryview(BINLOG)[4:]
    run = frame_block(body, len(body), 1, PRIMARY_ID)
    first_gtid = next(i for i, e in enumerate(_events()) if e[4] == ev.GTID_EVENT)
    assert run.events == first_gtid


def test_filter_skips_whole_groups_of_ignored_servers_and_counts_them():
    stream = OutboundStream(_options(ignore_server_ids=frozenset({PRIMARY_ID})))
    sent = stream.filter(_events(), len(BINLOG))
    groups = sum(1 for e in _events() if e[4] == ev.GTID_EVENT)
    assert all(e[4] != ev.GTID_EVENT for e in sent)
    assert {e[4] for e in sent} <= {ev.FORMAT_DESCRIPTION_EVENT, ev.GTID_LIST_EVENT, ev.BINLOG_CHECKPOINT_EVENT}
    assert stream.skipped == {"ignore_server_ids": groups}
    assert not stream.fast_path_allowed()


def test_a_registered_replica_still_gets_other_servers_groups():
    stream = OutboundStream(_options(replica_server_id=99))
    assert stream.fast_path_allowed() and not stream.sends_everything()
    assert [bytes(e) for e in stream.filter(_events(), len(BINLOG))] == [bytes(e) for e in _events()]


def test_gtid_dump_skips_groups_the_replica_has():
    gtids = [ev.parse_mariadb_gtid(e) for e in _events() if e[4] == ev.GTID_EVENT]
    have = gtids[2]
    stream = OutboundStream(_options(gtid_skip_through={have.domain_id: have.seq_no}))
    sent = [ev.parse_mariadb_gtid(e).seq_no for e in stream.filter(_events(), len(BINLOG)) if e[4] == ev.GTID_EVENT]
    assert sent == [g.seq_no for g in gtids[3:]]

"""The relay serving several consumers at once: a stalled one slows nobody (docs/architecture.md, decision 5),
replicas ride through a relay restart, and relays chain."""

from __future__ import annotations

import socket
from pathlib import Path

from relay.sandbox.binlogfiles import HEADER, HEADER_LEN
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import attach_replica, wait_caught_up
from tests.support.mariadb import MariaDB
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    RawClient,
    WriteLoad,
    assert_healthy,
    assert_same_data,
    mixed_workload,
)

ROTATE_EVENT = 4


def _queues(local_port: int, remote_port: int) -> tuple[int, int] | None:
    """(send queue, receive queue) in bytes of the socket 127.0.0.1:local_port -> 127.0.0.1:remote_port,
    from /proc/net/tcp, or None if there is no such socket."""
    wanted = (f"0100007F:{local_port:04X}", f"0100007F:{remote_port:04X}")
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (fields[1], fields[2]) == wanted:
            tx, rx = fields[4].split(":")
            return int(tx, 16), int(rx, 16)
    return None


def _burst(primary: MariaDB, number: int) -> None:
    """About 2 MB of row events in one transaction."""
    primary.sql(f"INSERT INTO bulk.t (burst, v) SELECT {number}, REPEAT(CHAR(65 + seq % 26), 1000)"
                " FROM bulk.seq_1_to_2000")


def _drain_until(client: RawClient, target: tuple[str, int], timeout: float = 60.0) -> int:
    """Read the dump stream until an event ends at target (file, position); returns the events read."""
    file = ""
    count = 0
    last_pos = 0

    def arrived() -> bool:
        nonlocal file, count, last_pos
        for packet in client.next_dump_packets():
            assert packet[0] == 0x00, f"the stalled dump got {packet[:64]!r}"
            event = packet[1:]
            _, etype, _, length, log_pos, _ = HEADER.unpack_from(event)
            assert length == len(event)
            count += 1
            if etype == ROTATE_EVENT:
                file = event[HEADER_LEN + 8:-4].decode()  # CRC32 stream: the name ends 4 bytes early
            elif log_pos:
                last_pos = log_pos
            if (file, log_pos) == target:
                return True
        return False

    try:
        wait_for(arrived, timeout, f"the stalled dump never delivered up to {target}")
    except (AssertionError, OSError) as exc:
        raise AssertionError(f"{exc!r}: {count} events read, the last one ending at {file}:{last_pos}") from None
    return count


def test_a_stalled_consumer_slows_nothing(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=4194304"])
    replicas = [mariadb_factory(server_id=n) for n in (2, 3, 4)]
    relay = relay_factory("relay", primary.port)
    primary.execute_many(["CREATE DATABASE bulk",
                          "CREATE TABLE bulk.t (id INT PRIMARY KEY AUTO_INCREMENT, burst INT, v TEXT)"])
    for replica in replicas:
        attach_replica(replica, relay.port)
    live, paused = replicas[:2], replicas[2]
    for replica in replicas:
        wait_caught_up(primary, replica)
    paused.sql("STOP SLAVE IO_THREAD")

    # logs in, asks for everything, and never reads: the relay's send to it blocks
    stalled = RawClient(relay.port, rcvbuf=4096)
    stalled.query("SET @master_binlog_checksum = @@global.binlog_checksum")
    stalled.query("SET @mariadb_slave_capability = 4")
    stalled.start_dump("mysql-bin.000001", 4, server_id=77)
    stalled_port = stalled.sock.getsockname()[1]

    for number in range(8):
        _burst(primary, number)
        for replica in live:
            wait_caught_up(primary, replica, timeout=30)
        wait_for_mirror(primary, relay, timeout=30)
    target = primary.master_status()
    assert len(primary.binlog_files()) >= 3  # the bursts also rotated the binlog
    # the stalled client really stalls the relay's sends to it: its receive buffer is full and the
    # relay's side has bytes it cannot deliver, a few KB of the 16 MB written
    relay_side, client_side = _queues(relay.port, stalled_port), _queues(stalled_port, relay.port)
    assert relay_side is not None and client_side is not None
    assert relay_side[0] > 0 and client_side[1] > 0, (relay_side, client_side)
    assert relay_side[0] + client_side[1] < 4 * 1024 * 1024, (relay_side, client_side)
    assert relay.alive()

    for replica in live:
        assert_healthy(replica)
        assert_same_data(primary, replica)
    # the paused replica and the stalled client catch up once they read again
    paused.sql("START SLAVE IO_THREAD")
    wait_caught_up(primary, paused)
    assert_same_data(primary, paused)
    # (a window opened wider than the 4 KB it connected with, or the drain crawls at one event per ACK)
    stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    events = _drain_until(stalled, target)
    assert events > 8 * 100  # a few hundred row events per burst (8 KB max each)
    stalled.close()
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_replicas_reconnect_after_a_relay_restart_under_load(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=262144"])
    replicas = [mariadb_factory(server_id=2), mariadb_factory(server_id=3)]
    relay = relay_factory("relay", primary.port)
    attach_replica(replicas[0], relay.port, use_gtid="no")
    attach_replica(replicas[1], relay.port, use_gtid="slave_pos")
    with WriteLoad(primary) as load:
        wait_for(lambda: load.commits >= 200, 30, "the write load did not get going")
        for replica in replicas:
            wait_for(lambda replica=replica: replica.sql("SELECT COUNT(*) FROM information_schema.TABLES"
                                         " WHERE TABLE_SCHEMA = 'loadtest'")[0][0] == 1, 30,
                     f"replica {replica.server_id} did not start replicating")
        log_before = len(relay.log_text())
        assert relay.stop() == 0  # SIGTERM: a clean stop, mid-load
        commits_at_restart = load.commits
        relay.start()
        relay.wait_listening()

        def reconnected() -> bool:
            text = relay.log_text()[log_before:]
            return all(f"dump for server_id {r.server_id} " in text for r in replicas)

        wait_for(reconnected, 30, "the replicas did not reconnect to the restarted relay by themselves")
        wait_for(lambda: load.commits >= commits_at_restart + 200, 30, "the write load stalled")
        commits = load.stop()
    assert commits >= 400
    wait_for_mirror(primary, relay)
    for replica in replicas:
        status = wait_caught_up(primary, replica)
        assert status["Slave_IO_Running"] == "Yes" and status["Slave_SQL_Running"] == "Yes"
        assert int(status["Last_SQL_Errno"]) == 0, status["Last_SQL_Error"]
        assert_same_data(primary, replica)
        assert replica.sql("SELECT COUNT(*) FROM loadtest.t")[0][0] == 3 * commits
    assert replicas[1].sql("SELECT @@GLOBAL.gtid_slave_pos") == primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")
    assert relay.stop() == 0
    assert relay.log_text().count("binlog-relay running") == 2
    assert "Traceback" not in relay.log_text()


def test_relay_chain(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16384"])
    replica = mariadb_factory(server_id=2)
    relay_a = relay_factory("a", primary.port)
    relay_b = relay_factory("b", relay_a.port, server_id=1002)
    attach_replica(replica, relay_b.port)
    mixed_workload(primary, batches=6)
    assert len(primary.binlog_files()) >= 5
    wait_for_mirror(primary, relay_a)
    wait_for_mirror(primary, relay_b)  # relay B's files are a byte mirror of the primary's too
    status = wait_caught_up(primary, replica)
    assert int(status["Master_Port"]) == relay_b.port
    assert_healthy(replica)
    assert_same_data(primary, replica)
    # and live: one more write travels primary -> A -> B -> replica
    primary.sql("INSERT INTO shop.kv VALUES ('through-the-chain', 'x', 4)")
    wait_caught_up(primary, replica)
    wait_for_mirror(primary, relay_b)
    assert replica.sql("SELECT v FROM shop.kv WHERE k = 'through-the-chain'") == [(b"x",)]
    assert relay_b.stop() == 0
    assert relay_a.stop() == 0
    for relay in (relay_a, relay_b):
        assert "Traceback" not in relay.log_text()

"""Real MariaDB 10.11 replicas replicating from the relay: file/position, GTID, and moving a replica
between the primary and the relay without translating coordinates (docs/architecture.md, decision 1)."""

from __future__ import annotations

import pytest

from relay.sandbox.replication import FIRST_FILE, attach_replica, replica_position, wait_caught_up
from tests.support.mariadb import MariaDB
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    assert_healthy,
    assert_same_data,
    mixed_workload,
)

SMALL_BINLOGS = ["--max-binlog-size=16384"]


def test_file_position_replica_of_the_relay(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    replica = mariadb_factory(server_id=2)
    relay = relay_factory("relay", primary.port)
    attach_replica(replica, relay.port, use_gtid="no", log_file=FIRST_FILE, log_pos=4)
    mixed_workload(primary)
    assert len(primary.binlog_files()) >= 6, primary.binlog_files()  # rotations and two FLUSH BINARY LOGS
    status = wait_caught_up(primary, replica)
    assert (status["Relay_Master_Log_File"], int(status["Exec_Master_Log_Pos"])) == primary.master_status()
    assert status["Master_Log_File"] == primary.master_status()[0]
    assert status["Using_Gtid"] == "No"
    assert_healthy(replica)
    assert_same_data(primary, replica)
    wait_for_mirror(primary, relay)
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_gtid_replica_of_the_relay_starting_empty(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    replica = mariadb_factory(server_id=2)
    relay = relay_factory("relay", primary.port)
    mixed_workload(primary, batches=4)  # some history before the replica asks from the beginning
    wait_for_mirror(primary, relay)
    assert replica.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0] == ""
    attach_replica(replica, relay.port, use_gtid="slave_pos")
    mixed_workload(primary, schema="shop2", batches=4)  # and more while it is attached
    status = wait_caught_up(primary, replica)
    assert (status["Relay_Master_Log_File"], int(status["Exec_Master_Log_Pos"])) == primary.master_status()
    assert status["Using_Gtid"] == "Slave_Pos"
    assert_healthy(replica)
    assert_same_data(primary, replica)
    gtid_binlog_pos = primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    assert gtid_binlog_pos
    assert replica.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0] == gtid_binlog_pos
    # A GTID replica that reconnects resumes from its GTID position: the relay picks the file and skips
    # the groups it has (a group sent twice would stop it with a duplicate key).
    # Its GTID position ends up a few files back, so the relay must find the file by GTID_LIST events.
    replica.stop_slave()
    primary.sql("INSERT INTO shop2.kv VALUES ('while-stopped', 'x', 2)")
    primary.sql("INSERT INTO shop2.items (name) VALUES ('while-stopped')")
    files_before = len(primary.binlog_files())
    mixed_workload(primary, schema="shop3", batches=4)
    assert len(primary.binlog_files()) >= files_before + 3
    replica.start_slave()
    wait_caught_up(primary, replica)
    assert_healthy(replica)
    assert_same_data(primary, replica)
    assert replica.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0] == primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0]
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def _repoint(replica: MariaDB, port: int, use_gtid: str) -> tuple[str, int]:
    """STOP SLAVE, then CHANGE MASTER TO port, with the very coordinates it had executed (file/position
    mode) or its GTID position (GTID mode); START SLAVE."""
    replica.stop_slave()
    executed = replica_position(replica.slave_status())
    assert executed is not None, f"replica server_id {replica.server_id} has no source"
    file, position = executed
    if use_gtid == "no":
        replica.change_master("127.0.0.1", port, log_file=file, log_pos=position, use_gtid="no")
    else:
        replica.change_master("127.0.0.1", port, use_gtid=use_gtid)
    replica.start_slave()
    return file, position


@pytest.mark.parametrize("use_gtid", ["no", "slave_pos"])
def test_replica_moves_to_the_relay_and_back(mariadb_factory, relay_factory, use_gtid):
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    replica = mariadb_factory(server_id=2)
    relay = relay_factory("relay", primary.port)
    attach_replica(replica, primary.port, use_gtid=use_gtid)
    mixed_workload(primary, schema="from_primary", batches=3)
    wait_caught_up(primary, replica)
    wait_for_mirror(primary, relay)

    moved_at = _repoint(replica, relay.port, use_gtid)
    assert moved_at == primary.master_status()
    assert moved_at[1] > 4  # mid-file: the relay starts the dump past the file's first events
    mixed_workload(primary, schema="on_relay", batches=3)
    status = wait_caught_up(primary, replica)
    assert int(status["Master_Port"]) == relay.port
    assert_healthy(replica)
    assert_same_data(primary, replica)

    # Back to the primary
    primary.sql("INSERT INTO on_relay.kv VALUES ('mid-file', 'x', 3)")
    wait_caught_up(primary, replica)
    moved_back_at = _repoint(replica, primary.port, use_gtid)
    assert moved_back_at == primary.master_status()
    mixed_workload(primary, schema="back_on_primary", batches=3)
    status = wait_caught_up(primary, replica)
    assert int(status["Master_Port"]) == primary.port
    assert_healthy(replica)
    assert_same_data(primary, replica)
    if use_gtid != "no":
        assert replica.sql("SELECT @@GLOBAL.gtid_slave_pos") == primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def _heartbeats(replica: MariaDB) -> int:
    return int(replica.sql("SHOW GLOBAL STATUS LIKE 'Slave_received_heartbeats'")[0][1])


def test_heartbeats_keep_an_idle_replica_current(mariadb_factory, relay_factory):
    """An idle replica that asked for heartbeats gets them, and each one is compatible with where it
    is (same file, position not behind: else ER_SLAVE_HEARTBEAT_FAILURE stops its IO thread), also
    after a rotation and after groups the relay filtered out."""
    primary = mariadb_factory(server_id=1, extra_args=SMALL_BINLOGS)
    replica = mariadb_factory(server_id=2)
    relay = relay_factory("relay", primary.port, upstream={"ignore_server_ids": [9]})
    replica.change_master("127.0.0.1", relay.port, log_file=FIRST_FILE, log_pos=4, heartbeat_period=0.2)
    replica.start_slave()
    mixed_workload(primary, batches=3)
    wait_caught_up(primary, replica)

    def beats_while_idle(what: str) -> None:
        start = _heartbeats(replica)
        wait_caught_up(primary, replica)
        replica.wait_until(lambda: _heartbeats(replica) >= start + 5, 10, f"heartbeats {what}")
        assert_healthy(replica)
        assert (replica.slave_status()["Master_Log_File"], int(replica.slave_status()["Read_Master_Log_Pos"])) \
            == primary.master_status()

    beats_while_idle("after the workload")
    primary.sql("FLUSH BINARY LOGS")
    beats_while_idle("after a rotation")
    # a group the relay does not send (server_id 9 is ignored): the heartbeat's position is past it
    primary.execute_many(["SET SESSION server_id = 9", "INSERT INTO shop.kv VALUES ('from 9', 'x', 9)",
                          "SET SESSION server_id = 1"])
    primary.sql("INSERT INTO shop.kv VALUES ('from 1', 'y', 1)")
    beats_while_idle("after a filtered group")
    assert replica.sql("SELECT COUNT(*) FROM shop.kv WHERE k LIKE 'from %'") == [(1,)]
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_heartbeat_after_a_filtered_group_at_the_end(mariadb_factory, relay_factory):
    """The last group before the replica idles is one the relay filters: the replica's read position
    stops before it, the heartbeat says where the relay is, and the replica accepts it."""
    primary = mariadb_factory(server_id=1)
    replica = mariadb_factory(server_id=2)
    relay = relay_factory("relay", primary.port, upstream={"ignore_server_ids": [9]})
    primary.execute_many(["CREATE DATABASE hb", "CREATE TABLE hb.t (id INT PRIMARY KEY)"])
    replica.change_master("127.0.0.1", relay.port, log_file=FIRST_FILE, log_pos=4, heartbeat_period=0.2)
    replica.start_slave()
    wait_caught_up(primary, replica)
    primary.execute_many(["SET SESSION server_id = 9", "INSERT INTO hb.t VALUES (9)", "SET SESSION server_id = 1"])
    start = _heartbeats(replica)
    replica.wait_until(lambda: _heartbeats(replica) >= start + 5, 10, "heartbeats after a filtered group")
    assert_healthy(replica)
    primary.sql("INSERT INTO hb.t VALUES (1)")
    wait_caught_up(primary, replica)
    assert replica.sql("SELECT id FROM hb.t") == [(1,)]
    assert_healthy(replica)
    assert relay.stop() == 0

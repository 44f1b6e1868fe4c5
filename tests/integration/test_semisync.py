"""The relay as a semi-sync replica of a real MariaDB 10.11 primary (upstream.semi_sync): a commit
returns on the primary only once the relay acknowledged it, and the relay acknowledges only what
is committed on its disk."""

from __future__ import annotations

import os
import signal
import struct

from relay.sandbox.binlogfiles import GTID_EVENT, HEADER_LEN
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import attach_replica
from tests.support.mariadb import MariaDB
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    dump_events,
    stored_events,
)

SEMI_SYNC_PRIMARY = ["--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-timeout=30000"]


def _status(primary: MariaDB, name: str) -> str:
    rows = primary.sql(f"SHOW GLOBAL STATUS LIKE '{name}'")
    return str(rows[0][1]) if rows else ""


def _gtid_binlog_pos(server: MariaDB) -> str:
    return str(server.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0])


def _seq_numbers(events) -> set[int]:
    return {struct.unpack_from("<Q", e.data, HEADER_LEN)[0] for e in events if e.type == GTID_EVENT}


def test_every_commit_waits_for_the_relays_ack_of_what_is_on_its_disk(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=SEMI_SYNC_PRIMARY)
    relay = relay_factory("relay", primary.port, upstream={"semi_sync": True})
    primary.wait_until(lambda: _status(primary, "Rpl_semi_sync_master_clients") == "1", 30,
                       "the relay did not connect as a semi-sync replica")
    primary.execute_many(["CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)"])
    yes_before = int(_status(primary, "Rpl_semi_sync_master_yes_tx"))
    for i in range(50):
        primary.sql(f"INSERT INTO s.t VALUES ({i})")
    assert int(_status(primary, "Rpl_semi_sync_master_yes_tx")) - yes_before == 50
    assert _status(primary, "Rpl_semi_sync_master_no_tx") == "0"
    assert _status(primary, "Rpl_semi_sync_master_status") == "ON"
    # The moment the primary's commit returns the transaction is committed in the relay's files:
    # killed right then, and started again with the primary gone, the relay still serves it.
    primary.sql("INSERT INTO s.t VALUES (1000)")
    last_seq = int(primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0].rsplit("-", 1)[1])
    relay.kill9()
    assert last_seq in _seq_numbers(stored_events(relay.data_dir))
    primary.stop()
    relay.start()
    relay.wait_listening()
    served = dump_events(relay.port, "", 4, server_id=0, register=False)
    assert last_seq in _seq_numbers(served)
    assert "semi-sync: each transaction the primary waits on is acknowledged once on disk" in relay.log_text()


def test_a_stalled_relay_lets_the_primary_fall_back_to_async_and_catches_up(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=["--rpl-semi-sync-master-enabled=ON",
                                                      "--rpl-semi-sync-master-timeout=500"])
    relay = relay_factory("relay", primary.port, upstream={"semi_sync": True})
    primary.wait_until(lambda: _status(primary, "Rpl_semi_sync_master_clients") == "1", 30,
                       "the relay did not connect as a semi-sync replica")
    primary.execute_many(["CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)"])
    os.kill(relay.pid, signal.SIGSTOP)
    try:
        primary.sql("INSERT INTO s.t VALUES (1)")  # returns after the primary's timeout, unacknowledged
        assert int(_status(primary, "Rpl_semi_sync_master_no_tx")) >= 1
    finally:
        os.kill(relay.pid, signal.SIGCONT)
    for i in range(2, 20):
        primary.sql(f"INSERT INTO s.t VALUES ({i})")
    wait_for_mirror(primary, relay)
    wait_for(lambda: _status(primary, "Rpl_semi_sync_master_status") == "ON", 30,
             "the primary did not return to semi-sync once the relay acknowledged again")


def test_with_wait_for_replicas_a_commit_returns_once_the_relays_replica_has_it(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1, extra_args=SEMI_SYNC_PRIMARY)
    relay = relay_factory("relay", primary.port, upstream={"semi_sync": True},
                          semi_sync={"wait_for_replicas": 1, "replica_timeout": 4})
    replica = mariadb_factory(server_id=11, extra_args=["--rpl-semi-sync-slave-enabled=ON"])
    attach_replica(replica, relay.port, use_gtid="slave_pos")
    primary.execute_many(["CREATE DATABASE s", "CREATE TABLE s.t (id INT PRIMARY KEY)"])
    wait_for(lambda: replica.slave_status().get("Gtid_IO_Pos") == _gtid_binlog_pos(primary), 30,
             "the relay's replica did not catch up")
    for i in range(20):
        primary.sql(f"INSERT INTO s.t VALUES ({i})")
        # no waiting: when the commit returns, the replica of the relay has already received it
        assert replica.slave_status()["Gtid_IO_Pos"] == _gtid_binlog_pos(primary)
    assert _status(primary, "Rpl_semi_sync_master_no_tx") == "0"
    assert "acknowledging without them" not in relay.log_text()  # every ACK waited for the replica's
    # The replica stops: the primary falls back to async after its own timeout instead of hanging,
    # and the relay, past replica_timeout, acknowledges alone until the replica is back.
    primary.sql("SET GLOBAL rpl_semi_sync_master_timeout = 1000")
    replica.stop_slave()
    primary.sql("INSERT INTO s.t VALUES (100)")
    assert int(_status(primary, "Rpl_semi_sync_master_no_tx")) >= 1
    wait_for(lambda: "acknowledging without them until they catch up" in relay.log_text(), 30,
             "the relay kept waiting for a stopped replica")
    for i in range(101, 110):
        primary.sql(f"INSERT INTO s.t VALUES ({i})")
    wait_for_mirror(primary, relay)
    replica.start_slave()
    more = iter(range(200, 10000))

    def caught_up() -> bool:  # each commit is a moment the relay looks at its replica's ACKs again
        primary.sql(f"INSERT INTO s.t VALUES ({next(more)})")
        return "caught up; waiting for their ACKs again" in relay.log_text()

    wait_for(caught_up, 30, "the relay did not wait for its replica again once it was back")
    primary.sql("INSERT INTO s.t VALUES (10000)")
    assert replica.slave_status()["Gtid_IO_Pos"] == _gtid_binlog_pos(primary)
    wait_for(lambda: _status(primary, "Rpl_semi_sync_master_status") == "ON", 30, "the primary stayed async")

"""MariaDB GTID dumps from the relay against the same dumps from the primary (the oracle).

One primary writes a history that makes GTID starts hard: two domains, three server_ids (a
session's server_id and gtid_seq_no set by hand, as a multi-source or failed-over topology
leaves them), a lower seq_no of another server written after a higher one (7-2-5 after 7-1-15),
a hole in a domain's sequence, a standalone DDL and three binlog files.  The relay mirrors it.
Then the same @slave_connect_state, in strict mode and not, is dumped from both: the events
(artificial ones included, their sender's server_id aside) or the error must be the same.
Real replicas check the two outcomes that matter most: a replica missing 7-2-5 gets it from the
relay, and a strict-mode replica is refused with the primary's words."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from relay.gtid.gtid import BinlogState, Gtid
from relay.sandbox.binlogfiles import GTID_EVENT, HEADER_LEN, binlog_events
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import attach_replica, wait_binlog_settled
from tests.support.mariadb import MariaDB
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    DUMP_SERVER_ID,
    RawClient,
    assert_same_data,
    dump_events,
)
from tests.support.replication import (
    gtid_dump_outcome as _outcome,
)
from tests.support.replication import (
    outcome_gtids as _gtids,
)

GTID_LIST_EVENT = 163

# Connect states: the replica's last GTID per domain.  The history below holds domain 0
# (servers 1 and 3, a hole between 0-1-6 and 0-1-9) and domain 7 (servers 1 and 2).
CONNECT_STATES = [
    "",                         # nothing yet: every domain from its beginning
    "0-1-2",                    # domain 7 not named: from its beginning
    "0-1-5",                    # the last GTID before the second file
    "0-1-5,7-1-15",
    "0-1-9,7-1-15",             # 7-2-5, written after 7-1-15, must still come
    "0-1-9,7-2-5",
    "0-1-10,7-1-14",
    "0-1-7,7-1-15",             # in the hole: strict mode refuses, otherwise 0-1-9 comes next
    "0-3-11,7-1-16",
    "0-1-12,7-1-16",            # all of it
    "0-1-12,7-1-16,5-1-3",      # a domain the binlog never had
    "0-1-99",                   # ahead of the domain
    "0-2-3",                    # a server that never wrote in the domain: diverged
    "7-1-16",
    "0-1-12,7-9-1",
    "0-1",                      # malformed
    "0-1-2,0-1-3",              # one domain twice
]


def _write_history(primary: MariaDB) -> None:
    run = primary.execute_many
    run(["CREATE DATABASE g", "CREATE TABLE g.t (id INT PRIMARY KEY, v VARCHAR(32)) ENGINE=InnoDB"]
        + [f"INSERT INTO g.t VALUES ({i}, 'domain 0')" for i in range(1, 4)])  # 0-1-1 .. 0-1-5
    run(["FLUSH BINARY LOGS"])
    run(["SET SESSION gtid_domain_id = 7", "SET SESSION gtid_seq_no = 14",
         "INSERT INTO g.t VALUES (14, 'domain 7')", "INSERT INTO g.t VALUES (15, 'domain 7')",  # 7-1-14, 7-1-15
         "SET SESSION server_id = 2", "SET SESSION gtid_seq_no = 5",
         "INSERT INTO g.t VALUES (25, 'server 2, lower seq_no')",  # 7-2-5
         "SET SESSION server_id = 1", "SET SESSION gtid_domain_id = 0",
         "INSERT INTO g.t VALUES (6, 'domain 0')",  # 0-1-6
         "SET SESSION gtid_seq_no = 9", "INSERT INTO g.t VALUES (9, 'after a hole')",  # 0-1-9
         "CREATE TABLE g.u (id INT PRIMARY KEY) ENGINE=InnoDB"])  # 0-1-10, standalone
    run(["FLUSH BINARY LOGS"])
    run(["SET SESSION gtid_domain_id = 7", "INSERT INTO g.t VALUES (16, 'domain 7')",  # 7-1-16
         "SET SESSION gtid_domain_id = 0", "SET SESSION server_id = 3",
         "INSERT INTO g.t VALUES (11, 'server 3')",  # 0-3-11
         "SET SESSION server_id = 1", "BEGIN", "INSERT INTO g.u VALUES (1)", "INSERT INTO g.u VALUES (2)",
         "COMMIT"])  # 0-1-12


def _history_primary_and_relay(mariadb_factory, relay_factory, **relay_config):
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, **relay_config)
    _write_history(primary)
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    assert len(primary.binlog_files()) == 3
    return primary, relay


# The index of the stored history (storage/history.py) lets a GTID dump jump over what its replica
# has: with an entry after every group it jumps wherever it may, by default (4 MiB) not in files
# this small; either way the events must be the primary's.
@pytest.mark.parametrize("index_interval", [1, "4M"])
def test_every_gtid_start_is_served_as_the_primary_serves_it(mariadb_factory, relay_factory, index_interval):
    primary, relay = _history_primary_and_relay(mariadb_factory, relay_factory,
                                                storage={"index_interval": index_interval})
    differences = []
    for connect_state in CONNECT_STATES:
        for strict in (False, True):
            expected = _outcome(primary.port, connect_state, strict)
            served = _outcome(relay.port, connect_state, strict)
            if served != expected:
                differences.append(f"{connect_state!r} strict={strict}: primary {_gtids(expected)}, "
                                   f"relay {_gtids(served)}")
    assert not differences, "\n".join(differences)
    # The history must exercise what it claims to: a start where 7-2-5 comes after the
    # replica's 7-1-15, a hole refused only in strict mode, errors of both kinds.
    assert "7-2-5" in _gtids(_outcome(primary.port, "0-1-9,7-1-15", False))
    assert _gtids(_outcome(primary.port, "0-1-7,7-1-15", True))[0].startswith("error")
    assert not _gtids(_outcome(primary.port, "0-1-7,7-1-15", False))[0].startswith("error")
    assert _gtids(_outcome(primary.port, "0-2-3", False))[0].startswith("error")
    assert relay.alive()


def test_a_replica_missing_a_lower_seq_no_gets_it_from_the_relay(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port)
    replica = mariadb_factory(server_id=5)
    # The replica has everything up to 7-1-15 and 0-1-5, then moves to the relay; the
    # primary meanwhile wrote 7-2-5 (a lower seq_no of domain 7) and the rest.
    primary.execute_many(["CREATE DATABASE g", "CREATE TABLE g.t (id INT PRIMARY KEY, v VARCHAR(32))"])
    primary.execute_many(["SET SESSION gtid_domain_id = 7", "SET SESSION gtid_seq_no = 15",
                          "INSERT INTO g.t VALUES (15, 'domain 7')"])
    attach_replica(replica, primary.port, use_gtid="slave_pos")
    replica.wait_until(lambda: replica.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0]
                       == primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0], 60, "replica caught up")
    replica.stop_slave()
    primary.execute_many(["SET SESSION gtid_domain_id = 7", "SET SESSION server_id = 2",
                          "SET SESSION gtid_seq_no = 5", "INSERT INTO g.t VALUES (25, 'server 2, lower seq_no')",
                          "SET SESSION server_id = 1", "SET SESSION gtid_domain_id = 0",
                          "INSERT INTO g.t VALUES (1, 'domain 0')", "FLUSH BINARY LOGS",
                          "INSERT INTO g.t VALUES (2, 'domain 0')"])
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    replica.change_master("127.0.0.1", relay.port, use_gtid="slave_pos")
    replica.start_slave()
    replica.wait_until(lambda: replica.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0]
                       == primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0], 60, "replica caught up from the relay")
    assert replica.sql("SELECT v FROM g.t WHERE id = 25") == [("server 2, lower seq_no",)]
    assert_same_data(primary, replica)


def _strict_refusal(replica: MariaDB, port: int, slave_pos: str) -> tuple[int, str]:
    replica.sql("STOP SLAVE")
    replica.sql("RESET SLAVE ALL")
    replica.sql(f"SET GLOBAL gtid_slave_pos = '{slave_pos}'")
    attach_replica(replica, port, use_gtid="slave_pos")
    status = wait_for(lambda: (s := replica.slave_status())["Slave_IO_Running"] == "No" and s, 30,
                      f"a strict replica at {slave_pos} kept replicating from port {port}")
    return int(status["Last_IO_Errno"]), str(status["Last_IO_Error"])


def test_a_strict_replica_in_a_hole_is_refused_as_by_the_primary(mariadb_factory, relay_factory):
    primary, relay = _history_primary_and_relay(mariadb_factory, relay_factory)
    replica = mariadb_factory(server_id=5, extra_args=["--gtid-strict-mode=1"])
    from_primary = _strict_refusal(replica, primary.port, "0-1-7,7-1-15")
    from_relay = _strict_refusal(replica, relay.port, "0-1-7,7-1-15")
    assert from_primary[0] == 1236 and "missing the GTID 0-1-7" in from_primary[1], from_primary
    assert from_relay == from_primary


def test_gtid_lists_are_ordered_as_the_primary_orders_them(mariadb_factory):
    # The artificial GTID_LIST above must be the primary's byte for byte, and MariaDB lists
    # domains and servers in the order of its hash tables: check that order against the
    # GTID_LIST the primary writes at the start of a file, for many domains and servers.
    primary = mariadb_factory(server_id=1)
    primary.execute_many(["CREATE DATABASE g", "CREATE TABLE g.t (id INT PRIMARY KEY AUTO_INCREMENT)"])
    statements = []
    for step in range(90):
        domain, server = (step * 37) % 29, 1 + (step * 7) % 11
        statements += [f"SET SESSION gtid_domain_id = {domain}", f"SET SESSION server_id = {server}",
                       "INSERT INTO g.t VALUES ()"]
    primary.execute_many(statements + ["SET SESSION server_id = 1", "FLUSH BINARY LOGS"])
    first, second = [name for name, _ in primary.binlog_files()]
    written = [event for event in binlog_events(primary.binlog_path(first)) if event.type == GTID_EVENT]
    state = BinlogState()
    for event in written:
        seq_no, domain = struct.unpack_from("<QI", event.data, HEADER_LEN)
        state.update(Gtid(domain, event.server_id, seq_no))
    listed = next(event for event in binlog_events(primary.binlog_path(second)) if event.type == GTID_LIST_EVENT)
    count = struct.unpack_from("<I", listed.data, HEADER_LEN)[0]
    primary_order = [Gtid(*struct.unpack_from("<IIQ", listed.data, HEADER_LEN + 4 + 16 * i)) for i in range(count)]
    assert len(primary_order) > 60
    assert state.gtid_list() == primary_order


def test_a_gtid_start_far_into_a_file_holds_up_no_other_client(mariadb_factory, relay_factory):
    """A GTID dump starting at the end of a large file that the index does not cover (an entry
    every gigabyte) walks every group before its start, as the primary does.  Meanwhile the
    relay's other clients are answered as usual: the longest wait for a query while the walk
    runs is a small part of it (it was all of it when the walk never gave the event loop back)."""
    primary = mariadb_factory(server_id=1)
    primary.execute_many([
        "CREATE DATABASE w", "CREATE TABLE w.t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(64))",
        "CREATE PROCEDURE w.fill(n INT) BEGIN DECLARE i INT DEFAULT 0; "
        "WHILE i < n DO INSERT INTO w.t (v) VALUES (REPEAT('x', 60)); SET i = i + 1; END WHILE; END",
        "CALL w.fill(60000)",  # autocommit: one group per row, in one file
    ])
    relay = relay_factory("relay", primary.port, storage={"index_interval": "1G"})
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    connect_state = primary.sql("SELECT @@gtid_binlog_pos")[0][0]
    answered: list[float] = []
    walking = threading.Event()
    done = threading.Event()

    def ask_again_and_again() -> None:
        with RawClient(relay.port) as other:
            while not done.is_set():
                other.query("SELECT @@version")
                answered.append(time.monotonic())
                walking.set()

    asker = threading.Thread(target=ask_again_and_again)
    asker.start()
    try:
        walking.wait(10)
        started = time.monotonic()
        events = dump_events(relay.port, "", 4, DUMP_SERVER_ID, connect_state=connect_state)
        ended = time.monotonic()
    finally:
        done.set()
        asker.join(10)
    assert not [event for event in events if event.type == GTID_EVENT], "the replica has every group"
    during = [started, *(t for t in answered if started < t < ended), ended]
    longest_wait = max(later - earlier for earlier, later in zip(during, during[1:]))
    assert longest_wait < (ended - started) / 2, (longest_wait, ended - started, len(during) - 2)

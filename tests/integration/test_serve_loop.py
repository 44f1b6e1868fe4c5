"""The loop filter (docs/architecture.md, decision 4) in a real circular setup:

    P (server_id 1, log-slave-updates) --> relay R --> S (server_id 3) --> P

S's own transactions reach P and so R's store (kept as a faithful archive), but R never sends them
back to S: not when S's server_id is in upstream.ignore_server_ids, and not when it is simply the
dumping replica's own server_id."""

from __future__ import annotations

import pytest

from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_caught_up
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    assert_healthy,
    assert_same_data,
    dump_events,
    gtid_origins,
    stored_events,
)

S_ID = 3


@pytest.mark.parametrize("path", ["replica-own-id", "ignore-list"])
def test_a_replica_never_gets_its_own_transactions_back(mariadb_factory, relay_factory, path):
    primary = mariadb_factory(server_id=1, extra_args=["--log-slave-updates", "--max-binlog-size=16384"])
    if path == "replica-own-id":
        # S would apply its own transactions again if they came back (and stop on a duplicate key):
        # only the relay's filter keeps them away.
        s = mariadb_factory(server_id=S_ID, extra_args=["--replicate-same-server-id"])
        relay = relay_factory("relay", primary.port)
    else:
        s = mariadb_factory(server_id=S_ID, extra_args=["--log-slave-updates"])
        relay = relay_factory("relay", primary.port, upstream={"ignore_server_ids": [S_ID]})

    primary.execute_many(["CREATE DATABASE ring", "CREATE TABLE ring.t (id INT PRIMARY KEY, origin INT,"
                          " v VARCHAR(100), UNIQUE KEY (v))"])
    primary.sql("INSERT INTO ring.t VALUES (1, 1, 'from P')")
    attach_replica(s, relay.port)  # S replicates P through the relay
    wait_caught_up(primary, s)
    attach_replica(primary, s.port)  # and P replicates S directly: the circle is closed

    # S writes; its transactions travel S -> P -> R (-> not S)
    for n in range(20):
        s.sql("INSERT INTO ring.t VALUES (%s, 3, %s)", 100 + n, f"from S {n}")
    s.execute_many(["BEGIN", "INSERT INTO ring.t VALUES (200, 3, 'from S in a trx')",
                    "UPDATE ring.t SET v = 'from S, updated' WHERE id = 100", "DELETE FROM ring.t WHERE id = 101",
                    "COMMIT"])
    s_transactions = 21
    wait_caught_up(s, primary)  # P applied them
    primary.sql("INSERT INTO ring.t VALUES (2, 1, 'from P after S')")
    wait_for_mirror(primary, relay)
    stored = gtid_origins(stored_events(relay.data_dir))
    assert stored.count(S_ID) == s_transactions, stored  # R keeps S's groups, as P wrote them
    wait_caught_up(primary, s)  # S reads P's binlog through R to its end: across the skipped groups
    status = assert_healthy(s)
    assert status["Slave_SQL_Running"] == "Yes" and not status["Last_SQL_Error"]
    assert_same_data(primary, s)
    # S's own binlog holds each of its transactions once (none came back to be logged again)
    s_binlog = gtid_origins(stored_events(s.datadir))
    assert s_binlog.count(S_ID) == s_transactions, s_binlog

    # and replication P -> R -> S goes on after the gaps
    primary.sql("INSERT INTO ring.t VALUES (3, 1, 'from P at the end')")
    wait_caught_up(primary, s)
    assert_healthy(s)
    assert_same_data(primary, s)
    assert_healthy(primary)

    # What the relay sends, seen raw: a replica's dump (registered) as S's server_id never carries
    # S's groups ...
    s.stop_slave()  # (a second dump with S's server_id would end S's own)
    as_s = gtid_origins(dump_events(relay.port, FIRST_FILE, 4, server_id=S_ID))
    assert as_s.count(1) >= 3, as_s
    assert S_ID not in as_s, as_s
    # ... a replica with another server_id gets them unless S_ID is in ignore_server_ids ...
    as_other = gtid_origins(dump_events(relay.port, FIRST_FILE, 4, server_id=77))
    assert as_other.count(1) == as_s.count(1), (as_other, as_s)
    # ... and so does a tool that dumps without registering, whatever server_id it gives
    tool = gtid_origins(dump_events(relay.port, FIRST_FILE, 4, server_id=S_ID, register=False))
    if path == "ignore-list":
        assert S_ID not in as_other, as_other
        assert S_ID not in tool, tool
    else:
        assert as_other.count(S_ID) == s_transactions, as_other
        assert tool.count(S_ID) == s_transactions, tool
    assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()

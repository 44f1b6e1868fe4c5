"""Upstream ingest against a real MariaDB 10.11 primary: the relay's files mirror the primary's."""

from __future__ import annotations

import random
import time
from pathlib import Path

from relay.sandbox.compare import mirror_differences
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess, relay_config
from tests.support.mariadb import MariaDB
from tests.support.proxy import CuttableProxy
from tests.support.relay import wait_for_mirror
from tests.support.replication import WriteLoad


def _relay(tmp_path: Path, upstream_port: int, **overrides) -> RelayProcess:
    relay = RelayProcess(tmp_path, relay_config(tmp_path / "data", upstream_port, **overrides))
    relay.start()
    return relay


def _mixed_workload(primary: MariaDB) -> None:
    primary.execute_many([
        "CREATE DATABASE shop",
        "CREATE TABLE shop.items (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(100), qty INT,"
        " note TEXT) ENGINE=InnoDB",
        "CREATE TABLE shop.blobs (id INT PRIMARY KEY, data LONGBLOB) ENGINE=InnoDB",
        "INSERT INTO shop.items (name, qty, note) VALUES ('a', 1, 'x'), ('b', 2, NULL), ('c', 3, 'z')",
    ])
    for batch in range(12):  # ~12 x 60 KB of row events: rotations at max_binlog_size=64K
        primary.sql("INSERT INTO shop.items (name, qty, note) SELECT CONCAT('n', seq), seq, REPEAT('r', 200)"
                    " FROM shop.seq_1_to_250")
        if batch == 6:
            primary.sql("FLUSH BINARY LOGS")
    primary.execute_many(
        ["BEGIN"] + [f"UPDATE shop.items SET qty = qty + {i} WHERE id % 7 = {i % 7}" for i in range(30)]
        + ["DELETE FROM shop.items WHERE id % 11 = 0", "COMMIT"])
    primary.sql("INSERT INTO shop.blobs VALUES (1, REPEAT('b', 20 * 1024 * 1024))")
    primary.execute_many(["ALTER TABLE shop.items ADD COLUMN extra INT DEFAULT 7",
                          "UPDATE shop.items SET extra = id WHERE id < 100",
                          "DELETE FROM shop.items WHERE id > 2500"])


def test_mixed_workload_is_mirrored_byte_for_byte(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=65536"])
    live = _relay(tmp_path / "live", primary.port)
    try:
        _mixed_workload(primary)
        assert len(primary.binlog_files()) >= 7  # at least 5 rotations plus FLUSH BINARY LOGS
        wait_for_mirror(primary, live, timeout=90)
        # a relay started afterwards catches up from the primary's files just the same
        late = _relay(tmp_path / "late", primary.port)
        try:
            wait_for_mirror(primary, late, timeout=90)
        finally:
            assert late.stop() == 0
    finally:
        assert live.stop() == 0
    assert "Traceback" not in live.log_text()


def test_kill_9_at_random_moments_loses_and_doubles_nothing(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=262144"])
    relay = _relay(tmp_path, primary.port)
    rng = random.Random(20261122)
    try:
        with WriteLoad(primary) as load:
            for _ in range(10):
                time.sleep(rng.uniform(0.3, 1.2))  # a random moment to crash at, not a wait for a condition
                relay.kill9()
                relay.start()
        assert load.commits > 100
        wait_for_mirror(primary, relay, timeout=120)
        assert primary.sql("SELECT COUNT(*) FROM loadtest.t")[0][0] == 3 * load.commits
    finally:
        relay.stop()


def test_upstream_cut_mid_transaction_and_primary_restart(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1)
    proxy = CuttableProxy(primary.port)
    relay = _relay(tmp_path, proxy.port)
    try:
        primary.execute_many(["CREATE DATABASE big", "CREATE TABLE big.t (id INT PRIMARY KEY, v TEXT)"])
        wait_for_mirror(primary, relay)
        start_size = primary.binlog_files()[-1][1]
        # one ~8 MB transaction; cut the stream 4 MB into it
        proxy.cut_after = 4 * 1024 * 1024
        primary.execute_many(["BEGIN"] + [
            f"INSERT INTO big.t SELECT seq + {k * 1000}, REPEAT('x', 1000) FROM big.seq_1_to_1000" for k in range(8)
        ] + ["COMMIT"])
        assert primary.binlog_files()[-1][1] - start_size > 8 * 1000 * 1000
        wait_for(lambda: proxy.cuts == 1, 30, "the proxy never cut the stream")
        wait_for_mirror(primary, relay)
        assert proxy.connections >= 2
        assert "reconnecting" in relay.log_text()
        primary.restart()
        primary.sql("INSERT INTO big.t VALUES (999999, 'after restart')")
        wait_for_mirror(primary, relay)
        assert len(primary.binlog_files()) == 2  # the restart opened a new binlog file
    finally:
        relay.stop()
        proxy.close()


def test_wrong_password_is_reported_and_retried(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1)
    relay = _relay(tmp_path, primary.port, upstream={"host": "127.0.0.1", "port": primary.port, "user": "repl",
                                                    "password": "not-the-password",
                                                    "reconnect": {"initial_delay": 0.1, "max_delay": 0.4}})
    try:
        wait_for(lambda: relay.log_text().count("Access denied") >= 3, 30, "no repeated access-denied errors")
        assert relay.alive()
        assert "not-the-password" not in relay.log_text()
    finally:
        assert relay.stop() == 0


def test_data_dir_of_another_primary_is_refused(mariadb_factory, tmp_path):
    first = mariadb_factory(server_id=1)
    second = mariadb_factory(server_id=2)
    first.sql("CREATE DATABASE a")
    relay = _relay(tmp_path, first.port)
    wait_for_mirror(first, relay)
    relay.stop()
    relay.config["upstream"]["port"] = second.port
    relay.start()
    assert relay.proc.wait(30) == 1
    assert "refusing to mix two binlog histories" in relay.log_text()
    # `binlog-relay run` reported it and exited 1 itself: no traceback (nor an ExceptionGroup, trio >= 0.25)
    assert "Traceback" not in relay.log_text()
    assert not mirror_differences(first, relay.data_dir)


def test_the_history_is_the_primarys_whichever_server_sends_it(mariadb_factory, tmp_path):
    # relay B fills from relay A (server_id 1001), then moves to the primary itself and then to a
    # sibling relay C: one history (the primary's events), three upstream server_ids.
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16384"])
    primary.execute_many(["CREATE DATABASE h", "CREATE TABLE h.t (id INT PRIMARY KEY, v TEXT)"])
    relay_a = _relay(tmp_path / "a", primary.port)
    relay_c = _relay(tmp_path / "c", primary.port, server_id=1003)
    relay_b = _relay(tmp_path / "b", relay_a.port, server_id=1002)
    try:
        for upstream in (relay_a, primary, relay_c):
            if upstream is not relay_a:
                relay_b.stop()
                relay_b.config["upstream"]["port"] = upstream.port
                relay_b.start()
            first = int(primary.sql("SELECT COUNT(*) FROM h.t")[0][0])
            primary.execute_many([f"INSERT INTO h.t VALUES ({first + i}, REPEAT('x', 900))" for i in range(40)])
            wait_for_mirror(primary, relay_a)
            wait_for_mirror(primary, relay_c)
            wait_for_mirror(primary, relay_b)
        assert len(primary.binlog_files()) > 3
        assert "refusing to mix" not in relay_b.log_text()
        assert '"upstream_server_id": 1003' in (relay_b.data_dir / "relay-state.json").read_text()
    finally:
        for relay in (relay_b, relay_c, relay_a):
            relay.stop()


def test_silent_connection_counts_as_lost(mariadb_factory, tmp_path):
    """No event and no heartbeat for twice the heartbeat period: reconnect (the network may
    swallow packets without resetting anything, e.g. a dead NAT entry)."""
    primary = mariadb_factory(server_id=1)
    proxy = CuttableProxy(primary.port)
    relay = _relay(tmp_path, proxy.port)  # heartbeat_period 1 s in the test configuration
    try:
        primary.sql("CREATE DATABASE quiet")
        wait_for_mirror(primary, relay)
        proxy.frozen.set()
        wait_for(lambda: "no event or heartbeat from the primary for 2s" in relay.log_text(), 30,
                 "a silent connection was not detected")
        proxy.frozen.clear()
        primary.sql("CREATE TABLE quiet.t (id INT)")
        wait_for_mirror(primary, relay)
        assert proxy.connections >= 2
    finally:
        relay.stop()
        proxy.close()


def test_json_logs(mariadb_factory, tmp_path):
    import json

    primary = mariadb_factory(server_id=1)
    relay = _relay(tmp_path, primary.port, logging={"level": "INFO", "format": "json"})
    try:
        wait_for_mirror(primary, relay)
    finally:
        assert relay.stop() == 0
    entries = [json.loads(line) for line in relay.log_text().splitlines() if line.strip()]
    assert {"ts", "level", "logger", "message"} <= set(entries[0])
    assert any("dumping from mysql-bin.000001:4" in entry["message"] for entry in entries)

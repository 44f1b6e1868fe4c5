"""The Prometheus endpoint during real replication: a MariaDB primary under a write load, a MariaDB
replica of the relay, a raw dump client that stops reading. Every scrape kept is checked with
``promtool check metrics``; /healthz and /readyz answer as documented (relay/metrics.py)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pymysql
import pytest

from relay.sandbox.polling import wait_for
from relay.sandbox.ports import free_port
from relay.sandbox.relayprocess import RelayProcess, http_get, start_relay
from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_caught_up
from tests.support.mariadb import MariaDB
from tests.support.metrics import RawDump, Scrape, promtool_check, promtool_path
from tests.support.replication import WriteLoad, assert_healthy

REPLICA_ID = 2
STALLED_ID = 55
P = "binlog_relay_"


def _metrics_relay(tmp_path, upstream_port: int, **overrides) -> tuple[RelayProcess, int]:
    port = free_port()
    return start_relay(tmp_path / "relay", upstream_port, metrics_port=port, **overrides), port


def _file_number(name: str) -> int:
    return int(re.search(r"\.(\d+)$", name).group(1))


def _committed(scrape: Scrape) -> tuple[int, int]:
    return (int(scrape.require(P + "committed_file_number")), int(scrape.require(P + "committed_position_bytes")))


def _xids(scrape: Scrape) -> float:
    return scrape.value(P + "upstream_events_total", type="xid") or 0.0


def _sent(scrape: Scrape) -> float:
    return scrape.require(P + "downstream_events_sent_total")


def _scrape_if(port: int, condition: Callable[[Scrape], bool]) -> Scrape | None:
    scrape = Scrape.fetch(port)
    return scrape if condition(scrape) else None


def _lag_bytes(port: int, server_id: int) -> float | None:
    return Scrape.fetch(port).value(P + "replica_lag_bytes", server_id=str(server_id))


def _assert_lag_becomes_zero(port: int, server_id: int, who: str, timeout: float = 5.0) -> None:
    seen: list[float | None] = []

    def zero() -> bool:
        seen.append(_lag_bytes(port, server_id))
        return seen[-1] == 0

    try:
        wait_for(zero, timeout)
    except AssertionError:
        raise AssertionError(f"replica_lag_bytes{{server_id=\"{server_id}\"}} stayed {seen[-1]} for {who} "
                             f"(not 0 within {timeout:g} s)") from None


def _stall_a_dump(relay_port: int, server_id: int, file: str) -> RawDump:
    """A blocking dump from file:4 by a client that then never reads: the relay's sends back up."""
    client = RawDump(relay_port, rcvbuf=4096)
    client.start_dump(file, 4, server_id)
    return client


def _big_rows(primary: MariaDB, count: int, size: int = 4 << 20) -> None:
    primary.sql("CREATE TABLE IF NOT EXISTS loadtest.big (id INT PRIMARY KEY, v LONGTEXT)")
    for i in range(count):
        primary.sql(f"INSERT INTO loadtest.big VALUES ({i}, REPEAT('x', {size}))")


def test_metrics_during_replication(mariadb_factory, tmp_path):
    promtool_path()  # fails (not skips) with the install hint when promtool is missing
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=262144"])
    replica = mariadb_factory(server_id=REPLICA_ID)
    relay, port = _metrics_relay(tmp_path, primary.port)
    try:
        attach_replica(replica, relay.port)
        load = WriteLoad(primary).start()
        try:
            wait_for(lambda: Scrape.fetch(port).value(P + "upstream_connected") == 1, 15,
                     "binlog_relay_upstream_connected never became 1")
            kept = [wait_for(lambda: _scrape_if(port, lambda s: _xids(s) > 0 and _sent(s) > 0), 20,
                             "no xid events received or no events sent to the replica")]
            # Several scrapes, each taken once everything moved on from the one before.
            for _ in range(4):
                before = kept[-1]

                def moved_on(before: Scrape = before) -> Scrape | None:
                    now = Scrape.fetch(port)
                    if _committed(now) > _committed(before) and _xids(now) > _xids(before) \
                            and _sent(now) > _sent(before):
                        return now
                    return None

                kept.append(wait_for(moved_on, 20, "the committed position, xid count or events sent did not "
                                     f"move on from {_committed(before)}"))
            # and past at least one rotation (max_binlog_size 256 KB)
            first_file, last = _committed(kept[0])[0], _committed(kept[-1])
            kept.append(wait_for(lambda: _scrape_if(port, lambda s: _committed(s)[0] > first_file
                                                    and _committed(s) > last), 30,
                                 f"committed_file_number stayed {first_file}"))
            for scrape in kept:
                assert scrape.value(P + "upstream_connected") == 1
                promtool_check(scrape.text)
            positions = [_committed(s) for s in kept]
            assert positions == sorted(positions) and len(set(positions)) == len(positions), positions

            # A dump that stops reading: its lag in bytes is seen, and stays while it reads nothing.
            stalled = _stall_a_dump(relay.port, STALLED_ID, FIRST_FILE)
            try:
                _big_rows(primary, 3)  # 12 MB: more than the socket buffers between relay and client hold
                lag = wait_for(lambda: (_lag_bytes(port, STALLED_ID) or 0) > 0, 20,
                               f"replica_lag_bytes{{server_id=\"{STALLED_ID}\"}} never went above 0")
                scrape = Scrape.fetch(port)
                promtool_check(scrape.text)
                assert scrape.require(P + "replica_lag_bytes", server_id=str(STALLED_ID)) > 0, lag
                assert scrape.value(P + "replica_lag_seconds", server_id=str(STALLED_ID)) is not None
                assert scrape.require(P + "downstream_connections", state="dump") >= 2
            finally:
                stalled.close()
            wait_for(lambda: str(STALLED_ID) not in Scrape.fetch(port).label_values(P + "replica_lag_bytes",
                                                                                    "server_id"),
                     15, "the closed dump's lag series did not go away")
        finally:
            commits = load.stop()
        assert commits > 50, commits

        wait_caught_up(primary, replica)
        assert_healthy(replica)
        wait_for(lambda: _lag_bytes(port, REPLICA_ID) == 0, 15,
                 f"replica_lag_bytes{{server_id=\"{REPLICA_ID}\"}} did not reach 0 once the replica caught up")

        # The committed end is the primary's SHOW MASTER STATUS; caught up means no upstream lag.
        file, position = primary.master_status()
        wait_for(lambda: _committed(Scrape.fetch(port)) == (_file_number(file), position), 15,
                 f"committed_file_number/committed_position_bytes never equal to the primary's {file}:{position}")
        wait_for(lambda: Scrape.fetch(port).value(P + "upstream_lag_seconds") == 0, 10,
                 "binlog_relay_upstream_lag_seconds is not 0 although the relay is caught up")

        # A wrong password is counted.
        failures = Scrape.fetch(port).require(P + "auth_failures_total")
        with pytest.raises(pymysql.err.OperationalError) as refused:
            pymysql.connect(host="127.0.0.1", port=relay.port, user="repl", password="not-the-password",
                            connect_timeout=5)
        assert refused.value.args[0] == 1045, refused.value
        wait_for(lambda: Scrape.fetch(port).require(P + "auth_failures_total") == failures + 1, 10,
                 f"binlog_relay_auth_failures_total did not go from {failures} to {failures + 1}")

        final = Scrape.fetch(port)
        promtool_check(final.text)
        assert final.require(P + "fsync_duration_seconds_count") > 0  # storage.sync: commit
        assert final.require(P + "upstream_connected") == 1
        assert final.require(P + "stored_files") == len(primary.binlog_files())
        assert final.require(P + "registered_replicas") == 1
        assert _sent(final) > _sent(kept[-1])
        assert http_get(port, "/healthz") == (200, "ok\n")
        assert http_get(port, "/readyz") == (200, "ready\n")
    finally:
        assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_readyz_before_the_first_connection_and_after(mariadb_factory, tmp_path):
    """503 while the relay has never connected and stores nothing; 200 once connected, and still 200
    (something to serve) when the primary goes away again."""
    upstream_port = free_port()  # nothing listens there yet
    relay, port = _metrics_relay(tmp_path, upstream_port)
    try:
        status, body = http_get(port, "/readyz")
        assert status == 503, (status, body)
        assert "not connected" in body
        assert http_get(port, "/healthz") == (200, "ok\n")
        scrape = Scrape.fetch(port)
        promtool_check(scrape.text)
        assert scrape.require(P + "upstream_connected") == 0
        assert scrape.require(P + "stored_files") == 0
        wait_for(lambda: Scrape.fetch(port).require(P + "upstream_reconnects_total") >= 1, 15,
                 "no reconnect attempts counted while the primary is down")
        assert http_get(port, "/readyz")[0] == 503

        primary = mariadb_factory(server_id=1, port=upstream_port)
        wait_for(lambda: http_get(port, "/readyz") == (200, "ready\n"), 20, "/readyz did not become 200")
        assert Scrape.fetch(port).require(P + "upstream_connected") == 1
        primary.sql("CREATE DATABASE readyz")
        file, position = primary.master_status()
        wait_for(lambda: _committed(Scrape.fetch(port)) == (_file_number(file), position), 15,
                 "the relay did not store the primary's binlog")

        primary.stop()
        wait_for(lambda: Scrape.fetch(port).require(P + "upstream_connected") == 0, 15,
                 "upstream_connected stayed 1 after the primary stopped")
        status, body = http_get(port, "/readyz")  # stored binlogs can still be served, within unready_after
        assert status == 200 and body.startswith("ready; reconnecting"), (status, body)
        promtool_check(Scrape.fetch(port).text)
    finally:
        assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()


def test_replica_lag_is_zero_for_a_replica_that_starts_at_the_end(mariadb_factory, tmp_path):
    """A replica that connects at the relay's current end (a replica repointed with the primary's
    coordinates, or any replica reconnecting to a restarted relay) on an idle primary is not behind."""
    primary = mariadb_factory(server_id=1)
    replica = mariadb_factory(server_id=REPLICA_ID)
    relay, port = _metrics_relay(tmp_path, primary.port)
    try:
        primary.execute_many(["CREATE DATABASE idle", "CREATE TABLE idle.t (id INT PRIMARY KEY)",
                              "INSERT INTO idle.t VALUES (1), (2), (3)"])
        file, position = primary.master_status()
        wait_for(lambda: _committed(Scrape.fetch(port)) == (_file_number(file), position), 15,
                 "the relay did not store the primary's binlog")
        attach_replica(replica, relay.port, log_file=file, log_pos=position)
        wait_for(lambda: _lag_bytes(port, REPLICA_ID) is not None, 15, "the replica's dump is not in the metrics")
        assert replica.slave_status()["Slave_IO_Running"] == "Yes"
        _assert_lag_becomes_zero(port, REPLICA_ID, f"a replica that asked for {file}:{position}, the end of the "
                                 "stored binlog, with nothing written since")
        # and the same for a raw dump client at the end
        with RawDump(relay.port) as client:
            client.start_dump(file, position, STALLED_ID)
            wait_for(lambda: _lag_bytes(port, STALLED_ID) is not None, 10, "the raw dump is not in the metrics")
            _assert_lag_becomes_zero(port, STALLED_ID, f"a raw dump from {file}:{position}, the end")
    finally:
        assert relay.stop() == 0

"""binlog_relay_upstream_lag_seconds as a replica's Seconds_Behind_Master, with a relay that is
really behind: paused (SIGSTOP) while the primary commits many small transactions, then
scraped while it catches up."""

from __future__ import annotations

import os
import signal
import time

from tests.support.mariadb import free_port, wait_for
from tests.support.metrics import Scrape, http_get, start_relay
from tests.support.relay import mirror_differences, wait_for_mirror
from tests.support.replication import WriteLoad

LAG = "binlog_relay_upstream_lag_seconds"


def test_the_lag_is_the_age_of_what_is_stored_while_behind_and_zero_when_caught_up(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1)
    metrics_port = free_port()
    relay = start_relay(tmp_path / "relay", primary.port, metrics_port=metrics_port,
                        upstream={"heartbeat_period": 1.0})
    try:
        with WriteLoad(primary) as load:
            wait_for(lambda: load.commits > 50, 30, "no writes")
        wait_for_mirror(primary, relay)
        wait_for(lambda: Scrape.fetch(metrics_port).require(LAG) == 0, 10, "an idle relay reports lag")
        os.kill(relay.pid, signal.SIGSTOP)
        paused_at = time.time()
        try:
            with WriteLoad(primary, "load_a") as a, WriteLoad(primary, "load_b") as b:  # none stored while paused
                wait_for(lambda: time.time() - paused_at > 8 and a.commits + b.commits > 5000, 60, "too few writes")
        finally:
            os.kill(relay.pid, signal.SIGCONT)
        lags = []
        while mirror_differences(primary, relay.data_dir):  # scrape as fast as possible while it catches up
            lags.append(Scrape.fetch(metrics_port).require(LAG))
        # While behind, the lag was the age of the events being stored (written up to 8 s before);
        # caught up (the stored files are the primary's), it is 0 again.
        assert max(lags, default=0) >= 1.0, lags
        wait_for(lambda: Scrape.fetch(metrics_port).require(LAG) == 0, 10, "a caught-up relay reports lag")
    finally:
        os.kill(relay.pid, signal.SIGCONT)
        assert relay.stop() == 0


def test_readyz_turns_503_when_ingest_fails_longer_than_the_bound_and_back(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1)
    metrics_port = free_port()
    relay = start_relay(tmp_path / "relay", primary.port, metrics_port=metrics_port,
                        upstream={"unready_after": 3, "heartbeat_period": 0.5})
    try:
        wait_for_mirror(primary, relay)
        assert http_get(metrics_port, "/readyz") == (200, "ready\n")
        primary.stop()
        wait_for(lambda: http_get(metrics_port, "/readyz")[1].startswith("ready; reconnecting"), 10,
                 "no grace while reconnecting")  # within the bound
        wait_for(lambda: http_get(metrics_port, "/readyz")[0] == 503, 20, "readyz stayed 200")
        assert "ingest has been failing for" in http_get(metrics_port, "/readyz")[1]
        assert http_get(metrics_port, "/healthz")[0] == 200  # alive all the same
        primary.start()
        wait_for(lambda: http_get(metrics_port, "/readyz") == (200, "ready\n"), 30, "readyz did not recover")
    finally:
        assert relay.stop() == 0

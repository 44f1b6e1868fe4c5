"""A stuck replica (a dump that stops reading) and a slow one (reads at a trickle) next to a real MariaDB
replica, while the primary writes tens of megabytes: the real replica stays current, ingest keeps up (the
relay mirrors the primary as soon as the writes stop), and the relay's memory does not grow with what the
stuck and slow ones have not taken (peak RSS within a bound of where it started)."""

from __future__ import annotations

import threading
import time

from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_binlog_settled
from tests.faults.conftest import LONG
from tests.support.faults import SequenceLoad, converged
from tests.support.relay import wait_for_mirror
from tests.support.replication import RawClient

BULK_STATEMENTS = 30 if LONG else 6  # each writes about 10 MB of binlog
RSS_GROWTH_BOUND = 32 << 20
SLOW_BYTES_PER_SECOND = 1 << 20


class SlowReader(threading.Thread):
    """A blocking dump read at about SLOW_BYTES_PER_SECOND, 16 KiB at a time, until stopped."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.client = RawClient(port, rcvbuf=16384)
        self.client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        self.client.start_dump(FIRST_FILE, 4, server_id=902, flags=0)
        self.received = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                data = self.client.recv_raw(16384)
                if not data:
                    raise ConnectionError("the relay closed the slow dump")
                self.received += len(data)
                # the pace of a slow consumer, not a wait for a condition
                self.stop.wait(len(data) / SLOW_BYTES_PER_SECOND)
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            self.error = exc


def test_stuck_and_slow_replicas_do_not_hold_back_the_rest(mariadb_factory, fault_relay, fault_figures):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=16777216"])
    relay = fault_relay("relay", primary.port)
    replica = mariadb_factory(server_id=11)
    attach_replica(replica, relay.port, log_file=FIRST_FILE, log_pos=4)
    primary.execute_many(["CREATE DATABASE bulk", "CREATE TABLE bulk.t (id INT AUTO_INCREMENT PRIMARY KEY,"
                          " v VARBINARY(1024)) ENGINE=InnoDB"])
    stuck = RawClient(relay.port, rcvbuf=4096)
    stuck.query("SET @master_binlog_checksum = @@global.binlog_checksum")
    stuck.start_dump(FIRST_FILE, 4, server_id=901, flags=0)  # and never read again
    slow = SlowReader(relay.port)
    slow.start()
    rss_before = relay.rss_bytes()
    try:
        with SequenceLoad(primary) as load:
            started = time.monotonic()
            for _ in range(BULK_STATEMENTS):
                primary.sql("INSERT INTO bulk.t (v) SELECT RANDOM_BYTES(1000) FROM bulk.seq_1_to_10000")
            commits = load.stop()
        written = sum(size for _, size in primary.binlog_files())
        load_seconds = time.monotonic() - started
        # ingest kept up: the relay holds everything moments after the last write
        wait_binlog_settled(primary)
        mirrored_at = time.monotonic()
        wait_for_mirror(primary, relay, timeout=30)
        mirror_lag = time.monotonic() - mirrored_at
        recovery = converged(primary, relay, [replica], commits, timeout=60)
        assert relay.alive()
        assert slow.error is None, slow.error
        assert slow.is_alive()
        slow_received = slow.received
        assert slow_received < written, "the slow reader was not behind: the test proved nothing"
        peak = relay.peak_rss_bytes()
        fault_figures("stuck", fault="A stuck dump (never reads, 4 KiB receive buffer) and a slow one "
                      f"({SLOW_BYTES_PER_SECOND >> 20} MiB/s) next to a real replica",
                      injected=f"{written / 2**20:.0f} MiB of binlog written past them in {load_seconds:.1f} s "
                               f"({commits:,} counted transactions)", data_lost="0", diverged="0",
                      recovery=f"ingest unaffected: relay a mirror {mirror_lag:.2f} s after the last write; then "
                               f"{recovery}",
                      memory=f"RSS {rss_before / 2**20:.1f} -> peak {peak / 2**20:.1f} MiB; bound asserted: growth "
                             f"< {RSS_GROWTH_BOUND >> 20} MiB",
                      detail=f"slow reader at {slow_received / 2**20:.1f} MiB")
        assert peak - rss_before < RSS_GROWTH_BOUND, (
            f"relay peak RSS {peak / 2**20:.1f} MiB, {rss_before / 2**20:.1f} MiB before {written / 2**20:.0f} MiB "
            "went past a stuck and a slow dump")
        # the stuck one is still connected and was served no more than its socket buffers hold
        stuck.sock.settimeout(5)
        assert stuck.recv_raw(1 << 16), "the stuck dump was closed"
    finally:
        slow.stop.set()
        slow.join(10)
        slow.client.close()
        stuck.close()

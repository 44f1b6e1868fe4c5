"""A single 1 GB transaction is ingested with bounded memory (events are appended as they arrive)."""

from __future__ import annotations

import subprocess
import time

from relay.sandbox.binlogfiles import binlog_events
from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, find_program
from relay.sandbox.relayprocess import RelayProcess, relay_config
from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_caught_up
from tests.support.relay import wait_for_mirror
from tests.support.replication import assert_same_data

RSS_LIMIT = 200 * 1024 * 1024


def test_one_gigabyte_transaction_in_bounded_memory(mariadb_factory, tmp_path):
    primary = mariadb_factory(server_id=1)
    primary.execute_many(["CREATE DATABASE big", "CREATE TABLE big.t (id INT PRIMARY KEY, v LONGBLOB) ENGINE=MyISAM"])
    relay = RelayProcess(tmp_path, relay_config(tmp_path / "data", primary.port))
    relay.start()
    try:
        wait_for_mirror(primary, relay)
        started = time.monotonic()
        # 1100 rows of 1 MB in one statement: one event group of ~1.1 GB in the binlog
        primary.sql("INSERT INTO big.t SELECT seq, REPEAT(CHAR(65 + seq % 26), 1024 * 1024) "
                    "FROM big.seq_1_to_1100")
        size = max(file_size for _, file_size in primary.binlog_files())
        assert size > 1024 ** 3  # (the file rotated after it: max_binlog_size is 1 GB)
        wait_for_mirror(primary, relay, timeout=300)
        peak = relay.peak_rss_bytes()
        print(f"1 GB transaction: relay peak RSS {peak / 2**20:.1f} MiB, "
              f"{size / 2**20 / (time.monotonic() - started):.0f} MiB/s including the primary's write")
        assert peak < RSS_LIMIT, f"relay peak RSS {peak / 2**20:.1f} MiB"
    finally:
        assert relay.stop() == 0


def test_an_event_over_16_mb_reaches_a_real_replica_and_mariadb_binlog(mariadb_factory, relay_factory, tmp_path):
    """A 40 MB row is one rows event of more than 16 MB: it travels as several packet chunks."""
    primary = mariadb_factory(server_id=1)
    replica = mariadb_factory(server_id=2)
    relay = relay_factory("relay", primary.port)
    attach_replica(replica, relay.port)
    primary.execute_many(["CREATE DATABASE big", "CREATE TABLE big.t (id INT PRIMARY KEY, v LONGBLOB)",
                          "INSERT INTO big.t VALUES (1, REPEAT('r', 40 * 1024 * 1024))"])
    events = binlog_events(primary.binlog_path(primary.master_status()[0]))
    assert max(event.length for event in events) > 40 * 1024 * 1024
    wait_caught_up(primary, replica, timeout=120)
    assert_same_data(primary, replica)
    # mariadb-binlog downloads the file through the relay, and through the primary: same bytes
    copies = {}
    for name, port in (("relay", relay.port), ("primary", primary.port)):
        out = tmp_path / f"download-{name}"
        out.mkdir()
        subprocess.run([find_program("mariadb-binlog"), "--read-from-remote-server", "--raw", "--host=127.0.0.1",
                        f"--port={port}", f"--user={REPL_USER}", f"--password={REPL_PASSWORD}",
                        f"--result-file={out}/", "--to-last-log", FIRST_FILE], check=True, timeout=120,
                       capture_output=True)
        copies[name] = (out / FIRST_FILE).read_bytes()
    assert len(copies["relay"]) > 40 * 1024 * 1024 and copies["relay"] == copies["primary"]

"""A single 1 GB transaction is ingested with bounded memory (events are appended as they arrive)."""

from __future__ import annotations

import time

from tests.support.relay import RelayProcess, relay_config, wait_for_mirror

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

"""kill -9 of the relay at random moments of a write load, with a file/position replica and a GTID
replica attached to it: after every restart the relay resumes; at the end its files are the primary's,
and each replica holds every transaction exactly once (tests/support/faults.py: SequenceLoad)."""

from __future__ import annotations

import random
import statistics
import time

from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE, attach_replica
from tests.faults.conftest import KILL9_CYCLES
from tests.support.faults import SequenceLoad, converged, written_bytes
from tests.support.relay import assert_index_matches_files


def test_kill9_under_write_load(mariadb_factory, fault_relay, fault_figures):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=262144"])
    # an index entry every 16 KiB: kills land while entries are written too
    relay = fault_relay("relay", primary.port, storage={"index_interval": "16K"})
    by_position, by_gtid = mariadb_factory(server_id=11), mariadb_factory(server_id=12)
    attach_replica(by_position, relay.port, log_file=FIRST_FILE, log_pos=4)
    attach_replica(by_gtid, relay.port, use_gtid="slave_pos")
    rng = random.Random(20261124)
    restarts: list[float] = []
    peaks: list[int] = []  # each run's peak RSS, just before its kill
    with SequenceLoad(primary) as load:
        load.wait_commits(50)
        for cycle in range(KILL9_CYCLES):
            # a random moment: after some more stored bytes (inside a group, a write, an fsync...),
            # or after a random time, whichever the draw picks
            if rng.random() < 0.5:
                target = written_bytes(relay) + rng.randint(1, 60_000)
                wait_for(lambda target=target: written_bytes(relay) >= target, 60,
                         f"cycle {cycle}: the relay stored nothing more")
            else:
                deadline = time.monotonic() + rng.uniform(0.0, 0.4)
                wait_for(lambda deadline=deadline: time.monotonic() >= deadline, 5)
            assert relay.alive(), relay.log_text()[-3000:]
            peaks.append(relay.peak_rss_bytes())
            killed = time.monotonic()
            relay.kill9()
            relay.start()
            relay.wait_listening()
            restarts.append(time.monotonic() - killed)
        commits = load.stop()
    assert commits > KILL9_CYCLES
    recovery = converged(primary, relay, [by_position, by_gtid], commits)
    assert "Traceback" not in relay.log_text()
    assert assert_index_matches_files(relay.data_dir) > KILL9_CYCLES, "the index has an entry per 16 KiB"
    fault_figures("kill9", fault="kill -9 of the relay at random moments (after 1-60,000 more stored bytes, or "
                  "0-0.4 s), under write load, a file/pos and a GTID replica attached",
                  injected=f"{KILL9_CYCLES} kills ({commits:,} transactions)", data_lost="0", diverged="0",
                  recovery=f"kill to listening again: median {statistics.median(restarts):.2f} s, max "
                           f"{max(restarts):.2f} s; after the load: {recovery}",
                  memory=f"peak RSS of any run at most {max(peaks) / 2**20:.1f} MiB")

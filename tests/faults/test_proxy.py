"""Network faults on both legs at once, through fault-injecting proxies (tests/faults/proxy.py):
primary -> proxy -> relay and relay -> proxy -> replicas. Cuts inside events and transactions, resets,
stalls, one byte at a time, at random points of a write load; after each cut or reset the peer
reconnects (timed), and at the end everything has converged: the relay's files are the primary's,
both replicas hold each transaction exactly once."""

from __future__ import annotations

import random
import statistics

from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE
from tests.faults.conftest import PROXY_FAULTS_EACH
from tests.faults.proxy import FAULTS, Fault, FaultProxy
from tests.support.faults import SequenceLoad, converged

LOAD_RATE = 500  # transactions a second, one in 16 of 48 KiB: about 2 MB/s of binlog


def test_network_faults_on_both_legs_converge(mariadb_factory, fault_relay, fault_figures):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=262144"])
    upstream = FaultProxy(primary.port)
    downstream: FaultProxy | None = None
    try:
        relay = fault_relay("relay", upstream.port, upstream={"heartbeat_period": 0.5})
        downstream = FaultProxy(relay.port)
        by_position, by_gtid = mariadb_factory(server_id=11), mariadb_factory(server_id=12)
        for replica, gtid in ((by_position, "no"), (by_gtid, "slave_pos")):
            replica.change_master("127.0.0.1", downstream.port, log_file=None if gtid != "no" else FIRST_FILE,
                                  log_pos=None if gtid != "no" else 4, use_gtid=gtid, connect_retry=1,
                                  heartbeat_period=0.5)
            replica.start_slave()
        proxies = {"upstream": upstream, "downstream": downstream}
        rng = random.Random(1124)
        plan = [(leg, kind) for leg in proxies for kind in FAULTS for _ in range(PROXY_FAULTS_EACH)]
        rng.shuffle(plan)
        reconnects: dict[str, list[float]] = {"upstream": [], "downstream": []}
        # paced: the long run's 800 faults take minutes, and the relay must be able to catch up after them
        with SequenceLoad(primary, big_every=16, rate=LOAD_RATE) as load:
            load.wait_commits(20)
            for leg, kind in plan:
                proxy = proxies[leg]
                proxy.arm(Fault(kind, after=rng.randint(0, 40_000), seconds=rng.uniform(0.2, 1.5),
                                count=rng.randint(50, 1500)))
                wait_for(lambda proxy=proxy: not proxy.armed(), 60, f"the {leg} {kind} fault never fired")
                if kind in ("cut", "reset"):
                    fired = proxy.fire_times[-1][1]
                    again = wait_for(lambda proxy=proxy, fired=fired: [t for t in proxy.connect_times if t > fired],
                                     60, f"nobody reconnected through the {leg} proxy after a {kind}")
                    reconnects[leg].append(again[0] - fired)
            commits = load.stop()
        assert all(count == PROXY_FAULTS_EACH for count in upstream.fired.values()), upstream.fired
        assert all(count == PROXY_FAULTS_EACH for count in downstream.fired.values()), downstream.fired
        recovery = converged(primary, relay, [by_position, by_gtid], commits, timeout=300)
        assert "Traceback" not in relay.log_text()
        peak = relay.peak_rss_bytes()
        legs = {"upstream": "relay->primary", "downstream": "replica->relay"}
        summary = ", ".join(f"{legs[leg]} median {statistics.median(times):.2f} s, max {max(times):.2f} s"
                            for leg, times in reconnects.items() if times)
        fault_figures("network", fault="Network faults through a trio proxy on both legs at once (primary->relay, "
                      "relay->replicas): cut (FIN) and reset (RST) inside events and transactions, stall 0.2-1.5 s, "
                      "trickle 50-1,500 bytes one at a time",
                      injected=f"{PROXY_FAULTS_EACH} of each of {len(FAULTS)} kinds on each leg: {len(plan)} faults "
                               f"({commits:,} transactions)", data_lost="0", diverged="0",
                      recovery=f"reconnect after a cut or reset: {summary}; after the load: {recovery}",
                      memory=f"peak RSS {peak / 2**20:.1f} MiB",
                      detail=f"{upstream.connections} upstream and {downstream.connections} downstream connections")
    finally:
        upstream.close()
        if downstream is not None:
            downstream.close()

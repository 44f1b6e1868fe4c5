"""Latency benchmark: a single-row commit on the primary until the row is visible on a MariaDB
replica, the replica replicating directly from the primary vs through the relay.

    python3 -m bench.latency [--commits 2000] [--block 50] [--sync commit,none] [--json PATH]

One primary, one relay per ``--sync`` policy (the real program, ``python3 -m relay.cli run``,
each with its own server_id and data_dir, all replicating from the primary the whole time) and
one MariaDB replica, all started by the sandbox (relay.sandbox).  The replica is pointed (CHANGE MASTER,
GTID) at one source after the other in blocks of ``--block`` commits until each source has had
``--commits``: direct, relay sync=commit, relay sync=none, direct, ...  so a slow phase of the
machine is spread over all of them.  After each switch a few commits are made and not counted
(the replica's new connection settles).

One commit: ``INSERT`` (autocommit) of one row on the primary; the clock starts just before it
is sent.  Then ``SELECT MASTER_GTID_WAIT(gtid)`` on the replica returns once its SQL thread has
applied that transaction (the GTID is known beforehand: nothing else writes to the primary, and
that is checked at the end of each block), and the clock stops.  Both legs include one client
round trip on loopback, equal for every source, so the *added* latency (relay percentile minus
the direct one) is the relay's own cost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from relay.sandbox.mariadb import LocalMariaDB
from relay.sandbox.ports import LOOPBACK
from relay.sandbox.relayprocess import RELAY_SERVER_ID, RelayProcess
from relay.sandbox.replication import replica_note

from .common import (
    BenchError,
    bench_main,
    bench_parser,
    fresh_dir,
    git_commit,
    log,
    machine_info,
    parse_bench_args,
    start_bench_relay,
    stop_relay,
    table,
)

DIRECT = "direct"
WARMUP_COMMITS = 5
PERCENTILES = (50, 90, 99)


def percentile(values: list[float], p: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default), on sorted data."""
    data = sorted(values)
    if not data:
        return float("nan")
    rank = (len(data) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def distribution(values_ms: list[float]) -> dict[str, float]:
    out = {f"p{p}": percentile(values_ms, p) for p in PERCENTILES}
    out.update(max=max(values_ms), mean=statistics.fmean(values_ms), n=len(values_ms))
    return out


def _connect(port: int):  # type: ignore[no-untyped-def]
    try:
        import pymysql
    except ImportError:
        raise BenchError("the latency benchmark needs PyMySQL (pip install -e '.[bench]')") from None
    return pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)


def _query(conn, sql: str, *params: object) -> list[tuple]:  # type: ignore[no-untyped-def]
    with conn.cursor() as cursor:
        cursor.execute(sql, params or None)
        return list(cursor.fetchall())


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.workdir = fresh_dir(Path(args.workdir))
        self.primary = LocalMariaDB(self.workdir / "primary", 1)
        self.replica = LocalMariaDB(self.workdir / "replica", 3)
        self.relays: dict[str, RelayProcess] = {}
        self.source_ports: dict[str, int] = {}
        self.seq = 0  # the primary's last GTID sequence number (domain 0, server_id 1)
        self.next_id = 0

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        self.pconn = _connect(self.primary.port)
        self.rconn = _connect(self.replica.port)
        _query(self.pconn, "CREATE DATABASE lat")
        _query(self.pconn, "CREATE TABLE lat.t (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
        self.source_ports[DIRECT] = self.primary.port
        for number, sync in enumerate(self.args.sync):
            # Two replicas of one primary need two server_ids.
            relay = start_bench_relay(self.workdir / f"relay-{sync}", self.primary.port, sync=sync,
                                      server_id=RELAY_SERVER_ID + number)
            self.relays[sync] = relay
            self.source_ports[f"relay sync={sync}"] = relay.port
        self.seq = self._binlog_seq()

    def _binlog_seq(self) -> int:
        position = _query(self.pconn, "SELECT @@gtid_binlog_pos")[0][0]
        for gtid in position.split(","):
            domain, server, seq = gtid.split("-")
            if domain == "0" and server == "1":
                return int(seq)
        return 0

    def point_replica_at(self, source: str) -> None:
        self.replica.stop_slave()
        self.replica.change_master(LOOPBACK, self.source_ports[source], use_gtid="slave_pos")
        self.replica.start_slave()
        target = _query(self.pconn, "SELECT @@gtid_binlog_pos")[0][0]
        if _query(self.rconn, "SELECT MASTER_GTID_WAIT(%s, 60)", target)[0][0] != 0:
            raise BenchError(f"the replica did not catch up with {source} within 60 s: {self._slave_error()}")
        for _ in range(WARMUP_COMMITS):
            self.commit_and_wait()

    def _slave_error(self) -> str:
        return replica_note(self.replica.slave_status()) or "both threads running"

    def commit_and_wait(self) -> tuple[float, float]:
        """(commit ms, visible ms) of one single-row commit, both from just before it is sent."""
        self.next_id += 1
        self.seq += 1
        gtid = f"0-1-{self.seq}"
        with self.pconn.cursor() as pcur, self.rconn.cursor() as rcur:
            started = time.perf_counter()
            pcur.execute("INSERT INTO lat.t VALUES (%s, %s)", (self.next_id, self.seq))
            committed = time.perf_counter()
            rcur.execute("SELECT MASTER_GTID_WAIT(%s, 10)", (gtid,))
            visible = time.perf_counter()
            if rcur.fetchone()[0] != 0:
                raise BenchError(f"{gtid} was not applied on the replica within 10 s: {self._slave_error()}")
        return (committed - started) * 1e3, (visible - started) * 1e3

    def run(self) -> dict[str, Any]:
        args = self.args
        sources = list(self.source_ports)
        samples: dict[str, list[float]] = {s: [] for s in sources}
        commit_ms: dict[str, list[float]] = {s: [] for s in sources}
        blocks: list[dict[str, Any]] = []
        block_no = 0
        while any(len(samples[s]) < args.commits for s in sources):
            block_no += 1
            for source in sources:
                count = min(args.block, args.commits - len(samples[source]))
                if count <= 0:
                    continue
                self.point_replica_at(source)
                mine = []
                load = os.getloadavg()[0]
                for _ in range(count):
                    commit, visible = self.commit_and_wait()
                    commit_ms[source].append(commit)
                    mine.append(visible)
                if self._binlog_seq() != self.seq:
                    raise BenchError("something else wrote to the primary: the GTIDs waited for were not its")
                samples[source] += mine
                blocks.append({"block": block_no, "source": source, "commits": count, "loadavg_1m_before": load,
                               "p50_ms": percentile(mine, 50), "max_ms": max(mine)})
        rows = _query(self.rconn, "SELECT COUNT(*), MAX(id) FROM lat.t")[0]
        if rows != (self.next_id, self.next_id):
            raise BenchError(f"the replica holds {rows}, not the {self.next_id} rows written")
        summary: dict[str, Any] = {}
        for source in sources:
            summary[source] = distribution(samples[source])
            summary[source]["commit_p50"] = percentile(commit_ms[source], 50)
            block_p50 = [b["p50_ms"] for b in blocks if b["source"] == source]
            summary[source]["block_p50_min"] = min(block_p50)
            summary[source]["block_p50_max"] = max(block_p50)
            if source != DIRECT:
                summary[source]["added"] = {k: summary[source][k] - summary[DIRECT][k]
                                            for k in ("p50", "p90", "p99", "max")}
        return {"samples_ms": samples, "blocks": blocks, "summary": summary}

    def stop(self) -> None:
        for conn in ("pconn", "rconn"):
            if hasattr(self, conn):
                try:
                    getattr(self, conn).close()
                except Exception:  # noqa: BLE001 - closing a connection to a server about to stop
                    pass
        for relay in self.relays.values():
            stop_relay(relay, remove_data=False)  # the workdir goes as a whole, or stays with --keep
        self.replica.stop()
        self.primary.stop()


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(args)
    try:
        bench.start()
        version = _query(bench.pconn, "SELECT VERSION()")[0][0]
        log(f"MariaDB {version}; sources: {', '.join(f'{s} :{p}' for s, p in bench.source_ports.items())}; "
            f"{args.commits} commits each in blocks of {args.block}")
        measured = bench.run()
        return {"primary": {"version": version}, "relay": {"commit": git_commit()}, "machine": machine_info(),
                "commits": args.commits, "block": args.block, "sync": args.sync, **measured}
    finally:
        bench.stop()
        if not args.keep:
            shutil.rmtree(bench.workdir, ignore_errors=True)


def report(results: dict[str, Any]) -> str:
    summary = results["summary"]
    rows = []
    for source, s in summary.items():
        added = s.get("added")
        rows.append([source, s["n"], f"{s['p50']:.2f}", f"{s['p90']:.2f}", f"{s['p99']:.2f}", f"{s['max']:.2f}",
                     f"{s['block_p50_min']:.2f}-{s['block_p50_max']:.2f}", f"{s['commit_p50']:.2f}",
                     f"{added['p50']:+.2f}" if added else "(ref)", f"{added['p99']:+.2f}" if added else "(ref)"])
    machine = results["machine"]
    return "\n".join([
        f"Latency: single-row commit on MariaDB {results['primary']['version']} -> visible on a MariaDB replica "
        f"(MASTER_GTID_WAIT), {results['commits']} commits per source in alternating blocks of {results['block']}; "
        f"relay {results['relay']['commit']}; {machine['cpus']} CPUs, load {machine['loadavg'][0]:.2f}",
        table(["source", "commits", "p50 ms", "p90 ms", "p99 ms", "max ms", "block p50 range", "commit p50 ms",
               "added p50", "added p99"], rows),
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("latency", __doc__, rounds=None, keep="keep the workdir (logs) at the end",
                     workdir="/tmp/binlog-relay-bench/latency", workdir_help="servers' and relays' directories")
    p.add_argument("--commits", type=int, default=2000, help="measured commits per source")
    p.add_argument("--block", type=int, default=50, help="commits per block before the replica switches source")
    p.add_argument("--sync", default="commit,none", help="the relays' storage.sync policies, comma-separated")
    args = parse_bench_args(p, argv)
    args.sync = [s for s in args.sync.split(",") if s]
    if args.commits < 1 or args.block < 1:
        p.error("--commits and --block must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())

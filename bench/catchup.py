"""Replica catch-up: a fresh MariaDB replica's IO thread fetching the whole binlog, from the relay
vs from the primary.

    python3 -m bench.catchup [--rounds 3] [--reuse] [--json PATH]

The primary is the sandbox of the other benchmarks (bench/common.py; ``--reuse`` shares it),
the relay the real program (relay.sandbox.relayprocess), which first stores the whole binlog
(not measured).  One MariaDB replica (relay.sandbox.mariadb) is pointed at each source in turn,
``--rounds`` times alternating relay, primary, relay, ...: RESET SLAVE ALL (its relay logs go),
CHANGE MASTER TO the source's first file at position 4 (file/position, as a replica being
rebuilt from scratch asks), START SLAVE IO_THREAD, and the clock runs until SHOW SLAVE STATUS
shows Read_Master_Log_Pos at the end of the primary's last file (polled every 20 ms).  Only
the IO thread runs: it is what the source feeds; applying is the replica's own business.

Figures: seconds, MiB/s (binlog bytes over them), the source's CPU seconds (relay process or all
of mariadbd) and the replica's, and the ratio relay / primary MiB/s from the medians (goal >= 1.0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from relay.sandbox.mariadb import LocalMariaDB
from relay.sandbox.ports import LOOPBACK
from relay.sandbox.relayprocess import RelayProcess
from relay.sandbox.replication import replica_note

from .common import (
    GOAL_RATIO,
    PRIMARY,
    RELAY,
    BenchError,
    bench_main,
    bench_parser,
    cpu_seconds,
    git_commit,
    log,
    machine_info,
    median,
    mib,
    parse_bench_args,
    require_programs,
    server_version,
    start_bench_relay,
    stop_relay,
    table,
    wait_stored,
)
from .ingest import finish_primary, measured_binlog, prepare_primary

POLL = 0.02
REPLICA_SERVER_ID = 3


def start_replica(base_dir: Path) -> LocalMariaDB:
    """The replica whose IO thread is timed: relay logs unbounded, so it never waits to fetch."""
    replica = LocalMariaDB(base_dir, REPLICA_SERVER_ID,
                           extra_args=["--relay-log-space-limit=0", "--max-relay-log-size=256M"])
    replica.start()
    return replica


def fetch(replica: LocalMariaDB, port: int, first_file: str, last: tuple[str, int], timeout: float,
          pid: int) -> dict[str, Any]:
    """One timed fetch of the whole binlog from the source on ``port`` (whose process is ``pid``) by the
    replica's IO thread alone, from scratch: its seconds and both processes' CPU seconds."""
    replica.stop_slave()
    replica.sql("RESET SLAVE ALL")
    replica.change_master(LOOPBACK, port, log_file=first_file, log_pos=4)
    os.sync()  # the last run's relay logs are not written back during this one
    server_cpu = cpu_seconds(pid)
    replica_cpu = cpu_seconds(replica.pid or 0)
    started = time.perf_counter()
    replica.sql("START SLAVE IO_THREAD")
    deadline = started + timeout
    while True:
        status = replica.slave_status()
        if (status.get("Master_Log_File"), int(status.get("Read_Master_Log_Pos") or 0)) == last:
            seconds = time.perf_counter() - started
            break
        if status.get("Last_IO_Error"):
            raise BenchError(f"the replica's IO thread failed: {replica_note(status)}")
        if time.perf_counter() > deadline:
            raise BenchError(f"the replica did not fetch the binlog within {timeout:.0f} s: at "
                             f"{status.get('Master_Log_File')}:{status.get('Read_Master_Log_Pos')}, "
                             f"want {last[0]}:{last[1]}")
        time.sleep(POLL)  # its own poll interval: the time to the end is what is measured
    result = {"seconds": seconds, "server_cpu_s": cpu_seconds(pid) - server_cpu,
              "replica_cpu_s": cpu_seconds(replica.pid or 0) - replica_cpu}
    replica.stop_slave()
    return result


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs("mariadbd", "mariadb")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    primary: LocalMariaDB | None = None
    relay: RelayProcess | None = None
    replica: LocalMariaDB | None = None
    try:
        primary = prepare_primary(args)
        files = measured_binlog(args, primary)
        total = sum(f.size for f in files)
        relay = start_bench_relay(workdir, primary.port)
        wait_stored(relay, files, args.timeout)
        replica = start_replica(workdir / "replica")
        last = (files[-1].name, files[-1].size)
        runs = []
        for round_no in range(1, args.rounds + 1):
            for source in (RELAY, PRIMARY):
                port, pid = (relay.port, relay.pid) if source == RELAY else (primary.port, primary.pid)
                load = os.getloadavg()[0]
                record = fetch(replica, port, files[0].name, last, args.timeout, pid or 0)
                record.update(source=source, round=round_no, mib_per_s=mib(total) / record["seconds"],
                              loadavg_1m_before=load)
                runs.append(record)
                log(f"round {round_no}, {source:7s}: {record['seconds']:.2f} s, {record['mib_per_s']:.1f} MiB/s, "
                    f"server CPU {record['server_cpu_s']:.2f} s, replica CPU {record['replica_cpu_s']:.2f} s")
        summary: dict[str, Any] = {}
        for source in (RELAY, PRIMARY):
            mine = [r for r in runs if r["source"] == source]
            summary[source] = {"runs": len(mine), "median_mib_per_s": median(r["mib_per_s"] for r in mine),
                               "min_mib_per_s": min(r["mib_per_s"] for r in mine),
                               "max_mib_per_s": max(r["mib_per_s"] for r in mine),
                               "median_seconds": median(r["seconds"] for r in mine),
                               "median_server_cpu_s": median(r["server_cpu_s"] for r in mine),
                               "median_replica_cpu_s": median(r["replica_cpu_s"] for r in mine)}
        ratio = summary[RELAY]["median_mib_per_s"] / summary[PRIMARY]["median_mib_per_s"]
        summary["headline"] = {"ratio": ratio, "goal": GOAL_RATIO, "goal_met": ratio >= GOAL_RATIO}
        return {"primary": {"version": server_version(primary)}, "relay": {"commit": git_commit()},
                "binlog": {"files": len(files), "bytes": total, "mib": mib(total),
                           "events": sum(f.events for f in files)},
                "machine": machine_info(), "rounds": args.rounds, "runs": runs, "summary": summary}
    finally:
        if replica is not None:
            replica.stop()
            shutil.rmtree(workdir / "replica", ignore_errors=True)
        stop_relay(relay)
        finish_primary(args, primary)


def report(results: dict[str, Any]) -> str:
    s, binlog, machine = results["summary"], results["binlog"], results["machine"]
    rows = [[source, s[source]["runs"], f"{s[source]['median_seconds']:.2f}", f"{s[source]['median_mib_per_s']:.1f}",
             f"{s[source]['min_mib_per_s']:.1f}-{s[source]['max_mib_per_s']:.1f}",
             f"{s[source]['median_server_cpu_s']:.2f}", f"{s[source]['median_replica_cpu_s']:.2f}",
             f"{s['headline']['ratio']:.2f}" if source == RELAY else "1.00 (ref)"] for source in (RELAY, PRIMARY)]
    head = s["headline"]
    return "\n".join([
        f"Replica catch-up: a fresh MariaDB replica's IO thread fetching {binlog['mib']:.0f} MiB ({binlog['events']:,} "
        f"events) from the relay ({results['relay']['commit']}) and from MariaDB {results['primary']['version']}; "
        f"{machine['cpus']} CPUs, load {machine['loadavg'][0]:.2f}",
        table(["source", "runs", "seconds", "MiB/s", "range", "server CPU s", "replica CPU s", "ratio"], rows),
        f"relay / primary = {head['ratio']:.2f} "
        f"(goal >= {head['goal']:.1f}: {'met' if head['goal_met'] else 'NOT met'})",
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("catchup", __doc__, rounds="fetches from each source, alternating",
                     workdir="/tmp/binlog-relay-bench/catchup", workdir_help="the relay's and the replica's dirs",
                     timeout=900, timeout_help="seconds one fetch may take",
                     primary={"size_mb": 300, "min_mb": 100, "max_binlog_size": "128M", "port": 26316,
                              "name": "benchcap"})
    return parse_bench_args(p, argv)


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())

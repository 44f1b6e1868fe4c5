"""Serve capacity: how many bytes a second the relay can hand out, measured with a client that
costs almost nothing (it reads the dump stream into one buffer and throws it away), against the
primary handing out the same binlog to the same client.

    python3 -m bench.capacity [--clients 1,10,50,100] [--rounds 3] [--reuse] [--json PATH]

``mariadb-binlog`` (bench/serve.py) spends most of its time in one write() per event, so it
measures itself more than the server.  Here each client (bench/rawclient.py) is a thread of this process speaking the
dump protocol on a blocking socket: it logs in with the relay's own sans-IO client
(``relay.protocol.client``), declares CRC32 checksums, asks for a non-blocking COM_BINLOG_DUMP (with
annotations, as a replica asks) of the whole binlog (first file, position 4) and then ``recv_into``s
a 1 MiB buffer until it has the number of bytes that source sends for the whole binlog, ending in
its EOF packet.  That number is learnt per source by one download that parses every packet (not
timed: every packet must be an event, the last one the EOF, and the events must be the binlog's),
so the timed loop does no per-packet work at all.

Per client count (``--clients``, default 1,10,50,100), ``--rounds`` times alternating relay and
primary: all clients start together (a barrier); the time is to the last client's end.
Figures: aggregate MiB/s (clients x binlog bytes / time), the server's CPU seconds (relay process,
or all of mariadbd's threads, from /proc) per GiB handed out, the relay's peak RSS (VmHWM, reset
before each run), the clients' CPU (this process).  Ratio: relay / primary aggregate, medians.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path
from typing import Any

from relay.sandbox.mariadb import LocalMariaDB
from relay.sandbox.procfs import status_kib
from relay.sandbox.relayprocess import RelayProcess

from .common import (
    GOAL_RATIO,
    PRIMARY,
    RELAY,
    BenchError,
    bench_main,
    bench_parser,
    cpu_seconds,
    git_commit,
    int_list,
    log,
    machine_info,
    median,
    mib,
    parse_bench_args,
    require_programs,
    reset_peak_rss,
    running_pid,
    server_version,
    start_bench_relay,
    stop_relay,
    table,
    wait_stored,
)
from .ingest import finish_primary, measured_binlog, prepare_primary
from .rawclient import parsed_download, raw_download

GIB = 1 << 30


class Capacity:
    def __init__(self, args: argparse.Namespace, primary: LocalMariaDB, relay: RelayProcess, binlog_bytes: int) -> None:
        self.args = args
        self.primary = primary
        self.relay = relay
        self.binlog_bytes = binlog_bytes
        self.wire: dict[str, int] = {}
        self.server_ids = iter(range(5000, 10**6))

    def port(self, source: str) -> int:
        return self.relay.port if source == RELAY else self.primary.port

    def server_pid(self, source: str) -> int:
        return running_pid(self.relay.pid if source == RELAY else self.primary.pid, source)

    def calibrate(self, events: int) -> dict[str, Any]:
        found = {}
        for source in (RELAY, PRIMARY):
            got = parsed_download(self.port(source), next(self.server_ids))
            self.wire[source] = got["wire_bytes"]
            found[source] = got
        # Both send the binlog's events plus a fake ROTATE per file (and the primary re-sends
        # each file's FDE the same way): the same count from both, at least the binlog's.
        if found[RELAY]["events"] != found[PRIMARY]["events"] or found[RELAY]["events"] < events:
            raise BenchError(f"the relay sent {found[RELAY]['events']} events, the primary {found[PRIMARY]['events']}, "
                             f"the binlog holds {events}")
        return {s: {"wire_bytes": f["wire_bytes"], "events": f["events"]} for s, f in found.items()}

    def run(self, source: str, clients: int) -> dict[str, Any]:
        pid = self.server_pid(source)
        if source == RELAY:
            reset_peak_rss(pid)
        barrier = threading.Barrier(clients + 1)
        outs: list[dict[str, Any]] = [{} for _ in range(clients)]
        threads = [threading.Thread(target=raw_download, daemon=True,
                                    args=(self.port(source), next(self.server_ids), self.wire[source], barrier, out))
                   for out in outs]
        for thread in threads:
            thread.start()
        cpu_before = cpu_seconds(pid)
        mine_before = os.times()
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            raise BenchError(f"{clients} clients could not all log in to the {source}: "
                             f"{next((o['error'] for o in outs if 'error' in o), '?')}") from None
        for thread in threads:
            thread.join(self.args.timeout)
            if thread.is_alive():
                raise BenchError(f"a download from the {source} took longer than {self.args.timeout} s")
        errors = [o["error"] for o in outs if "error" in o]
        if errors:
            raise BenchError(f"{len(errors)} of {clients} downloads from the {source} failed: {errors[0]}")
        started = min(o["start"] for o in outs)
        seconds = max(o["end"] for o in outs) - started
        server_cpu = cpu_seconds(pid) - cpu_before
        mine_after = os.times()
        served = clients * self.binlog_bytes
        return {
            "source": source, "clients": clients, "seconds": seconds,
            "aggregate_mib_per_s": mib(served) / seconds,
            "first_done_s": min(o["end"] for o in outs) - started,
            "server_cpu_s": server_cpu, "server_cpu_s_per_gib": server_cpu / (served / GIB),
            "client_cpu_s": (mine_after.user - mine_before.user) + (mine_after.system - mine_before.system),
            "relay_peak_rss_mib": status_kib(pid, "VmHWM") / 1024 if source == RELAY else None,
        }


def summarize(runs: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for clients in counts:
        row: dict[str, Any] = {}
        for source in (RELAY, PRIMARY):
            mine = [r for r in runs if r["source"] == source and r["clients"] == clients]
            rates = [r["aggregate_mib_per_s"] for r in mine]
            row[source] = {
                "runs": len(mine), "median_aggregate_mib_per_s": median(rates),
                "min_aggregate_mib_per_s": min(rates), "max_aggregate_mib_per_s": max(rates),
                "median_server_cpu_s_per_gib": median(r["server_cpu_s_per_gib"] for r in mine),
                "median_client_cpu_s": median(r["client_cpu_s"] for r in mine),
                "max_relay_peak_rss_mib": max((r["relay_peak_rss_mib"] or 0 for r in mine), default=0) or None,
            }
        row["ratio"] = row[RELAY]["median_aggregate_mib_per_s"] / row[PRIMARY]["median_aggregate_mib_per_s"]
        summary[str(clients)] = row
    ratios = [row["ratio"] for row in summary.values()]
    peak = summary[str(max(counts))][RELAY]["max_relay_peak_rss_mib"] or 0
    summary["headline"] = {"min_ratio": min(ratios), "goal": GOAL_RATIO, "goal_met": min(ratios) >= GOAL_RATIO,
                           "peak_rss_mib_at_most_clients": peak, "rss_goal_mib": 150, "rss_goal_met": peak <= 150}
    return summary


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs("mariadbd", "mariadb")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    primary: LocalMariaDB | None = None
    relay: RelayProcess | None = None
    try:
        primary = prepare_primary(args)
        files = measured_binlog(args, primary)
        total = sum(f.size for f in files)
        events = sum(f.events for f in files)
        relay = start_bench_relay(workdir, primary.port)
        ingest_s = wait_stored(relay, files, args.timeout)
        log(f"the relay stored {mib(total):.1f} MiB in {ingest_s:.1f} s; binlog {len(files)} files, "
            f"{events:,} events; RSS {status_kib(relay.pid, 'VmRSS') / 1024:.0f} MiB")
        bench = Capacity(args, primary, relay, total)
        calibration = bench.calibrate(events)
        runs: list[dict[str, Any]] = []
        for clients in args.clients:
            for round_no in range(1, args.rounds + 1):
                for source in (RELAY, PRIMARY):
                    record = bench.run(source, clients)
                    record.update(round=round_no, loadavg_1m_before=os.getloadavg()[0])
                    runs.append(record)
                    rss = record["relay_peak_rss_mib"]
                    log(f"{clients:3d} client(s) from the {source:7s} (round {round_no}): {record['seconds']:.2f} s, "
                        f"{record['aggregate_mib_per_s']:.0f} MiB/s, "
                        f"server CPU {record['server_cpu_s_per_gib']:.2f} s/GiB"
                        + (f", peak RSS {rss:.0f} MiB" if rss else ""))
        return {"primary": {"version": server_version(primary)},
                "relay": {"commit": git_commit(), "ingest_s": ingest_s},
                "binlog": {"files": len(files), "bytes": total, "mib": mib(total), "events": events},
                "calibration": calibration, "machine": machine_info(), "rounds": args.rounds,
                "clients": args.clients, "runs": runs, "summary": summarize(runs, args.clients)}
    finally:
        stop_relay(relay)
        finish_primary(args, primary)


def report(results: dict[str, Any]) -> str:
    summary = results["summary"]
    rows = []
    for clients in results["clients"]:
        row = summary[str(clients)]
        for source in (RELAY, PRIMARY):
            s = row[source]
            rows.append([f"{source}, {clients}", s["runs"], f"{s['median_aggregate_mib_per_s']:.0f}",
                         f"{s['min_aggregate_mib_per_s']:.0f}-{s['max_aggregate_mib_per_s']:.0f}",
                         f"{s['median_server_cpu_s_per_gib']:.2f}", f"{s['median_client_cpu_s']:.1f}",
                         f"{s['max_relay_peak_rss_mib']:.0f}" if s["max_relay_peak_rss_mib"] else "-",
                         f"{row['ratio']:.2f}" if source == RELAY else "1.00 (ref)"])
    head = summary["headline"]
    binlog, machine = results["binlog"], results["machine"]
    return "\n".join([
        f"Serve capacity: raw dump clients (discarding), whole binlog of {binlog['mib']:.0f} MiB / "
        f"{binlog['events']:,} events from the relay ({results['relay']['commit']}) and from MariaDB "
        f"{results['primary']['version']}; "
        f"{machine['cpus']} CPUs, load {machine['loadavg'][0]:.2f}",
        table(["source, clients", "runs", "MiB/s", "range", "server CPU s/GiB", "clients CPU s", "relay peak RSS MiB",
               "ratio"], rows),
        f"Lowest ratio {head['min_ratio']:.2f} (goal >= {head['goal']:.1f}: "
        f"{'met' if head['goal_met'] else 'NOT met'}); "
        f"relay peak RSS at {max(results['clients'])} clients {head['peak_rss_mib_at_most_clients']:.0f} MiB "
        f"(goal <= 150: {'met' if head['rss_goal_met'] else 'NOT met'})",
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("capacity", __doc__, rounds="runs per source and client count, alternating",
                     workdir="/tmp/binlog-relay-bench/capacity", timeout=900,
                     primary={"size_mb": 300, "min_mb": 100, "max_binlog_size": "128M", "port": 26316,
                              "name": "benchcap"})
    p.add_argument("--clients", type=int_list, default="1,10,50,100", help="client counts, comma-separated")
    args = parse_bench_args(p, argv)
    if not args.clients or min(args.clients) < 1:
        p.error("every client count must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())

"""Serve capacity: how many bytes a second the relay can hand out, measured with a client that
costs almost nothing (it reads the dump stream into one buffer and throws it away), against the
primary handing out the same binlog to the same client.

    python3 -m bench.capacity [--clients 1,10,50,100] [--rounds 3] [--reuse] [--json PATH]

``mariadb-binlog`` (bench/serve.py) spends most of its time in one write() per event, so it
measures itself more than the server.  Here each client is a thread of this process speaking the
dump protocol on a blocking socket: it logs in with the relay's own sans-IO client
(``relay.protocol.client``), declares CRC32 checksums, asks for a non-blocking COM_BINLOG_DUMP (with
annotations, as a replica asks) of the whole binlog (first file, position 4) and then ``recv_into``s a 1 MiB buffer until it has the
number of bytes that source sends for the whole binlog, ending in its EOF packet.  That number is
learnt per source by one download that parses every packet (not timed: every packet must be an
event, the last one the EOF, and the events must be the binlog's), so the timed loop does no
per-packet work at all.

Per client count (``--clients``, default 1,10,50,100), ``--rounds`` times alternating relay and
primary: all clients start together (a barrier); the time is to the last client's end.
Figures: aggregate MiB/s (clients x binlog bytes / time), the server's CPU seconds (relay process,
or all of mariadbd's threads, from /proc) per GiB handed out, the relay's peak RSS (VmHWM, reset
before each run), the clients' CPU (this process).  Ratio: relay / primary aggregate, medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from relay.localdb import _next_event
from relay.protocol.client import ClientConnection, Connected

from .common import (GOAL_RATIO, MIB, REPL_PASSWORD, REPL_USER, BenchError, Sandbox, log, machine_info, median,
                     mib, primary_binlogs, require_programs, table, vm_hwm_kib)
from .ingest import EVENT_CACHE, finish_primary, prepare_primary
from .serve import PRIMARY, RELAY, RelayProcess, cpu_seconds, git_commit, reset_peak_rss, vm_rss_kib

DUMP_NON_BLOCK = 0x01
DUMP_SEND_ANNOTATE_ROWS = 0x02  # MariaDB: without it ANNOTATE_ROWS events are left out, as a replica gets them
DUMP_FLAGS = DUMP_NON_BLOCK | DUMP_SEND_ANNOTATE_ROWS
BUFFER = 1 << 20
EOF_TAIL = 9  # 05 00 00 seq | fe warnings(2) status(2): the packet that ends a non-blocking dump
GIB = 1 << 30


def _login(port: int) -> tuple[socket.socket, ClientConnection]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    protocol = ClientConnection(REPL_USER, REPL_PASSWORD)
    _next_event(sock, protocol, Connected)
    for sql in ("SET @master_binlog_checksum = 'CRC32'", "SET @mariadb_slave_capability = 4"):
        protocol.query(sql)
        _next_event(sock, protocol, object)
    return sock, protocol


def parsed_download(port: int, server_id: int) -> dict[str, int]:
    """One download that parses every packet: the bytes on the wire and the events, checked."""
    sock, protocol = _login(port)
    with sock:
        protocol.binlog_dump("", 4, server_id, DUMP_FLAGS)
        sock.sendall(protocol.data_to_send())
        wire = events = 0
        types: dict[int, int] = {}
        while True:
            data = sock.recv(BUFFER)
            if not data:
                raise BenchError(f"port {port} closed the dump before its EOF packet")
            wire += len(data)
            protocol.receive_data(data)
            for payload in protocol.read_binlog_packets():
                if payload[0] == 0xFE and len(payload) < 9:
                    return {"wire_bytes": wire, "events": events, "types": types}  # type: ignore[dict-item]
                if payload[0] != 0x00:
                    raise BenchError(f"port {port} sent a packet that is no event: {bytes(payload[:60])!r}")
                events += 1
                types[payload[5]] = types.get(payload[5], 0) + 1


def raw_download(port: int, server_id: int, wire_bytes: int, start: threading.Barrier, out: dict[str, Any]) -> None:
    """The timed client: log in, dump, read ``wire_bytes`` into one buffer, check the EOF at the end."""
    try:
        sock, protocol = _login(port)
        with sock:
            protocol.binlog_dump("", 4, server_id, DUMP_FLAGS)
            request = protocol.data_to_send()
            buffer = memoryview(bytearray(BUFFER))
            recv_into = sock.recv_into
            start.wait()
            sock.sendall(request)
            total = 0
            last = b""
            while total < wire_bytes:
                n = recv_into(buffer)
                if not n:
                    raise BenchError(f"port {port} closed the dump after {total} of {wire_bytes} bytes")
                total += n
                last = bytes(buffer[max(0, n - EOF_TAIL) : n]) if n >= EOF_TAIL else (last + bytes(buffer[:n]))[-EOF_TAIL:]
            out["end"] = time.perf_counter()
            if total != wire_bytes or last[:3] != b"\x05\x00\x00" or last[4] != 0xFE:
                raise BenchError(f"port {port}: {total} bytes (want {wire_bytes}) ending in {last!r}, not an EOF packet")
    except BaseException as exc:  # reported by the caller, which joins every thread
        out["error"] = exc


class Capacity:
    def __init__(self, args: argparse.Namespace, sandbox: Sandbox, relay: RelayProcess, binlog_bytes: int) -> None:
        self.args = args
        self.sandbox = sandbox
        self.relay = relay
        self.binlog_bytes = binlog_bytes
        self.wire: dict[str, int] = {}
        self.server_ids = iter(range(5000, 10**6))

    def port(self, source: str) -> int:
        return self.relay.listen_port if source == RELAY else self.sandbox.port

    def server_pid(self, source: str) -> int:
        pid = self.relay.pid if source == RELAY else self.sandbox.server.pid
        if pid is None:
            raise BenchError(f"the {source} is not running")
        return pid

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
        started = time.perf_counter()
        for thread in threads:
            thread.join(self.args.timeout)
            if thread.is_alive():
                raise BenchError(f"a download from the {source} took longer than {self.args.timeout} s")
        errors = [o["error"] for o in outs if "error" in o]
        if errors:
            raise BenchError(f"{len(errors)} of {clients} downloads from the {source} failed: {errors[0]}")
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
            "relay_peak_rss_mib": vm_hwm_kib(pid) / 1024 if source == RELAY else None,
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
    sandbox: Sandbox | None = None
    relay: RelayProcess | None = None
    try:
        sandbox = prepare_primary(args)
        files = primary_binlogs(sandbox, cache=sandbox.dir / EVENT_CACHE)
        total = sum(f.size for f in files)
        events = sum(f.events for f in files)
        if total < args.min_mb * MIB:
            raise BenchError(f"the binlog holds {mib(total):.0f} MiB, less than --min-mb {args.min_mb}")
        relay = RelayProcess(workdir, sandbox.port, 0, 0, "WARNING")
        relay.start()
        ingest_s = relay.wait_stored(files, args.timeout)
        log(f"the relay stored {mib(total):.1f} MiB in {ingest_s:.1f} s; binlog {len(files)} files, "
            f"{events:,} events; RSS {vm_rss_kib(relay.pid) / 1024:.0f} MiB")
        bench = Capacity(args, sandbox, relay, total)
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
                        f"{record['aggregate_mib_per_s']:.0f} MiB/s, server CPU {record['server_cpu_s_per_gib']:.2f} s/GiB"
                        + (f", peak RSS {rss:.0f} MiB" if rss else ""))
        return {"primary": {"version": sandbox.version()}, "relay": {"commit": git_commit(), "ingest_s": ingest_s},
                "binlog": {"files": len(files), "bytes": total, "mib": mib(total), "events": events},
                "calibration": calibration, "machine": machine_info(), "rounds": args.rounds,
                "clients": args.clients, "runs": runs, "summary": summarize(runs, args.clients)}
    finally:
        if relay is not None:
            relay.stop()
            shutil.rmtree(relay.data_dir, ignore_errors=True)
        finish_primary(args, sandbox)


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
        f"Serve capacity: raw dump clients (discarding), whole binlog of {binlog['mib']:.0f} MiB / {binlog['events']:,} "
        f"events from the relay ({results['relay']['commit']}) and from MariaDB {results['primary']['version']}; "
        f"{machine['cpus']} CPUs, load {machine['loadavg'][0]:.2f}",
        table(["source, clients", "runs", "MiB/s", "range", "server CPU s/GiB", "clients CPU s", "relay peak RSS MiB",
               "ratio"], rows),
        f"Lowest ratio {head['min_ratio']:.2f} (goal >= {head['goal']:.1f}: {'met' if head['goal_met'] else 'NOT met'}); "
        f"relay peak RSS at {max(results['clients'])} clients {head['peak_rss_mib_at_most_clients']:.0f} MiB "
        f"(goal <= 150: {'met' if head['rss_goal_met'] else 'NOT met'})",
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench.capacity", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--clients", default="1,10,50,100", help="client counts, comma-separated")
    p.add_argument("--rounds", type=int, default=3, help="runs per source and client count, alternating")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--reuse", action="store_true", help="reuse the sandbox primary of an earlier --reuse run")
    p.add_argument("--keep", action="store_true", help="keep the primary's directory at the end")
    p.add_argument("--size-mb", type=float, default=300, help="MiB of binlog to generate for a new primary")
    p.add_argument("--fill", choices=["sysbench", "sql"], default="sysbench",
                   help="how a new primary is filled (sql: a few plain INSERTs, for smoke runs)")
    p.add_argument("--min-mb", type=float, default=100, help="refuse to measure a smaller binlog (MiB)")
    p.add_argument("--max-binlog-size", default="128M", help="the primary's max_binlog_size")
    p.add_argument("--port", type=int, default=26316, help="the sandbox primary's port")
    p.add_argument("--name", default="benchcap", help="the sandbox's name")
    p.add_argument("--sandbox-dir", default="/tmp/binlog-relay-bench/sandbox")
    p.add_argument("--workdir", default="/tmp/binlog-relay-bench/capacity", help="the relay's data_dir, config, log")
    p.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    args = p.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",") if c]
    if args.rounds < 1 or not args.clients or min(args.clients) < 1:
        p.error("--rounds and every client count must be at least 1")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        results = run_benchmark(args)
    except BenchError as exc:
        log(f"benchmark failed: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        log(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GTID starts and reconnect storms: MariaDB GTID replicas connecting near the end of a large binlog
file, served by the relay vs by the primary itself.

    python3 -m bench.gtidstart [--size-mb 1000] [--clients 1,20,100] [--rounds 3] [--reuse] [--json PATH]

A MariaDB GTID replica connects with ``SET @slave_connect_state = '<its last GTID>'`` and a
COM_BINLOG_DUMP of an empty file name at position 4.  The server finds the file that holds that
GTID (from the files' GTID_LIST events) and reads it from its first event up to the replica's GTID
before it sends the first event the replica lacks: MariaDB 10.11 walks the file, and so does the
relay unless it can seek there.  This benchmark only talks to both servers over the wire, so it
measures either way of getting there.

The primary: a sandbox of its own (``benchgtid``, port 26336; ``--reuse`` keeps it, the fill takes
minutes) whose binlog is one large file: max_binlog_size 1G, sysbench oltp_write_only fills the
first file to --size-mb (default 1000 MiB; its last rounds are shortened so that it stays in that
file), then FLUSH BINARY LOGS closes it.  What follows it are small files without transactions
(each start of a reused primary adds one).  The largest file is the *start file*.  Its GTIDs are
read from the primary's file by the event headers (cached beside the sandbox): every client's
connect state and the transactions it must receive come from there.

The relay: the real program (relay.sandbox.relayprocess), started once.  It mirrors the primary
before anything is timed (its committed end at the primary's end, its files byte copies of the
primary's), and each relay run is then served by that running relay, which already holds the
file: replicas reconnecting to a running relay after a failover, or after the relay's own restart
once it caught up.  Round 1 is the first GTID dump it serves, so whatever it learns in memory from
a dump shows as the gap between the range's ends.  ``--restart-relay`` restarts it (SIGTERM, start,
caught up again) before every relay run instead.  Nothing writes to the primary meanwhile (SHOW
MASTER STATUS is the same before and after).

1. **Time to first event**: one client whose @slave_connect_state is the GTID --back (200)
   transactions before the end of the start file.  The clock runs from sending COM_BINLOG_DUMP
   (logged in and variables set before) to receiving the first GTID event: the first event the
   replica does not have.  Before it only the fake ROTATE, the file's FDE, GTID_LIST and
   BINLOG_CHECKPOINT, and the artificial GTID_LIST may come.  Goal: the relay's median <= 20 ms.
2. **Reconnect storm**: --clients (1, 20, 100) GTID clients at once, client i starting k_i
   transactions before the end of the start file (k_i evenly spread over --back +- --spread), each
   reading a non-blocking dump to its EOF.  The clock runs from the first client's connect (login
   included) until the last one has read to the primary's end.  The clients are threads in
   --client-processes worker processes (bench/rawclient.py: the relay's sans-IO client), released
   together by a barrier; they parse every packet, few since they start near the end.
   Goal: primary seconds / relay seconds >= 10 at 20 and at 100 clients.
(`binlog-relay search` by time over 100 files is bench/search.py's.)

Both servers get the same requests, ``--rounds`` (3) times alternating relay, primary, relay, ...
Each client logs in as a MariaDB GTID replica does: @master_binlog_checksum='CRC32',
@mariadb_slave_capability=4, @slave_connect_state, @slave_gtid_strict_mode=0, COM_REGISTER_SLAVE
with a server_id of its own (a primary ends an older dump of the same server_id), then the dump
with annotations asked for.  Every dump is checked before its time counts: the GTIDs received
must be exactly the transactions after its connect state, in order, and the stream must end at
the primary's end (file and position).  Figures: medians with min-max; the server's CPU seconds
(relay process, or all of mariadbd) during each run; ratio = primary time / relay time (the
relay's speed-up: >= 1, the relay is not the slower one).
"""

from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing
import os
import queue
import struct
import sys
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.sandbox.binlogfiles import BINLOG_MAGIC, GTID_EVENT, HEADER_LEN
from relay.sandbox.errors import WaitTimeout
from relay.sandbox.mariadb import LocalMariaDB
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess
from relay.sandbox.replication import wait_binlog_settled

from .common import (
    MIB,
    PRIMARY,
    RELAY,
    BenchError,
    BinlogFile,
    bench_main,
    bench_parser,
    check_copy,
    cpu_seconds,
    git_commit,
    int_list,
    log,
    machine_info,
    median,
    mib,
    parse_bench_args,
    require_programs,
    running_pid,
    server_version,
    start_bench_relay,
    stop_relay,
    table,
    wait_stored,
)
from .ingest import finish_primary, prepare_primary
from .rawclient import (
    GTID_LIST_EVENT,
    PREAMBLE_EVENTS,
    Gtid,
    gtid_client,
    gtid_storm_worker,
)

FIRST_EVENT_GOAL_MS = 20.0
STORM_GOAL_RATIO = 10.0
STORM_GOAL_CLIENTS = (20, 100)
GTIDS_CACHE = "bench-gtids.json"  # beside the sandbox: the GTIDs read from its files, by name and size
FIRST_EVENT_SERVER_ID = 4999
STORM_SERVER_IDS = 5000  # client i of a storm registers as 5000 + i
START_TIMEOUT = 120.0  # for a storm's worker processes to start
_U32 = struct.Struct("<I")
_GTID_BODY = struct.Struct("<QI")  # seq_no, domain_id
_SIZE_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def gtid_text(gtid: Gtid) -> str:
    return "-".join(str(part) for part in gtid)


def _gtids(listed: list[list[int]]) -> list[Gtid]:
    """GTIDs of the JSON cache (lists) in the form the clients report them (tuples)."""
    return [(domain, server_id, seq_no) for domain, server_id, seq_no in listed]


def _span(gtids: list[Gtid]) -> str:
    return f"{gtid_text(gtids[0])} .. {gtid_text(gtids[-1])}" if gtids else "none"


# ---------------------------------------------------------------- the primary's binlog


@dataclass(frozen=True)
class Binlog:
    """The primary's binlog as this benchmark uses it: its files, the start file (the largest) with
    its transactions and last GTIDs, every GTID of the files after it, and the end (SHOW MASTER
    STATUS: the end of the last file)."""

    files: list[BinlogFile]
    start: BinlogFile
    transactions: int
    tail: list[Gtid]
    after: list[Gtid]
    end: tuple[str, int]

    def connect_state(self, back: int) -> str:
        """The GTID ``back`` transactions before the end of the start file."""
        return gtid_text(self.tail[-back - 1])

    def expected(self, back: int) -> list[Gtid]:
        """What a replica at ``connect_state(back)`` must receive: the transactions after it."""
        return self.tail[-back:] + self.after


def walk_gtids(path: Path, size: int, keep: int | None) -> dict[str, Any]:
    """Walk the event headers of a binlog file's first ``size`` bytes: its events, its transactions
    (GTID events) and the last ``keep`` GTIDs in order (None: all).  The walk must land on the end."""
    with open(path, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != BINLOG_MAGIC:
            raise BenchError(f"{path} is not a binlog file")
        kept: deque[Gtid] = deque(maxlen=keep)
        unpack, unpack_gtid = _U32.unpack_from, _GTID_BODY.unpack_from
        pos, events, transactions = 4, 0, 0
        limit = size - HEADER_LEN
        while pos <= limit:
            length = unpack(data, pos + 9)[0]
            if length < HEADER_LEN:
                raise BenchError(f"{path}: bad event length {length} at {pos}")
            if data[pos + 4] == GTID_EVENT:
                seq_no, domain = unpack_gtid(data, pos + HEADER_LEN)
                kept.append((domain, unpack(data, pos + 5)[0], seq_no))
                transactions += 1
            pos += length
            events += 1
    if pos != size:
        raise BenchError(f"{path}: the event walk ends at {pos}, not at {size}")
    return {"events": events, "transactions": transactions, "kept": keep, "tail": list(kept)}


def close_start_file(primary: LocalMariaDB) -> None:
    """FLUSH BINARY LOGS when the largest file is the newest (a fresh fill): the start file is then a
    closed one, as on a reused primary (each start opens a new file) and the relay's copy of it."""
    listed = primary.binlog_files()
    if max(listed, key=lambda file: file[1]) == listed[-1]:
        primary.sql("FLUSH BINARY LOGS")
        wait_binlog_settled(primary)


def read_binlog(args: argparse.Namespace, primary: LocalMariaDB) -> Binlog:
    """The primary's binlog (nothing may be writing to it), its start file checked to be what the
    benchmark may measure: at least --min-mb, more than --back + --spread transactions."""
    end = primary.master_status()
    listed = primary.binlog_files()
    if listed[-1] != end:
        raise BenchError(f"SHOW MASTER STATUS {end} is not the end of the last binlog {listed[-1]}: "
                         "is something writing to the primary?")
    start = max(range(len(listed)), key=lambda i: listed[i][1])
    if listed[start][1] < args.min_mb * MIB:
        raise BenchError(f"the largest binlog file {listed[start][0]} holds {mib(listed[start][1]):.0f} MiB, "
                         f"less than --min-mb {args.min_mb}")
    cache_path = primary.base_dir / GTIDS_CACHE
    try:
        cache: dict[str, Any] = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    walked = []
    for i, (name, size) in enumerate(listed):
        keep = 0 if i < start else (args.back + args.spread + 1 if i == start else None)
        entry = cache.get(f"{name}:{size}")
        if entry is None or not (entry["kept"] is None or (keep is not None and entry["kept"] >= keep)):
            if i == start:
                log(f"reading the GTIDs of {name} ({mib(size):.0f} MiB) by its event headers")
            entry = cache[f"{name}:{size}"] = walk_gtids(primary.binlog_path(name), size, keep)
        walked.append(entry)
    cache_path.write_text(json.dumps(cache))
    files = [BinlogFile(name, primary.binlog_path(name), size, entry["events"])
             for (name, size), entry in zip(listed, walked)]
    transactions = walked[start]["transactions"]
    if transactions <= args.back + args.spread:
        raise BenchError(f"{listed[start][0]} holds {transactions} transactions: --back + --spread "
                         f"({args.back + args.spread}) must be fewer")
    return Binlog(files, files[start], transactions, _gtids(walked[start]["tail"]),
                  [gtid for entry in walked[start + 1:] for gtid in _gtids(entry["tail"])], end)


def storm_backs(back: int, spread: int, clients: int) -> list[int]:
    """How many transactions before the end of the start file each storm client starts: evenly over
    back - spread .. back + spread (one client: back)."""
    if clients == 1:
        return [back]
    return [back - spread + round(2 * spread * i / (clients - 1)) for i in range(clients)]


# ---------------------------------------------------------------- the runs


class GtidStarts:
    def __init__(self, args: argparse.Namespace, primary: LocalMariaDB, relay: RelayProcess, binlog: Binlog) -> None:
        self.args = args
        self.primary = primary
        self.relay = relay
        self.binlog = binlog
        self.processes = args.client_processes or max(2, os.cpu_count() or 2)
        self.dumps_checked = 0
        self.transactions_checked = 0

    def port(self, source: str) -> int:
        return self.relay.port if source == RELAY else self.primary.port

    def server_pid(self, source: str) -> int:
        return running_pid(self.relay.pid if source == RELAY else self.primary.pid, source)

    def before_run(self, source: str) -> None:
        """--restart-relay: a relay run starts from a relay just restarted and caught up again."""
        if source != RELAY or not self.args.restart_relay:
            return
        status = self.relay.stop()
        if status != 0:
            raise BenchError(f"the relay exited with status {status} on SIGTERM\n{self.relay.log_tail()}")
        self.relay.start()
        self.relay.wait_listening()
        wait_stored(self.relay, self.binlog.files, self.args.timeout)

    def check(self, source: str, got: dict[str, Any], back: int) -> None:
        """A wrong answer is never timed: exactly the transactions after the connect state, in order,
        only the start's own events before the first, and the stream ends at the primary's end."""
        want = self.binlog.expected(back)
        gtids = got["gtids"]
        if gtids != want:
            raise BenchError(f"the {source} sent a replica at {self.binlog.connect_state(back)} {len(gtids)} "
                             f"transactions ({_span(gtids)}); want the {len(want)} after it ({_span(want)})")
        preamble = got["preamble"]
        if any(abs(kind) not in PREAMBLE_EVENTS for kind in preamble) or -GTID_LIST_EVENT not in preamble:
            raise BenchError(f"before the first transaction the {source} sent events of types {preamble} "
                             "(negative: artificial); want the fake ROTATE, FDE, GTID_LIST, BINLOG_CHECKPOINT, "
                             "artificial GTID_LIST")
        if (got["file"], got["pos"]) != self.binlog.end:
            raise BenchError(f"a GTID dump from the {source} ended at {got['file']}:{got['pos']}, "
                             f"not at the primary's end {self.binlog.end}")
        self.dumps_checked += 1
        self.transactions_checked += len(want)

    def first_event(self, source: str) -> dict[str, Any]:
        """One GTID client --back transactions before the end: from its COM_BINLOG_DUMP to its first event."""
        self.before_run(source)
        pid = self.server_pid(source)
        cpu = cpu_seconds(pid)
        got = gtid_client(self.port(source), FIRST_EVENT_SERVER_ID, self.binlog.connect_state(self.args.back),
                          self.args.timeout)
        server_cpu = cpu_seconds(pid) - cpu
        self.check(source, got, self.args.back)
        return {"source": source, "first_event_ms": (got["first"] - got["sent"]) * 1000,
                "to_end_s": got["end"] - got["sent"], "transactions": len(got["gtids"]), "server_cpu_s": server_cpu}

    def storm(self, source: str, clients: int) -> dict[str, Any]:
        """``clients`` GTID clients at once, each to the end: from the first connect to the last end."""
        self.before_run(source)
        backs = storm_backs(self.args.back, self.args.spread, clients)
        plan = [(i, STORM_SERVER_IDS + i, self.binlog.connect_state(back)) for i, back in enumerate(backs)]
        pid = self.server_pid(source)
        outs, server_cpu, processes = self._run_clients(self.port(source), pid, plan)
        failed = [out["error"] for out in outs if "error" in out]
        if failed:
            raise BenchError(f"{len(failed)} of {clients} GTID clients of the {source} failed: {failed[0]}")
        for out in outs:
            self.check(source, out, backs[out["index"]])
        begun = min(out["connect"] for out in outs)
        first_events = [out["first"] - out["connect"] for out in outs]
        return {"source": source, "clients": clients, "seconds": max(out["end"] for out in outs) - begun,
                "first_done_s": min(out["end"] for out in outs) - begun,
                "median_first_event_s": median(first_events), "max_first_event_s": max(first_events),
                "transactions": sum(len(out["gtids"]) for out in outs), "server_cpu_s": server_cpu,
                "client_processes": processes}

    def _run_clients(self, port: int, pid: int,
                     plan: list[tuple[int, int, str]]) -> tuple[list[dict[str, Any]], float, int]:
        """Run ``plan``'s clients in worker processes (spawned: no state of this one), released together:
        every client's figures, the server's CPU seconds meanwhile, and how many processes ran them."""
        context = multiprocessing.get_context("spawn")
        count = min(len(plan), self.processes)
        start = context.Barrier(count + 1)
        results = context.Queue()
        workers = [context.Process(target=gtid_storm_worker, daemon=True,
                                   args=(port, plan[i::count], self.args.timeout, start, results))
                   for i in range(count)]
        for worker in workers:
            worker.start()
        try:
            cpu = cpu_seconds(pid)
            try:
                start.wait(timeout=START_TIMEOUT)
            except threading.BrokenBarrierError:
                raise BenchError(f"the storm's {count} client processes did not all start within "
                                 f"{START_TIMEOUT:g} s") from None
            outs = _collect(results, workers, self.args.timeout + 60)
            return outs, cpu_seconds(pid) - cpu, count
        finally:
            for worker in workers:
                worker.join(10)
                if worker.is_alive():
                    worker.kill()
                    worker.join(10)


def _collect(results: Any, workers: list[Any], timeout: float) -> list[dict[str, Any]]:
    """Every worker's list of client figures; fails at once if a worker died without reporting."""
    outs: list[dict[str, Any]] = []
    reported = 0

    def all_reported() -> bool:
        nonlocal reported
        while reported < len(workers):
            try:
                outs.extend(results.get_nowait())
            except queue.Empty:
                break
            reported += 1
        dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
        if reported < len(workers) and dead:
            raise BenchError(f"a storm client process exited with status {dead[0]} before reporting")
        return reported == len(workers)

    try:
        wait_for(all_reported, timeout, "the storm's clients did not all finish")
    except WaitTimeout as late:
        raise BenchError(str(late)) from None
    return outs


def summarize(first_runs: list[dict[str, Any]], storm_runs: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    def spread(values: list[float]) -> dict[str, float]:
        return {"runs": len(values), "median": median(values), "min": min(values), "max": max(values)}

    first: dict[str, Any] = {}
    for source in (RELAY, PRIMARY):
        mine = [r for r in first_runs if r["source"] == source]
        first[source] = {**spread([r["first_event_ms"] for r in mine]),
                         "median_server_cpu_s": median(r["server_cpu_s"] for r in mine)}
    first.update(ratio=first[PRIMARY]["median"] / first[RELAY]["median"], goal_ms=FIRST_EVENT_GOAL_MS,
                 goal_met=first[RELAY]["median"] <= FIRST_EVENT_GOAL_MS)
    storms: dict[str, Any] = {}
    for clients in counts:
        row: dict[str, Any] = {}
        for source in (RELAY, PRIMARY):
            mine = [r for r in storm_runs if r["source"] == source and r["clients"] == clients]
            row[source] = {**spread([r["seconds"] for r in mine]),
                           "median_first_event_s": median(r["median_first_event_s"] for r in mine),
                           "median_server_cpu_s": median(r["server_cpu_s"] for r in mine)}
        goal = STORM_GOAL_RATIO if clients in STORM_GOAL_CLIENTS else None
        ratio = row[PRIMARY]["median"] / row[RELAY]["median"]
        row.update(ratio=ratio, goal=goal, goal_met=None if goal is None else ratio >= goal)
        storms[str(clients)] = row
    judged = [row["goal_met"] for row in storms.values() if row["goal"] is not None]
    return {"first_event": first, "storm": storms,
            "headline": {"first_event_goal_met": first["goal_met"], "storm_goals_met": all(judged) if judged else None}}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs("mariadbd", "mariadb")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    primary: LocalMariaDB | None = None
    relay: RelayProcess | None = None
    try:
        primary = prepare_primary(args, one_file=True)
        close_start_file(primary)
        binlog = read_binlog(args, primary)
        log(f"start file {binlog.start.name}: {mib(binlog.start.size):.1f} MiB, {binlog.transactions:,} transactions; "
            f"{len(binlog.files)} files, {len(binlog.after)} transactions after it; end {binlog.end}")
        relay = start_bench_relay(workdir, primary.port)
        ingest_s = wait_stored(relay, binlog.files, args.timeout)
        check_copy(binlog.files, relay.data_dir)
        log(f"the relay mirrored the primary in {ingest_s:.1f} s (copy checked byte for byte)")
        bench = GtidStarts(args, primary, relay, binlog)
        first_runs: list[dict[str, Any]] = []
        for round_no in range(1, args.rounds + 1):
            for source in (RELAY, PRIMARY):
                load = os.getloadavg()[0]
                record = bench.first_event(source)
                record.update(round=round_no, loadavg_1m_before=load)
                first_runs.append(record)
                log(f"first event from the {source:7s} (round {round_no}): {record['first_event_ms']:.1f} ms, "
                    f"to the end {record['to_end_s']:.3f} s, server CPU {record['server_cpu_s']:.2f} s")
        storm_runs: list[dict[str, Any]] = []
        for clients in args.clients:
            for round_no in range(1, args.rounds + 1):
                for source in (RELAY, PRIMARY):
                    load = os.getloadavg()[0]
                    record = bench.storm(source, clients)
                    record.update(round=round_no, loadavg_1m_before=load)
                    storm_runs.append(record)
                    log(f"storm of {clients:3d} from the {source:7s} (round {round_no}): {record['seconds']:.3f} s, "
                        f"first events after {record['median_first_event_s']:.3f} s (median), "
                        f"server CPU {record['server_cpu_s']:.2f} s")
        if primary.master_status() != binlog.end:
            raise BenchError(f"the primary's end moved from {binlog.end} to {primary.master_status()} during the "
                             "benchmark: something wrote to it")
        return {"primary": {"version": server_version(primary)},
                "relay": {"commit": git_commit(), "ingest_s": ingest_s,
                          "restarted_before_each_run": args.restart_relay},
                "binlog": {"files": len(binlog.files), "start_file": binlog.start.name, "bytes": binlog.start.size,
                           "mib": mib(binlog.start.size), "events": binlog.start.events,
                           "transactions": binlog.transactions, "transactions_after": len(binlog.after),
                           "end": list(binlog.end)},
                "back": args.back, "spread": args.spread, "machine": machine_info(), "rounds": args.rounds,
                "clients": args.clients, "client_processes": bench.processes,
                "checks": {"dumps": bench.dumps_checked, "transactions": bench.transactions_checked},
                "first_event_runs": first_runs, "storm_runs": storm_runs,
                "summary": summarize(first_runs, storm_runs, args.clients)}
    finally:
        stop_relay(relay)
        finish_primary(args, primary)


# ---------------------------------------------------------------- output


def report(results: dict[str, Any]) -> str:
    summary = results["summary"]
    first = summary["first_event"]
    rows = []
    for source in (RELAY, PRIMARY):
        s = first[source]
        rows.append([f"{source}, first event", s["runs"], f"{s['median']:.1f} ms", f"{s['min']:.1f}-{s['max']:.1f}",
                     f"{s['median_server_cpu_s']:.2f}", f"{first['ratio']:.2f}" if source == RELAY else "1.00 (ref)"])
    for clients in results["clients"]:
        row = summary["storm"][str(clients)]
        for source in (RELAY, PRIMARY):
            s = row[source]
            rows.append([f"{source}, storm of {clients}", s["runs"], f"{s['median']:.3f} s",
                         f"{s['min']:.3f}-{s['max']:.3f}", f"{s['median_server_cpu_s']:.2f}",
                         f"{row['ratio']:.2f}" if source == RELAY else "1.00 (ref)"])
    binlog, machine = results["binlog"], results["machine"]
    goals = [(f"relay time to first event {first[RELAY]['median']:.1f} ms (goal <= {first['goal_ms']:.0f} ms: "
              f"{'met' if first['goal_met'] else 'NOT met'})")]
    goals += [(f"storm of {n}: primary / relay {row['ratio']:.2f} (goal >= {row['goal']:.0f}: "
               f"{'met' if row['goal_met'] else 'NOT met'})")
              for n, row in summary["storm"].items() if row["goal"] is not None]
    relay = results["relay"]
    heading = (f"GTID starts and reconnect storms: MariaDB GTID clients {results['back']} (storms: "
               f"+-{results['spread']}) transactions before the end of {binlog['start_file']} "
               f"({binlog['mib']:.0f} MiB, {binlog['transactions']:,} transactions) from the relay ({relay['commit']}, "
               f"{'restarted before each run' if relay['restarted_before_each_run'] else 'running'}) and from MariaDB "
               f"{results['primary']['version']}; {machine['cpus']} CPUs, load {machine['loadavg'][0]:.2f}")
    checked = (f"Checked: {results['checks']['dumps']} dumps, {results['checks']['transactions']:,} transactions, each "
               "exactly those after its connect state, ending at the primary's end")
    return "\n".join([
        heading,
        table(["source, figure", "runs", "median", "range", "server CPU s", "ratio"], rows),
        "; ".join(goals),
        checked,
    ])


def _max_binlog_size(text: str) -> int:
    text = text.strip().upper()
    if text[-1:] in _SIZE_SUFFIX:
        return int(float(text[:-1]) * _SIZE_SUFFIX[text[-1]])
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("gtidstart", __doc__, rounds="runs per figure and source, alternating relay and primary",
                     workdir="/tmp/binlog-relay-bench/gtidstart", timeout=3600,
                     primary={"size_mb": 1000, "min_mb": 900, "max_binlog_size": "1G", "port": 26336,
                              "name": "benchgtid"})
    p.add_argument("--clients", type=int_list, default="1,20,100",
                   help="reconnect storm client counts, comma-separated")
    p.add_argument("--back", type=int, default=200,
                   help="transactions between the first-event client's connect state and the end of the start file")
    p.add_argument("--spread", type=int, default=50,
                   help="storm clients start --back +- this many transactions before the end, evenly spread")
    p.add_argument("--client-processes", type=int, default=0,
                   help="worker processes a storm's clients are spread over (0: the CPU count, at least 2)")
    p.add_argument("--restart-relay", action="store_true",
                   help="restart the relay (and wait until it caught up) before each relay run instead of "
                        "measuring the running relay")
    args = parse_bench_args(p, argv)
    if not args.clients or min(args.clients) < 1:
        p.error("every client count must be at least 1")
    if args.back < 1 or not 0 <= args.spread < args.back or args.client_processes < 0:
        p.error("--back must be at least 1, --spread between 0 and --back - 1, --client-processes at least 0")
    if args.size_mb * MIB >= _max_binlog_size(args.max_binlog_size):
        p.error("--size-mb must stay below --max-binlog-size: the start file is the first file, filled once")
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())

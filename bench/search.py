"""`binlog-relay search` by time over a history of 100 binlog files, against reading the files up to
the moment with `mariadb-binlog --stop-datetime` (how the moment is found without an index).

    python3 -m bench.search [--files 100] [--size-mb 400] [--rounds 3] [--reuse] [--json PATH]

The primary: a sandbox of its own (``benchsearch``, port 26337; ``--reuse`` keeps it), max_binlog_size
--size-mb / --files (4 MiB), filled by sysbench oltp_write_only to --size-mb (400 MiB): about 100
files.  The relay (the real program) mirrors it; its data_dir, with the index of the stored history
ingest wrote, is what both sides read.  Nothing writes meanwhile.

Moments: the header time of the first transaction of the files at 10 %, 50 % and 90 % of the history
plus one second (the answer is in the middle of a file), and one past the end.  For each, --rounds
times, alternating:
- *search*: ``StoredHistory(data_dir).at_time(moment)`` in a child process that imported the relay
  once (``--child``), a new StoredHistory per call, so nothing of the index is in memory: the time
  of one search, as the command does it after its imports.  The whole command
  (``binlog-relay search --time @SECONDS``, interpreter start and imports included) is timed too.
- *mariadb-binlog*: ``mariadb-binlog --stop-datetime=MOMENT FILE...`` over the data_dir's files to
  /dev/null: it reads every event up to the moment, which is what finding it takes without an index.
Every answer is checked against a walk of the primary's files done here, event header by event
header: the transaction found is the last one whose commit is at or before the moment, before the
first that commits later.  Goal: a search under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from relay.sandbox.binlogfiles import BINLOG_MAGIC, GTID_EVENT, HEADER_LEN
from relay.sandbox.mariadb import LocalMariaDB

from .common import (
    MARIADB_BINLOG,
    BenchError,
    bench_main,
    bench_parser,
    check_copy,
    git_commit,
    log,
    machine_info,
    median,
    mib,
    parse_bench_args,
    primary_binlogs,
    require_programs,
    server_version,
    start_bench_relay,
    stop_relay,
    table,
    wait_stored,
)
from .ingest import finish_primary, prepare_primary

GOAL_MS = 50.0
_XID, _QUERY, _FL_STANDALONE = 16, 2, 1
_PART_OF_GROUP = {GTID_EVENT, 5, 13, 14, 19, 160}  # as MariaDB's dump reads a standalone group


def commits(files: list[Path]) -> list[tuple[str, int, int]]:
    """(file, end of the commit event, its header time) of every transaction, in binlog order: a
    GTID event opens one, XID or COMMIT ends a transaction, the first event past the statement ends
    a standalone one.  Headers only, and the statement's last bytes."""
    found = []
    for path in files:
        with open(path, "rb") as stored:
            data = stored.read()
        if data[:4] != BINLOG_MAGIC:
            raise BenchError(f"{path} is not a binlog file")
        crc = data[4 + struct.unpack_from("<I", data, 4 + 9)[0] - 5] == 1
        pos, state = 4, None
        while pos + HEADER_LEN <= len(data):
            timestamp, etype = struct.unpack_from("<IB", data, pos)
            length = struct.unpack_from("<I", data, pos + 9)[0]
            end = pos + length
            if etype == GTID_EVENT:
                state = "standalone" if data[pos + HEADER_LEN + 12] & _FL_STANDALONE else "transaction"
            elif state == "transaction" and (etype == _XID or (etype == _QUERY and data[pos : end - (4 if crc else 0)]
                                                                .endswith(b"\0COMMIT"))):
                found.append((path.name, end, timestamp))
                state = None
            elif state == "standalone" and etype not in _PART_OF_GROUP:
                found.append((path.name, end, timestamp))
                state = None
            pos = end
    return found


def expected_answer(walked: list[tuple[str, int, int]], moment: int) -> tuple[str, int] | None:
    """Where the last transaction before the first one committed after ``moment`` ends."""
    last = None
    for name, end, timestamp in walked:
        if timestamp > moment:
            break
        last = (name, end)
    return last


def first_commits(walked: list[tuple[str, int, int]]) -> dict[str, int]:
    """The header time of each file's first commit."""
    firsts: dict[str, int] = {}
    for name, _, timestamp in walked:
        firsts.setdefault(name, timestamp)
    return firsts


# ---------------------------------------------------------------- the two ways


def search_child(data_dir: str, moments: list[int]) -> dict[str, Any]:
    """In a child that imported the relay once: each search from a new StoredHistory."""
    from relay.storage.search import StoredHistory

    runs = []
    for moment in moments:
        started = time.perf_counter()
        found = StoredHistory(data_dir).at_time(moment)
        runs.append({"moment": moment, "seconds": time.perf_counter() - started, "answer": found["transaction"]})
    return {"runs": runs}


def run_searches(data_dir: Path, moments: list[int]) -> list[dict[str, Any]]:
    child = subprocess.run([sys.executable, "-m", "bench.search", "--child", str(data_dir),
                            ",".join(map(str, moments))], capture_output=True, text=True, timeout=600,
                           cwd=Path(__file__).resolve().parent.parent)
    if child.returncode != 0:
        raise BenchError(f"the search child failed: {child.stderr[-2000:]}")
    return json.loads(child.stdout)["runs"]  # type: ignore[no-any-return]


def run_command(data_dir: Path, moment: int) -> float:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "relay.cli", "search", "--data-dir", str(data_dir), "--time",
                             f"@{moment}"], capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise BenchError(f"binlog-relay search failed: {result.stderr[-2000:]}")
    return seconds


def run_mariadb_binlog(files: list[Path], moment: int) -> float:
    stop = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(moment + 1))  # stops before the first event at or after
    started = time.perf_counter()
    result = subprocess.run([MARIADB_BINLOG, f"--stop-datetime={stop}", *map(str, files)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, timeout=600, env={**os.environ, "TZ": "UTC"})
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise BenchError(f"mariadb-binlog failed: {result.stderr[-2000:]}")
    return seconds


# ---------------------------------------------------------------- the benchmark


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs("mariadbd", "mariadb", MARIADB_BINLOG)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    primary: LocalMariaDB | None = None
    relay = None
    try:
        primary = prepare_primary(args)
        files = primary_binlogs(primary)
        if len(files) < args.min_files:
            raise BenchError(f"the primary has {len(files)} binlog files, fewer than --min-files {args.min_files}")
        relay = start_bench_relay(workdir, primary.port)
        wait_stored(relay, files, args.timeout)
        check_copy(files, relay.data_dir)
        stored = [relay.data_dir / f.name for f in files]
        log(f"{len(files)} files, {mib(sum(f.size for f in files)):.0f} MiB, mirrored; walking their commits")
        walked = commits(stored)
        firsts = first_commits(walked)
        names = [f.name for f in files if f.name in firsts]
        moments = [firsts[names[int(len(names) * share)]] + 1 for share in (0.1, 0.5, 0.9)] + [walked[-1][2] + 60]
        searches, commands, readers = [], [], []
        for round_no in range(1, args.rounds + 1):
            for run in run_searches(relay.data_dir, moments):
                answer = run["answer"]
                got = (answer["file"], answer["end_pos"]) if answer else None
                if got != expected_answer(walked, run["moment"]):
                    raise BenchError(f"search at {run['moment']} answered {got}, the walk "
                                     f"{expected_answer(walked, run['moment'])}")
                searches.append({**run, "round": round_no})
            for moment in moments:
                commands.append({"moment": moment, "seconds": run_command(relay.data_dir, moment), "round": round_no})
                readers.append({"moment": moment, "seconds": run_mariadb_binlog(stored, moment), "round": round_no})
            log(f"round {round_no}: search median {median(r['seconds'] for r in searches[-len(moments):]) * 1000:.1f}"
                f" ms, mariadb-binlog median {median(r['seconds'] for r in readers[-len(moments):]):.2f} s")
        return {"primary": {"version": server_version(primary)}, "relay": {"commit": git_commit()},
                "machine": machine_info(), "rounds": args.rounds,
                "binlog": {"files": len(files), "bytes": sum(f.size for f in files), "transactions": len(walked)},
                "moments": moments, "search_runs": searches, "command_runs": commands, "mariadb_binlog_runs": readers,
                "summary": summarize(searches, commands, readers)}
    finally:
        stop_relay(relay)
        finish_primary(args, primary)


def summarize(searches: list[dict[str, Any]], commands: list[dict[str, Any]],
              readers: list[dict[str, Any]]) -> dict[str, Any]:
    def spread(runs: list[dict[str, Any]]) -> dict[str, float]:
        values = [r["seconds"] for r in runs]
        return {"runs": len(values), "median_s": median(values), "min_s": min(values), "max_s": max(values)}

    search, reader = spread(searches), spread(readers)
    return {"search": search, "command": spread(commands), "mariadb_binlog": reader,
            "ratio": reader["median_s"] / search["median_s"], "goal_ms": GOAL_MS,
            "goal_met": search["median_s"] * 1000 <= GOAL_MS}


def report(results: dict[str, Any]) -> str:
    s, b = results["summary"], results["binlog"]
    rows = [[name, s[key]["runs"], f"{s[key]['median_s'] * 1000:.1f} ms",
             f"{s[key]['min_s'] * 1000:.1f}-{s[key]['max_s'] * 1000:.1f}"]
            for name, key in (("search (one call)", "search"), ("binlog-relay search (the command)", "command"),
                              ("mariadb-binlog --stop-datetime", "mariadb_binlog"))]
    return "\n".join([
        f"Search by time over {b['files']} files ({mib(b['bytes']):.0f} MiB, {b['transactions']:,} transactions); "
        f"relay {results['relay']['commit']}, MariaDB {results['primary']['version']}",
        table(["way", "runs", "median", "range"], rows),
        f"search {s['search']['median_s'] * 1000:.1f} ms (goal <= {GOAL_MS:.0f} ms: "
        f"{'met' if s['goal_met'] else 'NOT met'}); mariadb-binlog / search {s['ratio']:.0f}"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("search", __doc__, rounds="runs of each way per moment", workdir="/tmp/binlog-relay-bench/search",
                     timeout=3600, timeout_help="seconds the relay may take to mirror the primary",
                     primary={"size_mb": 400, "min_mb": 300, "max_binlog_size": "4M", "port": 26337,
                              "name": "benchsearch"})
    p.add_argument("--min-files", type=int, default=90, help="refuse to measure fewer binlog files")
    return parse_bench_args(p, argv)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        print(json.dumps(search_child(sys.argv[2], [int(m) for m in sys.argv[3].split(",")])))
        return 0
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())

"""Replica catch-up: a fresh MariaDB replica's IO thread fetching the whole binlog, from the relay
vs from the primary.

    python3 -m bench.catchup [--rounds 3] [--reuse] [--json PATH]

The primary is the sandbox of the other benchmarks (bench/common.py; ``--reuse`` shares it),
the relay the real program (bench/serve.py RelayProcess), which first stores the whole binlog
(not measured).  One MariaDB replica (``relay.localdb``) is pointed at each source in turn,
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
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from relay.localdb import LocalMariaDB, MariaDBNotInstalled

from .common import (GOAL_RATIO, MIB, REPL_PASSWORD, REPL_USER, BenchError, Sandbox, log, machine_info, median, mib,
                     primary_binlogs, require_programs, table)
from .ingest import EVENT_CACHE, finish_primary, prepare_primary
from .serve import PRIMARY, RELAY, RelayProcess, cpu_seconds, git_commit

POLL = 0.02
REPLICA_SERVER_ID = 3


class Replica:
    """A MariaDB replica started by relay.localdb; queried through the mariadb client, as root."""

    def __init__(self, base_dir: Path) -> None:
        self.server = LocalMariaDB(base_dir, REPLICA_SERVER_ID,
                                   extra_args=["--relay-log-space-limit=0", "--max-relay-log-size=256M"])

    def start(self) -> None:
        try:
            self.server.start()
        except MariaDBNotInstalled as missing:
            raise BenchError(str(missing)) from None

    def sql(self, query: str) -> list[list[str]]:
        return Sandbox.sql(self, query)  # type: ignore[arg-type]  # the same client call, on this port

    @property
    def port(self) -> int:
        return self.server.port

    def status(self) -> dict[str, str]:
        import subprocess

        result = subprocess.run(["mariadb", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "-E", "-e",
                                 "SHOW SLAVE STATUS"], text=True, capture_output=True)
        if result.returncode != 0:
            raise BenchError(f"SHOW SLAVE STATUS failed: {result.stderr.strip()}")
        fields = {}
        for line in result.stdout.splitlines():
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip()] = value.strip()
        return fields

    def fetch(self, port: int, first_file: str, last: tuple[str, int], timeout: float, pid: int) -> dict[str, Any]:
        self.sql("STOP SLAVE")
        self.sql("RESET SLAVE ALL")
        self.sql(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={port}, MASTER_USER='{REPL_USER}', "
                 f"MASTER_PASSWORD='{REPL_PASSWORD}', MASTER_LOG_FILE='{first_file}', MASTER_LOG_POS=4, "
                 "MASTER_USE_GTID=no, MASTER_CONNECT_RETRY=1")
        os.sync()  # the last run's relay logs are not written back during this one
        server_cpu = cpu_seconds(pid)
        replica_cpu = cpu_seconds(self.server.pid or 0)
        started = time.perf_counter()
        self.sql("START SLAVE IO_THREAD")
        deadline = started + timeout
        while True:
            status = self.status()
            if (status.get("Master_Log_File"), int(status.get("Read_Master_Log_Pos") or 0)) == last:
                seconds = time.perf_counter() - started
                break
            if status.get("Last_IO_Error"):
                raise BenchError(f"the replica's IO thread failed: {status['Last_IO_Error']}")
            if time.perf_counter() > deadline:
                raise BenchError(f"the replica did not fetch the binlog within {timeout:.0f} s: at "
                                 f"{status.get('Master_Log_File')}:{status.get('Read_Master_Log_Pos')}, want {last[0]}:{last[1]}")
            time.sleep(POLL)
        result = {"seconds": seconds, "server_cpu_s": cpu_seconds(pid) - server_cpu,
                  "replica_cpu_s": cpu_seconds(self.server.pid or 0) - replica_cpu}
        self.sql("STOP SLAVE")
        return result

    def stop(self) -> None:
        self.server.stop()


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs("mariadbd", "mariadb")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    sandbox: Sandbox | None = None
    relay: RelayProcess | None = None
    replica: Replica | None = None
    try:
        sandbox = prepare_primary(args)
        files = primary_binlogs(sandbox, cache=sandbox.dir / EVENT_CACHE)
        total = sum(f.size for f in files)
        if total < args.min_mb * MIB:
            raise BenchError(f"the binlog holds {mib(total):.0f} MiB, less than --min-mb {args.min_mb}")
        relay = RelayProcess(workdir, sandbox.port, 0, 0, "WARNING")
        relay.start()
        relay.wait_stored(files, args.timeout)
        replica = Replica(workdir / "replica")
        replica.start()
        last = (files[-1].name, files[-1].size)
        runs = []
        for round_no in range(1, args.rounds + 1):
            for source in (RELAY, PRIMARY):
                port, pid = (relay.listen_port, relay.pid) if source == RELAY else (sandbox.port, sandbox.server.pid)
                load = os.getloadavg()[0]
                record = replica.fetch(port, files[0].name, last, args.timeout, pid or 0)
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
        return {"primary": {"version": sandbox.version()}, "relay": {"commit": git_commit()},
                "binlog": {"files": len(files), "bytes": total, "mib": mib(total),
                           "events": sum(f.events for f in files)},
                "machine": machine_info(), "rounds": args.rounds, "runs": runs, "summary": summary}
    finally:
        if replica is not None:
            replica.stop()
            shutil.rmtree(workdir / "replica", ignore_errors=True)
        if relay is not None:
            relay.stop()
            shutil.rmtree(relay.data_dir, ignore_errors=True)
        finish_primary(args, sandbox)


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
        f"relay / primary = {head['ratio']:.2f} (goal >= {head['goal']:.1f}: {'met' if head['goal_met'] else 'NOT met'})",
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench.catchup", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="fetches from each source, alternating")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--reuse", action="store_true", help="reuse the sandbox primary of an earlier --reuse run")
    p.add_argument("--keep", action="store_true", help="keep the primary's directory at the end")
    p.add_argument("--size-mb", type=float, default=300, help="MiB of binlog to generate for a new primary")
    p.add_argument("--fill", choices=["sysbench", "sql"], default="sysbench",
                   help="how a new primary is filled (sql: a few plain INSERTs, for smoke runs)")
    p.add_argument("--min-mb", type=float, default=100, help="refuse to measure a smaller binlog (MiB)")
    p.add_argument("--max-binlog-size", default="128M", help="the primary's max_binlog_size")
    p.add_argument("--port", type=int, default=26316, help="the sandbox primary's port")
    p.add_argument("--name", default="benchcap", help="the sandbox's name (shared with bench.capacity)")
    p.add_argument("--sandbox-dir", default="/tmp/binlog-relay-bench/sandbox")
    p.add_argument("--workdir", default="/tmp/binlog-relay-bench/catchup", help="the relay's and the replica's dirs")
    p.add_argument("--timeout", type=float, default=900, help="seconds one fetch may take")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
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

"""Memory with one 1 GB transaction: the relay ingesting it, and the export reading it back.

    python3 -m bench.memory [--size-mb 1024] [--rounds 3] [--reuse] [--json PATH]

1. **The primary**: a sandbox MariaDB (``relay.sandbox.mariadb``) whose binlog gets one statement,
   ``INSERT ... SELECT`` of ``--size-mb`` rows of 1 MiB each into a MyISAM LONGBLOB table: one
   event group of about ``--size-mb`` MiB (the primary's max_binlog_size is raised past it).
2. **Ingest**, ``--rounds`` times alternating: the relay (``binlog-relay run``, ``sync: commit``,
   fresh data_dir) until its files are the primary's, byte for byte; and ``mariadb-binlog
   --read-from-remote-server --raw`` downloading the same files.  Peak RSS is each process's
   VmHWM (the relay's read from /proc when its copy is complete).
3. **Export**, ``--rounds`` times alternating: the pipeline's executor path
   (``relay.pipeline.source.read_partition`` over the stored file: change rows, the JSON form of
   every row image, Arrow batches, as each Spark Python worker runs it), in a child process;
   and python-mysql-replication reading the same event group from the primary (every row of the
   rows events read), in a child process.  Peak RSS is the child's VmHWM.
Goal (issue 13): the relay's peak RSS <= 200 MB in both.  The MariaDB tools' figures are the
reference for what reading the same bytes costs, not a goal.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, LocalMariaDB
from relay.sandbox.procfs import status_kib
from relay.sandbox.replication import wait_binlog_settled

from .common import (
    MARIADB_BINLOG,
    MIB,
    REPO_ROOT,
    BenchError,
    add_sandbox_options,
    bench_main,
    bench_parser,
    check_copy,
    fresh_dir,
    log,
    machine_info,
    median,
    mib,
    parse_bench_args,
    primary_binlogs,
    require_programs,
    run_measured,
    sandbox_primary,
    server_version,
    settle,
    start_bench_relay,
    stop_relay,
    table,
    wait_stored,
)
from .ingest import child_env, finish_primary

GOAL_MIB = 200 * 1e6 / MIB  # 200 MB
ROW_MIB = 1


# ================================================================ the children


def export_child(path: str) -> dict[str, Any]:
    """What one Spark worker does with the stored file, without Spark: every change row as Arrow."""
    from relay.pipeline import plan as pl
    from relay.pipeline import source

    rng = pl.FileRange(Path(path).name, path, 4, Path(path).stat().st_size)
    rows = batches = 0
    started = time.process_time()
    for batch in source.read_partition(source.BinlogPartition(rng, {}, {}, None, 4 << 20, True)):
        rows += batch.num_rows
        batches += 1
    return {"rows": rows, "batches": batches, "cpu_s": time.process_time() - started}


def mysql_replication_child(port: int, name: str) -> dict[str, Any]:
    """python-mysql-replication reading the whole file from the primary, every row decoded."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import RotateEvent
    from pymysqlreplication.row_event import RowsEvent

    stream = BinLogStreamReader(connection_settings={"host": "127.0.0.1", "port": port, "user": REPL_USER,
                                                     "password": REPL_PASSWORD},
                                server_id=4243, blocking=False, resume_stream=True, log_file=name, log_pos=4,
                                is_mariadb=False, enable_logging=False)
    rows = 0
    started = time.process_time()
    try:
        for event in stream:
            if isinstance(event, RowsEvent):
                rows += len(event.rows)
            if isinstance(event, RotateEvent) and event.next_binlog != name:
                break
    finally:
        stream.close()
    return {"rows": rows, "cpu_s": time.process_time() - started}


def child_main(args: argparse.Namespace) -> int:
    figures = (export_child(args.child_file) if args.child == "export"
               else mysql_replication_child(args.port, args.child_file))
    figures["vm_hwm_kib"] = status_kib("self", "VmHWM")
    print(json.dumps(figures))
    return 0


# ================================================================ the primary


def prepare_primary(args: argparse.Namespace) -> tuple[LocalMariaDB, str]:
    """The sandbox primary with the big transaction in a binlog file of its own; returns that file's name."""
    primary = sandbox_primary(args)
    primary.extra_args = ["--max-binlog-size=1073741824", "--max-allowed-packet=1073741824"]
    if args.reuse and primary.initialised:
        primary.start()
        files = primary.binlog_files()
        big = [name for name, size in files if size >= args.size_mb * MIB]
        if big:
            wait_binlog_settled(primary)
            log(f"--reuse: {big[-1]} holds the big transaction")
            return primary, big[-1]
    if primary.base_dir.exists():
        primary.destroy()
    primary.start()
    primary.sql("CREATE DATABASE big")
    primary.sql("CREATE TABLE big.t (id INT PRIMARY KEY, v LONGBLOB) ENGINE=MyISAM")
    primary.sql("FLUSH BINARY LOGS")
    name = primary.master_status()[0]
    log(f"writing one transaction of {args.size_mb:.0f} rows of {ROW_MIB} MiB into {name} (a minute or so)")
    rows = int(args.size_mb / ROW_MIB)
    primary.sql(f"INSERT INTO big.t SELECT seq, REPEAT(CHAR(65 + seq % 26), {ROW_MIB} * 1048576) "
                f"FROM big.seq_1_to_{rows}")
    primary.sql("FLUSH BINARY LOGS")  # the big file closed: a dump of it ends at its ROTATE
    wait_binlog_settled(primary)  # its late BINLOG_CHECKPOINT written before the files are listed
    size = dict(primary.binlog_files())[name]
    if size < args.size_mb * MIB:
        raise BenchError(f"{name} holds {mib(size):.0f} MiB, less than --size-mb {args.size_mb}")
    return primary, name


# ================================================================ the runs


class Runner:
    def __init__(self, args: argparse.Namespace, primary: LocalMariaDB, big_file: str) -> None:
        self.args = args
        self.primary = primary
        self.big_file = big_file
        self.files = primary_binlogs(primary)
        self.workdir = Path(args.workdir)
        self.stored: Path | None = None  # a relay's copy of the big file, for the export runs

    def relay_ingest(self) -> dict[str, Any]:
        settle()
        relay = start_bench_relay(self.workdir / "relay", self.args.port, sync="commit")
        try:
            seconds = wait_stored(relay, self.files, self.args.timeout)
            peak = relay.peak_rss_bytes()
        finally:
            stop_relay(relay, remove_data=False)
        check_copy(self.files, relay.data_dir)
        self.stored = fresh_dir(self.workdir / "stored") / self.big_file  # what the export runs read
        (relay.data_dir / self.big_file).replace(self.stored)
        shutil.rmtree(relay.data_dir)
        return {"phase": "ingest", "tool": "relay", "seconds": seconds, "peak_rss_mib": peak / MIB}

    def mariadb_binlog(self) -> dict[str, Any]:
        out_dir = fresh_dir(self.workdir / "mariadb-binlog")
        settle()
        run = run_measured([MARIADB_BINLOG, "--no-defaults", "--read-from-remote-server", "--raw",
                            "--host=127.0.0.1", f"--port={self.args.port}", f"--user={REPL_USER}",
                            f"--password={REPL_PASSWORD}", f"--result-file={out_dir}/", "--to-last-log",
                            self.files[0].name], timeout=self.args.timeout)
        if problem := run.failed():
            raise BenchError(f"mariadb-binlog failed: {problem}")
        check_copy(self.files, out_dir)
        return {"phase": "ingest", "tool": "mariadb-binlog --raw", "seconds": run.wall_s,
                "peak_rss_mib": run.peak_rss_kib / 1024}

    def export(self, tool: str) -> dict[str, Any]:
        if self.stored is None:
            raise BenchError("no stored copy of the big file to export")
        settle()
        which = "export" if tool == "relay" else "mysql-replication"
        target = str(self.stored) if tool == "relay" else self.big_file
        run = run_measured([sys.executable, "-m", "bench.memory", "--child", which, "--child-file", target,
                            "--port", str(self.args.port)], cwd=REPO_ROOT, env=child_env(),
                           timeout=self.args.timeout)
        if problem := run.failed():
            raise BenchError(f"the {which} child failed: {problem}")
        figures = json.loads(run.stdout.strip().splitlines()[-1])
        return {"phase": "export", "tool": tool, "seconds": run.wall_s, "cpu_s": figures["cpu_s"],
                "rows": figures["rows"], "peak_rss_mib": max(run.peak_rss_kib, figures["vm_hwm_kib"]) / 1024}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs(MARIADB_BINLOG, "mariadbd", "mariadb")
    primary: LocalMariaDB | None = None
    try:
        primary, big_file = prepare_primary(args)
        runner = Runner(args, primary, big_file)
        size = dict(primary.binlog_files())[big_file]
        runs: list[dict[str, Any]] = []
        schedule = [runner.relay_ingest, runner.mariadb_binlog, lambda: runner.export("relay"),
                    lambda: runner.export("mysql-replication")]
        for round_no in range(1, args.rounds + 1):
            for step in schedule:
                record = step()
                record["round"] = round_no
                runs.append(record)
                log(f"round {round_no}: {record['phase']} {record['tool']}: {record['seconds']:.1f} s, "
                    f"peak RSS {record['peak_rss_mib']:.0f} MiB")
        expected_rows = int(args.size_mb / ROW_MIB)
        for record in runs:
            if record["phase"] == "export" and record["rows"] != expected_rows:
                raise BenchError(f"{record['tool']} read {record['rows']} rows of the big transaction, "
                                 f"not {expected_rows}")
        return {"machine": machine_info(), "primary": {"version": server_version(primary)},
                "transaction": {"file": big_file, "bytes": size, "mib": mib(size), "rows": expected_rows},
                "rounds": args.rounds, "runs": runs, "summary": summarize(runs)}
    finally:
        finish_primary(args, primary)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for phase in ("ingest", "export"):
        tools = {}
        for tool in dict.fromkeys(r["tool"] for r in runs if r["phase"] == phase):
            mine = [r for r in runs if r["phase"] == phase and r["tool"] == tool]
            tools[tool] = {"runs": len(mine), "median_seconds": median(r["seconds"] for r in mine),
                           "max_peak_rss_mib": max(r["peak_rss_mib"] for r in mine)}
        relay_peak = tools["relay"]["max_peak_rss_mib"]
        summary[phase] = {"tools": tools, "relay_peak_rss_mib": relay_peak, "goal_mib": GOAL_MIB,
                          "goal_met": relay_peak <= GOAL_MIB}
    return summary


def report(results: dict[str, Any]) -> str:
    t = results["transaction"]
    lines = [f"Memory: one transaction of {t['mib']:.0f} MiB ({t['rows']} rows of {ROW_MIB} MiB) in "
             f"{t['file']}, MariaDB {results['primary']['version']}, {results['rounds']} rounds", ""]
    rows = []
    for phase, s in results["summary"].items():
        for tool, row in s["tools"].items():
            rows.append([phase, tool, f"{row['median_seconds']:.1f}", f"{row['max_peak_rss_mib']:.0f}"])
    lines.append(table(["phase", "tool", "median s", "peak RSS MiB (max)"], rows))
    for phase, s in results["summary"].items():
        lines.append(f"{phase}: relay peak RSS {s['relay_peak_rss_mib']:.0f} MiB "
                     f"(goal <= 200 MB = {s['goal_mib']:.0f} MiB: {'met' if s['goal_met'] else 'NOT met'})")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("memory", __doc__, workdir="/tmp/binlog-relay-bench/memory",
                     workdir_help="the relay's data_dir, config and log, and the runs' files", timeout=900)
    # its own binlog (one transaction), not prepare_primary's: the sandbox's options without the fill's
    add_sandbox_options(p, port=26326, name="benchmem", reuse_when="it holds the big transaction")
    p.add_argument("--size-mb", type=float, default=1024, help=f"the transaction's size: rows of {ROW_MIB} MiB")
    p.add_argument("--child", choices=["export", "mysql-replication"], help=argparse.SUPPRESS)
    p.add_argument("--child-file", help=argparse.SUPPRESS)
    args = parse_bench_args(p, argv)
    if args.size_mb < ROW_MIB:
        p.error(f"--size-mb must be at least {ROW_MIB}")
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report, child=child_main)


if __name__ == "__main__":
    sys.exit(main())

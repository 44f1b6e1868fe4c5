"""Ingest benchmark: the relay fetching a primary's whole binlog, side by side with
``mariadb-binlog --read-from-remote-server --raw`` downloading the same files.

    python3 -m bench.ingest [--reuse] [--keep] [--json results.json] [--size-mb 600] ...

One run on one primary: a sandbox MariaDB whose binlog holds at least ``--min-mb`` MiB
(sysbench oltp_write_only, see bench/common.py).  Then, ``--rounds`` times, in this order:
the relay with each ``--sync`` policy (the first is the headline) and mariadb-binlog,
alternating (relay, mariadb-binlog, relay sync=none, relay, ...).  Every run starts in a
fresh empty directory on the same file system, each is checked byte for byte against the
primary's files, and nothing writes to the primary meanwhile (checked at the end).

The relay runs in a child process (``--child``, see ``child_main``) so its peak RSS is its
own.  Its time is from just before it connects to the moment the committed end reaches
the primary's SHOW MASTER STATUS position (measured inside the child, polled every 5 ms);
the time of the whole child process (interpreter start, imports, close) is reported too.
mariadb-binlog's time is its whole process.  The ratio is relay MB/s over mariadb-binlog
MB/s, medians of the runs; the goal is >= 1.0 (docs/architecture.md, "Performance budget").

A third reader sets the ceiling: the discard reader (bench/rawclient.py) reads the same dump
into one buffer it throws away, so its speed is what the primary's dump thread can hand out on
this machine; the relay is also reported as a fraction of it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, LocalMariaDB
from relay.sandbox.procfs import status_kib
from relay.sandbox.relayprocess import RELAY_SERVER_ID
from relay.sandbox.replication import wait_binlog_settled

from .common import (
    GOAL_RATIO,
    MARIADB_BINLOG,
    MIB,
    REPO_ROOT,
    BenchError,
    BinlogFile,
    Measured,
    bench_main,
    bench_parser,
    binlog_bytes,
    check_copy,
    fill_sql,
    fill_sysbench,
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
    summarize_speedscope,
    table,
)
from .rawclient import parsed_download, raw_download

EVENT_CACHE = "bench-event-counts.json"
DISCARD = "discard reader"
DISCARD_SERVER_ID = 9901


# ================================================================ the relay child


def child_main(args: argparse.Namespace) -> int:
    """Ingest from the primary into ``--data-dir`` until the committed end is the target;
    print one JSON line of figures on stdout."""
    import logging

    import trio

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = trio.run(_child_ingest, args)
    result["vm_hwm_kib"] = status_kib("self", "VmHWM")
    print(json.dumps(result))
    return 0 if result["reached"] else 1


async def _child_ingest(args: argparse.Namespace) -> dict[str, Any]:
    import trio

    from relay.storage.relaylog import RelayLog
    from relay.upstream import Upstream, UpstreamSettings

    target = (args.target_file, args.target_pos)
    relay_log = RelayLog(args.data_dir, sync=args.sync)
    relay_log.open()
    upstream = Upstream(UpstreamSettings(host=args.host, port=args.port, user=REPL_USER,
                                         password=REPL_PASSWORD, relay_server_id=RELAY_SERVER_ID,
                                         heartbeat_period=5), relay_log)
    reached = False
    started = time.perf_counter()
    ingest_s = 0.0
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(upstream.run)
            with trio.move_on_after(args.timeout):
                while relay_log.committed != target:
                    await trio.sleep(args.poll)
                reached = True
            ingest_s = time.perf_counter() - started
            nursery.cancel_scope.cancel()
    finally:
        closing = time.perf_counter()
        relay_log.close()
        close_s = time.perf_counter() - closing
    stream = upstream.status.stream
    return {
        "reached": reached,
        "committed": list(relay_log.committed) if relay_log.committed else None,
        "ingest_s": ingest_s,
        "close_s": close_s,
        "bytes_written": relay_log.bytes_written,
        "bytes_received": upstream.status.bytes_received,
        "events_stored": _events_stored(stream),
        "fsyncs": relay_log.fsync_seconds.count,
        "fsync_s": relay_log.fsync_seconds.sum,
        "reconnects": upstream.status.reconnects,
        "last_error": upstream.status.last_error,
    }


def _events_stored(stream: Any) -> int | None:
    """Events the dump stream stored, from its per-type tallies (None if it keeps none)."""
    if stream is None:
        return 0
    if (counts := getattr(stream, "event_counts", None)) is not None:  # list by type
        return sum(counts)
    if (tallies := getattr(stream, "events_by_type", None)) is not None:  # type -> [count, bytes]
        return sum(count for count, _ in tallies.values())
    return None


def child_argv(args: argparse.Namespace, data_dir: Path, sync: str, target: tuple[str, int]) -> list[str]:
    return [sys.executable, "-m", "bench.ingest", "--child", "--host", "127.0.0.1",
            "--port", str(args.port), "--data-dir", str(data_dir), "--sync", sync,
            "--target-file", target[0], "--target-pos", str(target[1]),
            "--timeout", str(args.timeout), "--poll", str(args.poll)]


def child_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep + path if path else ''}"}


# ================================================================ one run of each tool


class Runner:
    def __init__(self, args: argparse.Namespace, files: list[BinlogFile], target: tuple[str, int]) -> None:
        self.args = args
        self.files = files
        self.target = target
        self.total_bytes = sum(f.size for f in files)
        self.total_events = sum(f.events for f in files)
        self.workdir = Path(args.workdir)

    def relay(self, sync: str) -> dict[str, Any]:
        data_dir = fresh_dir(self.workdir / "relay")
        settle()
        run = run_measured(child_argv(self.args, data_dir, sync, self.target), cwd=REPO_ROOT,
                           env=child_env(), timeout=self.args.timeout + 60)
        figures = _child_figures(run)
        if problem := run.failed():
            raise BenchError(f"relay ingest (sync={sync}) failed: {problem}\n{figures}")
        if figures.get("reconnects"):
            raise BenchError(f"relay ingest (sync={sync}) reconnected {figures['reconnects']} times "
                             f"({figures.get('last_error')}): not a clean run")
        if figures["events_stored"] not in (None, self.total_events):
            raise BenchError(f"relay stored {figures['events_stored']} events, the primary's files "
                             f"hold {self.total_events}")
        check_copy(self.files, data_dir)
        run.peak_rss_kib = max(run.peak_rss_kib, figures.get("vm_hwm_kib", 0))  # its own, exact
        seconds = figures["ingest_s"]
        return self._record(f"relay sync={sync}", seconds, run, extra={
            "process_s": run.wall_s, "close_s": figures["close_s"], "fsyncs": figures["fsyncs"],
            "fsync_s": figures["fsync_s"], "bytes_received": figures["bytes_received"]})

    def mariadb_binlog(self) -> dict[str, Any]:
        out_dir = fresh_dir(self.workdir / "mariadb-binlog")
        settle()
        argv = [MARIADB_BINLOG, "--no-defaults", "--read-from-remote-server", "--raw",
                "--host=127.0.0.1", f"--port={self.args.port}", f"--user={REPL_USER}",
                f"--password={REPL_PASSWORD}", f"--result-file={out_dir}/", "--to-last-log",
                self.files[0].name]
        run = run_measured(argv, timeout=self.args.timeout)
        if problem := run.failed():
            raise BenchError(f"mariadb-binlog failed: {problem}")
        check_copy(self.files, out_dir)
        return self._record("mariadb-binlog --raw", run.wall_s, run, extra={"process_s": run.wall_s})

    def discard_reader(self) -> dict[str, Any]:
        """The ceiling: one client that reads the whole dump and keeps nothing."""
        if not hasattr(self, "_wire_bytes"):  # learnt once, by a download that checks every packet
            self._wire_bytes = parsed_download(self.args.port, DISCARD_SERVER_ID)["wire_bytes"]
        settle()
        start, out = threading.Barrier(2), {}
        reader = threading.Thread(target=raw_download, args=(self.args.port, DISCARD_SERVER_ID,
                                                             self._wire_bytes, start, out), daemon=True)
        cpu_before = time.process_time()
        reader.start()
        start.wait()
        reader.join(self.args.timeout)
        if "error" in out or "end" not in out:
            raise BenchError(f"the discard reader failed: {out.get('error', 'it did not finish in time')}")
        seconds = out["end"] - out["start"]
        return {"tool": DISCARD, "seconds": seconds, "mib_per_s": mib(self.total_bytes) / seconds,
                "events_per_s": self.total_events / seconds, "cpu_user_s": time.process_time() - cpu_before,
                "cpu_sys_s": 0.0, "peak_rss_mib": 0.0, "verified": True, "process_s": seconds}

    def _record(self, tool: str, seconds: float, run: Measured, extra: dict[str, Any]) -> dict[str, Any]:
        return {
            "tool": tool,
            "seconds": seconds,
            "mib_per_s": mib(self.total_bytes) / seconds,
            "events_per_s": self.total_events / seconds,
            "cpu_user_s": run.user_s,
            "cpu_sys_s": run.sys_s,
            "peak_rss_mib": run.peak_rss_kib / 1024,
            "verified": True,
            **extra,
        }

    def clean(self) -> None:
        for sub in ("relay", "mariadb-binlog"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)


def _child_figures(run: Measured) -> dict[str, Any]:
    for line in reversed(run.stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {}


# ================================================================ profiling


def profile_relay(args: argparse.Namespace, runner: Runner, sync: str) -> dict[str, Any]:
    """One extra, untimed relay ingest under a profiler; returns its hot spots for the report."""
    data_dir = fresh_dir(runner.workdir / "relay")
    settle()
    argv = child_argv(args, data_dir, sync, runner.target)
    out = Path(args.profile_out or runner.workdir / ("profile.speedscope.json" if args.profile == "py-spy"
                                                      else "profile.pstats"))
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.profile == "py-spy":
        if not shutil.which("py-spy"):
            raise BenchError("py-spy not found: pip install py-spy")
        argv = ["py-spy", "record", "--idle", "--rate", "500", "--format", "speedscope", "-o", str(out),
                "--", *argv]
    else:
        argv = [argv[0], "-m", "cProfile", "-o", str(out), *argv[1:]]
    log(f"profiling one relay ingest (sync={sync}) with {args.profile} -> {out}")
    run = run_measured(argv, cwd=REPO_ROOT, env=child_env(), timeout=args.timeout * 5 + 60)
    if problem := run.failed():
        raise BenchError(f"profiled relay run failed: {problem}")
    figures = _child_figures(run)
    summary = (summarize_speedscope(out, "waiting included (py-spy --idle: % of wall time)")
               if args.profile == "py-spy" else summarize_pstats(out))
    return {"tool": args.profile, "sync": sync, "file": str(out), "ingest_s": figures.get("ingest_s"),
            "summary": summary}


def summarize_pstats(path: Path, top: int = 25) -> str:
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(str(path), stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


# ================================================================ the primary


def prepare_primary(args: argparse.Namespace, *, one_file: bool = False) -> LocalMariaDB:
    """The sandbox primary, started, its binlog at least --min-mb (or filled to --size-mb) and settled.
    ``one_file``: a sysbench fill stops short of the target (fill_sysbench), for a binlog that must
    stay in its first file (--max-binlog-size above --size-mb)."""
    primary = sandbox_primary(args)
    primary.extra_args = [f"--max-binlog-size={args.max_binlog_size}"]
    if args.reuse and primary.initialised:
        log(f"--reuse: starting the existing primary in {primary.base_dir}")
        primary.start()
        size = binlog_bytes(primary)
        if size >= args.min_mb * MIB:
            log(f"--reuse: its binlog holds {mib(size):.0f} MiB")
            return primary
        log(f"--reuse: its binlog holds only {mib(size):.0f} MiB < {args.min_mb} MiB; making a new one")
    if primary.base_dir.exists():
        log(f"removing the old sandbox {primary.base_dir}")
        primary.destroy()
    primary.start()
    if args.fill == "sql":  # smoke runs: no sysbench, seconds
        fill_sql(primary, args.size_mb)
    else:
        log(f"filling the binlog to {args.size_mb} MiB with sysbench oltp_write_only (a few minutes)")
        fill_sysbench(primary, args.size_mb, stop_short=one_file)
    wait_binlog_settled(primary)
    return primary


def measured_binlog(args: argparse.Namespace, primary: LocalMariaDB) -> list[BinlogFile]:
    """The primary's binlog files with their events counted (cached beside it), checked to be what
    the benchmark may measure: at least --min-mb, ending where SHOW MASTER STATUS says."""
    target = primary.master_status()
    log("counting the events of the primary's files")
    files = primary_binlogs(primary, cache=primary.base_dir / EVENT_CACHE)
    if (files[-1].name, files[-1].size) != target:
        raise BenchError(f"SHOW MASTER STATUS {target} is not the end of the last binlog "
                         f"{files[-1].name}:{files[-1].size}: is something writing to the primary?")
    total = sum(f.size for f in files)
    if total < args.min_mb * MIB:
        raise BenchError(f"the binlog holds {mib(total):.0f} MiB, less than --min-mb {args.min_mb}")
    return files


def finish_primary(args: argparse.Namespace, primary: LocalMariaDB | None) -> None:
    if primary is None:
        return
    if args.keep:
        log(f"--keep: the primary's directory stays ({primary.base_dir}); --reuse starts it again")
        primary.stop()
    elif args.reuse:
        log(f"stopping the primary; --reuse keeps {primary.base_dir} for the next run")
        primary.stop()
    else:
        primary.destroy()


# ================================================================ the benchmark


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs(MARIADB_BINLOG, "mariadbd", "mariadb")
    primary: LocalMariaDB | None = None
    runner: Runner | None = None
    try:
        primary = prepare_primary(args)
        files = measured_binlog(args, primary)
        total = sum(f.size for f in files)
        target = (files[-1].name, files[-1].size)
        runner = Runner(args, files, target)
        info = {
            "primary": {"version": server_version(primary), "host": "127.0.0.1", "port": args.port,
                        "have_ssl": primary.sql("SELECT @@have_ssl")[0][0],
                        "binlog_checksum": primary.sql("SELECT @@binlog_checksum")[0][0]},
            "binlog": {"files": [{"name": f.name, "bytes": f.size, "events": f.events} for f in files],
                       "bytes": total, "mib": mib(total), "events": runner.total_events},
            "machine": machine_info(),
            "workdir": str(runner.workdir),
            "sync_variants": args.sync,
            "rounds": args.rounds,
        }
        log(f"binlog: {len(files)} files, {mib(total):.1f} MiB, {runner.total_events:,} events; "
            f"MariaDB {info['primary']['version']}")

        schedule: list[str] = []
        for sync in args.sync:
            schedule.append(f"relay:{sync}")
            if len(schedule) == 1:
                schedule.append("mariadb-binlog")
        schedule.append(DISCARD)
        runs: list[dict[str, Any]] = []
        for round_no in range(1, args.rounds + 1):
            for item in schedule:
                log(f"round {round_no}/{args.rounds}: {item}")
                load = os.getloadavg()[0]
                if item == "mariadb-binlog":
                    record = runner.mariadb_binlog()
                elif item == DISCARD:
                    record = runner.discard_reader()
                else:
                    record = runner.relay(item.split(":", 1)[1])
                record["round"] = round_no
                record["loadavg_1m_before"] = load
                runs.append(record)
                log(f"  {record['seconds']:.2f} s, {record['mib_per_s']:.1f} MiB/s, "
                    f"{record['events_per_s'] / 1e6:.2f} M events/s, peak RSS {record['peak_rss_mib']:.0f} MiB"
                    " (verified)")
                runner.clean()

        after = primary.master_status()
        if after != target:
            raise BenchError(f"the primary was written to during the benchmark: {target} -> {after}")
        results = {**info, "runs": runs, "summary": summarize(runs, args.sync)}
        if args.profile:
            results["profile"] = profile_relay(args, runner, args.sync[0])
        return results
    finally:
        if runner is not None:
            runner.clean()
            if not args.profile:
                shutil.rmtree(runner.workdir, ignore_errors=True)
        finish_primary(args, primary)


def summarize(runs: list[dict[str, Any]], syncs: list[str]) -> dict[str, Any]:
    tools = [f"relay sync={s}" for s in syncs] + ["mariadb-binlog --raw", DISCARD]
    summary: dict[str, Any] = {"tools": {}}
    for tool in tools:
        mine = [r for r in runs if r["tool"] == tool]
        summary["tools"][tool] = {
            "runs": len(mine),
            "median_seconds": median(r["seconds"] for r in mine),
            "median_mib_per_s": median(r["mib_per_s"] for r in mine),
            "median_events_per_s": median(r["events_per_s"] for r in mine),
            "median_process_s": median(r["process_s"] for r in mine),
            "median_cpu_s": median(r["cpu_user_s"] + r["cpu_sys_s"] for r in mine),
            "max_peak_rss_mib": max(r["peak_rss_mib"] for r in mine),
        }
    reference = summary["tools"]["mariadb-binlog --raw"]
    ceiling = summary["tools"][DISCARD]
    for tool in tools[:-2]:
        entry = summary["tools"][tool]
        entry["ratio"] = entry["median_mib_per_s"] / reference["median_mib_per_s"]
        entry["ratio_whole_process"] = reference["median_process_s"] / entry["median_process_s"]
        entry["of_ceiling"] = entry["median_mib_per_s"] / ceiling["median_mib_per_s"]
    reference["of_ceiling"] = reference["median_mib_per_s"] / ceiling["median_mib_per_s"]
    headline = summary["tools"][tools[0]]
    summary["headline"] = {"tool": tools[0], "ratio": headline["ratio"], "goal": GOAL_RATIO,
                           "goal_met": headline["ratio"] >= GOAL_RATIO, "of_ceiling": headline["of_ceiling"]}
    return summary


def report(results: dict[str, Any]) -> str:
    binlog = results["binlog"]
    primary = results["primary"]
    lines = [
        f"Ingest benchmark: MariaDB {primary['version']} on 127.0.0.1:{primary['port']}, binlog of "
        f"{len(binlog['files'])} files, {binlog['mib']:.1f} MiB ({binlog['bytes']:,} bytes), "
        f"{binlog['events']:,} events, checksum {primary['binlog_checksum']}; "
        f"{results['machine']['cpus']} CPUs, load {results['machine']['loadavg'][0]:.2f} at start; "
        f"relay loops: {results['machine']['relay_loops']}",
        "",
        "Runs (every copy checked byte for byte against the primary's files):",
        table(["round", "tool", "seconds", "MiB/s", "M events/s", "process s", "CPU usr+sys s",
               "peak RSS MiB"],
              [[r["round"], r["tool"], f"{r['seconds']:.2f}", f"{r['mib_per_s']:.1f}",
                f"{r['events_per_s'] / 1e6:.3f}", f"{r['process_s']:.2f}",
                f"{r['cpu_user_s']:.2f}+{r['cpu_sys_s']:.2f}", f"{r['peak_rss_mib']:.0f}"]
               for r in results["runs"]]),
        "",
        f"Medians of {results['rounds']} runs each (ratio = relay MiB/s / mariadb-binlog MiB/s; "
        "whole-process ratio uses process wall times):",
    ]
    rows = []
    for tool, s in results["summary"]["tools"].items():
        reference = "1.00 (ref)" if tool.startswith("mariadb-binlog") else "-"
        rows.append([tool, f"{s['median_seconds']:.2f}", f"{s['median_mib_per_s']:.1f}",
                     f"{s['median_events_per_s'] / 1e6:.3f}", f"{s['median_cpu_s']:.2f}",
                     f"{s['max_peak_rss_mib']:.0f}" if s["max_peak_rss_mib"] else "-",
                     f"{s['ratio']:.2f}" if "ratio" in s else reference,
                     f"{s['ratio_whole_process']:.2f}" if "ratio" in s else "-",
                     f"{s['of_ceiling']:.2f}" if "of_ceiling" in s else "1.00 (ceiling)"])
    lines.append(table(["tool", "seconds", "MiB/s", "M events/s", "CPU s", "peak RSS MiB", "ratio",
                        "ratio (process)", "of ceiling"], rows))
    head = results["summary"]["headline"]
    lines += ["", f"Headline: {head['tool']} / mariadb-binlog --raw = {head['ratio']:.2f} "
              f"(goal >= {head['goal']:.1f}: {'met' if head['goal_met'] else 'NOT met'}); "
              f"{head['of_ceiling']:.2f} of what the discard reader gets from the same dump thread "
              "(its CPU is this process's, not a server's)"]
    if profile := results.get("profile"):
        lines += ["", f"Profile of one more relay ingest (sync={profile['sync']}, {profile['tool']}; "
                  f"{profile['ingest_s']:.2f} s under the profiler): {profile['file']}", profile["summary"]]
    return "\n".join(lines)


# ================================================================ command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("ingest", __doc__, workdir="/tmp/binlog-relay-bench/work",
                     workdir_help="where the downloads go (one fresh directory per run)", timeout=600,
                     primary={"size_mb": 600, "min_mb": 500, "max_binlog_size": "256M", "port": 26306,
                              "name": "benchp"})
    p.add_argument("--sync", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   default="commit,none",
                   help="relay storage.sync policies to run, comma-separated; the first is the headline")
    p.add_argument("--poll", type=float, default=0.005, help=argparse.SUPPRESS)
    p.add_argument("--profile", choices=["py-spy", "cprofile"],
                   help="after the timed runs, profile one more relay ingest and print the hot spots")
    p.add_argument("--profile-out", metavar="PATH", help="where the profile goes (None: a file in --workdir)")
    # The relay child (internal).
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--target-file", help=argparse.SUPPRESS)
    p.add_argument("--target-pos", type=int, help=argparse.SUPPRESS)
    args = parse_bench_args(p, argv)
    if args.child:
        args.sync = args.sync[0]
        return args
    bad = [s for s in args.sync if s not in ("commit", "interval", "none")]
    if bad or not args.sync:
        p.error(f"--sync: policies are commit, interval, none (got {args.sync})")
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report, child=child_main)


if __name__ == "__main__":
    sys.exit(main())

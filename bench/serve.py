"""Serve benchmark: ``mariadb-binlog --read-from-remote-server --raw`` downloading a whole
binlog from the relay, side by side with the same download from the primary, and many
such downloads from each at once.

    python3 -m bench.serve [--reuse] [--keep] [--json results.json] [--clients 20] ...

One run on one primary: the sandbox MariaDB of the ingest benchmark (bench/common.py,
``--reuse`` shares it), whose binlog holds at least ``--min-mb`` MiB.  The relay runs as
the real program (``python3 -m relay.cli run``, relay.sandbox.relayprocess) replicating from
it and first stores the whole binlog (not measured; its copy is checked byte for byte).  Then:

1. ``--rounds`` times, alternating: one download from the relay, one from the primary.
2. ``--concurrent-rounds`` times: ``--clients`` downloads started together from the relay,
   then the same from the primary (``--no-primary-concurrent`` skips the latter).

Every download goes into a fresh empty directory and is checked byte for byte against the
primary's files.  Times are whole mariadb-binlog processes (spawn to exit; for concurrent
downloads, from the first spawn to the last exit).  The relay's peak RSS is its VmHWM,
reset (``/proc/PID/clear_refs``) before each run; its CPU time is read from /proc.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.sandbox.mariadb import REPL_PASSWORD, REPL_USER, LocalMariaDB
from relay.sandbox.procfs import status_kib
from relay.sandbox.relayprocess import RelayProcess

from .common import (
    GOAL_RATIO,
    MARIADB_BINLOG,
    PRIMARY,
    RELAY,
    BenchError,
    BinlogFile,
    bench_main,
    bench_parser,
    check_copy,
    cpu_seconds,
    fresh_dir,
    git_commit,
    log,
    machine_info,
    median,
    mib,
    parse_bench_args,
    require_programs,
    reset_peak_rss,
    run_measured,
    running_pid,
    server_version,
    settle,
    start_bench_relay,
    stop_relay,
    summarize_speedscope,
    table,
    wait_stored,
)
from .ingest import finish_primary, measured_binlog, prepare_primary


def dirty_mib() -> float:
    """Dirty + Writeback page cache (MiB): how much of the downloads the disk still owes."""
    total = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith(("Dirty:", "Writeback:")):
                total += int(line.split()[1])
    return total / 1024


# ================================================================ downloads


def download_argv(port: int, out_dir: Path, first_file: str) -> list[str]:
    return [MARIADB_BINLOG, "--no-defaults", "--read-from-remote-server", "--raw", "--host=127.0.0.1",
            f"--port={port}", f"--user={REPL_USER}", f"--password={REPL_PASSWORD}",
            f"--result-file={out_dir}/", "--to-last-log", first_file]


@dataclass
class Client:
    """One mariadb-binlog of a concurrent run."""

    proc: subprocess.Popen[bytes]
    out_dir: Path
    log_path: Path
    finished: float = 0.0
    returncode: int | None = None
    user_s: float = 0.0
    sys_s: float = 0.0


class Servers:
    """The two sources, and what is measured of their processes during a run."""

    def __init__(self, relay: RelayProcess, primary: LocalMariaDB) -> None:
        self.relay = relay
        self.primary = primary

    def port(self, source: str) -> int:
        return self.relay.port if source == RELAY else self.primary.port

    def pid(self, source: str) -> int:
        return running_pid(self.relay.pid if source == RELAY else self.primary.pid, source)


class Runner:
    def __init__(self, args: argparse.Namespace, files: list[BinlogFile], servers: Servers) -> None:
        self.args = args
        self.files = files
        self.servers = servers
        self.total_bytes = sum(f.size for f in files)
        self.total_events = sum(f.events for f in files)
        self.downloads = Path(args.workdir) / "downloads"

    # ------------------------------------------------------------ one download

    def single(self, source: str) -> dict[str, Any]:
        out_dir = fresh_dir(self.downloads / source)
        settle()
        server_pid = self.servers.pid(source)
        self.servers.relay.check_alive()
        reset_peak_rss(self.servers.relay.pid)
        cpu_before = cpu_seconds(server_pid)
        run = run_measured(download_argv(self.servers.port(source), out_dir, self.files[0].name),
                           timeout=self.args.timeout, rss_poll=0.05)
        server_cpu = cpu_seconds(server_pid) - cpu_before
        if problem := run.failed():
            raise BenchError(f"mariadb-binlog from the {source} failed: {problem}")
        check_copy(self.files, out_dir)
        shutil.rmtree(out_dir)
        return {
            "source": source,
            "seconds": run.wall_s,
            "mib_per_s": mib(self.total_bytes) / run.wall_s,
            "events_per_s": self.total_events / run.wall_s,
            "client_cpu_user_s": run.user_s,
            "client_cpu_sys_s": run.sys_s,
            "client_peak_rss_mib": run.peak_rss_kib / 1024,
            "server_cpu_s": server_cpu,
            "relay_peak_rss_mib": status_kib(self.servers.relay.pid, "VmHWM") / 1024 if source == RELAY else None,
            "verified": True,
        }

    # ------------------------------------------------------------ many at once

    def concurrent(self, source: str, clients: int, verify: bool = True) -> dict[str, Any]:
        base = fresh_dir(self.downloads / f"{source}-concurrent")
        dirs = [base / f"client-{n:02d}" for n in range(1, clients + 1)]
        for d in dirs:
            d.mkdir()
        settle()
        server_pid = self.servers.pid(source)
        self.servers.relay.check_alive()
        reset_peak_rss(self.servers.relay.pid)
        cpu_before = cpu_seconds(server_pid)
        port = self.servers.port(source)
        running: list[Client] = []
        dirty = [dirty_mib()]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.wait(0.1):
                dirty.append(dirty_mib())

        sampler = threading.Thread(target=sample, daemon=True)
        started = time.perf_counter()
        try:
            for d in dirs:
                log_path = d.parent / f"{d.name}.log"
                with open(log_path, "wb") as out:
                    proc = subprocess.Popen(download_argv(port, d, self.files[0].name), stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT)
                running.append(Client(proc, d, log_path))
            spawned = time.perf_counter() - started
            sampler.start()
            waiters = [threading.Thread(target=_reap, args=(c,), daemon=True) for c in running]
            for w in waiters:
                w.start()
            deadline = started + self.args.timeout
            for w in waiters:
                w.join(max(0.0, deadline - time.perf_counter()))
            timed_out = [c for c in running if c.returncode is None]
        finally:
            for c in running:
                if c.returncode is None and c.proc.poll() is None:
                    c.proc.kill()
            sampling.set()
        server_cpu = cpu_seconds(server_pid) - cpu_before
        relay_peak = status_kib(self.servers.relay.pid, "VmHWM") / 1024 if source == RELAY else None
        if timed_out:
            raise BenchError(f"{len(timed_out)} of {clients} downloads from the {source} took longer than "
                             f"--timeout {self.args.timeout:.0f} s")
        failed = [c for c in running if c.returncode != 0]
        if failed:
            tail = failed[0].log_path.read_text(errors="replace")[-1500:]
            raise BenchError(f"{len(failed)} of {clients} downloads from the {source} failed; the first "
                             f"(exit {failed[0].returncode}):\n{tail}")
        wall = max(c.finished for c in running) - started
        durations = sorted(c.finished - started for c in running)
        if verify:
            log(f"  checking the {clients} copies byte for byte")
            for c in running:
                check_copy(self.files, c.out_dir)
        shutil.rmtree(base)
        return {
            "source": source,
            "clients": clients,
            "seconds": wall,
            "spawn_s": spawned,
            "first_done_s": durations[0],
            "median_client_s": median(durations),
            "aggregate_mib_per_s": clients * mib(self.total_bytes) / wall,
            "per_client_mib_per_s": mib(self.total_bytes) / median(durations),
            "clients_cpu_user_s": sum(c.user_s for c in running),
            "clients_cpu_sys_s": sum(c.sys_s for c in running),
            "server_cpu_s": server_cpu,
            "relay_peak_rss_mib": relay_peak,
            "max_dirty_writeback_mib": max(dirty),
            "verified": verify,
        }

    def clean(self) -> None:
        shutil.rmtree(self.downloads, ignore_errors=True)


def _reap(client: Client) -> None:
    _, status, usage = os.wait4(client.proc.pid, 0)
    client.finished = time.perf_counter()
    client.returncode = os.waitstatus_to_exitcode(status)
    client.proc.returncode = client.returncode  # reaped here, not by Popen
    client.user_s, client.sys_s = usage.ru_utime, usage.ru_stime


# ================================================================ profiling


def profile_relay(args: argparse.Namespace, runner: Runner) -> dict[str, Any]:
    """One more (untimed) run of ``--profile-clients`` downloads from the relay while py-spy
    samples the relay process; returns its hot spots."""
    if not shutil.which("py-spy"):
        raise BenchError("py-spy not found: pip install py-spy")
    out = Path(args.profile_out or Path(args.workdir) / "serve-profile.speedscope.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    pid = runner.servers.relay.pid
    argv = ["py-spy", "record", "--pid", str(pid), "--rate", str(args.profile_rate), "--format", "speedscope",
            "-o", str(out)]
    log(f"profiling the relay (pid {pid}) serving {args.profile_clients} download(s) with py-spy -> {out}")
    spy_log = Path(args.workdir) / "py-spy.log"
    with open(spy_log, "wb") as spy_out:
        spy = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=spy_out, stderr=subprocess.STDOUT)
    try:
        time.sleep(1.0)  # py-spy attaches
        if spy.poll() is not None:
            raise BenchError(f"py-spy exited at once:\n{spy_log.read_text(errors='replace')[-1500:]}")
        if args.profile_clients == 1:
            record = runner.single(RELAY)
        else:
            record = runner.concurrent(RELAY, args.profile_clients)
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            spy.wait(60)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(10)
    if not out.exists():
        raise BenchError(f"py-spy wrote no profile:\n{spy_log.read_text(errors='replace')[-1500:]}")
    return {"tool": "py-spy", "rate": args.profile_rate, "clients": args.profile_clients, "file": str(out),
            "seconds": record["seconds"], "relay_cpu_s": record["server_cpu_s"],
            "summary": summarize_speedscope(out, "of the relay not idle (running or runnable)")}


# ================================================================ the benchmark


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    require_programs(MARIADB_BINLOG, "mariadbd", "mariadb")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    primary: LocalMariaDB | None = None
    relay: RelayProcess | None = None
    runner: Runner | None = None
    try:
        primary = prepare_primary(args)
        files = measured_binlog(args, primary)
        total = sum(f.size for f in files)
        target = (files[-1].name, files[-1].size)

        log("starting the relay (storage.sync none); it stores the whole binlog first (not measured)")
        relay = start_bench_relay(workdir, args.port, log_level=args.relay_log_level, listen_port=args.relay_port,
                                  metrics_port=args.metrics_port)
        log(f"the relay listens on 127.0.0.1:{relay.port}, metrics on :{relay.metrics_port}")
        ingest_s = wait_stored(relay, files, args.timeout)
        check_copy(files, relay.data_dir)  # also brings both copies into the page cache
        ingest_peak = status_kib(relay.pid, "VmHWM") / 1024
        idle_rss = status_kib(relay.pid, "VmRSS") / 1024
        log(f"the relay stored {mib(total):.1f} MiB in {ingest_s:.1f} s (checked byte for byte); "
            f"RSS {idle_rss:.0f} MiB, peak so far {ingest_peak:.0f} MiB")
        if not reset_peak_rss(relay.pid):
            log("warning: cannot reset the relay's VmHWM (/proc/PID/clear_refs); its peak RSS includes the ingest")

        servers = Servers(relay, primary)
        runner = Runner(args, files, servers)
        info = {
            "primary": {"version": server_version(primary), "host": "127.0.0.1", "port": args.port,
                        "binlog_checksum": primary.sql("SELECT @@binlog_checksum")[0][0]},
            "binlog": {"files": [{"name": f.name, "bytes": f.size, "events": f.events} for f in files],
                       "bytes": total, "mib": mib(total), "events": runner.total_events},
            "relay": {"commit": git_commit(), "port": relay.port, "pid": relay.pid,
                      "config": {k: v for k, v in relay.config.items() if k not in ("users", "upstream")},
                      "ingest_s": ingest_s, "ingest_peak_rss_mib": ingest_peak, "idle_rss_mib": idle_rss},
            "machine": machine_info(),
            "workdir": str(workdir),
            "rounds": args.rounds,
            "clients": args.clients,
            "concurrent_rounds": args.concurrent_rounds,
        }
        log(f"binlog: {len(files)} files, {mib(total):.1f} MiB, {runner.total_events:,} events; "
            f"MariaDB {info['primary']['version']}; relay at {info['relay']['commit']}")

        single: list[dict[str, Any]] = []
        for round_no in range(1, args.rounds + 1):
            for source in (RELAY, PRIMARY):
                log(f"round {round_no}/{args.rounds}: one download from the {source}")
                load = os.getloadavg()[0]
                record = runner.single(source)
                record.update(round=round_no, loadavg_1m_before=load)
                single.append(record)
                rss = f", relay peak RSS {record['relay_peak_rss_mib']:.0f} MiB" if source == RELAY else ""
                log(f"  {record['seconds']:.2f} s, {record['mib_per_s']:.1f} MiB/s, server CPU "
                    f"{record['server_cpu_s']:.2f} s{rss} (verified)")

        concurrent: list[dict[str, Any]] = []
        sources = (RELAY,) if args.no_primary_concurrent else (RELAY, PRIMARY)
        for round_no in range(1, args.concurrent_rounds + 1):
            for source in sources:
                log(f"concurrent {round_no}/{args.concurrent_rounds}: {args.clients} downloads at once "
                    f"from the {source}")
                load = os.getloadavg()[0]
                record = runner.concurrent(source, args.clients)
                record.update(round=round_no, loadavg_1m_before=load)
                concurrent.append(record)
                rss = f", relay peak RSS {record['relay_peak_rss_mib']:.0f} MiB" if source == RELAY else ""
                log(f"  {record['seconds']:.2f} s, aggregate {record['aggregate_mib_per_s']:.1f} MiB/s, "
                    f"server CPU {record['server_cpu_s']:.2f} s{rss} (verified)")

        after = primary.master_status()
        if after != target:
            raise BenchError(f"the primary was written to during the benchmark: {target} -> {after}")
        results = {**info, "single": single, "concurrent": concurrent,
                   "summary": summarize(single, concurrent)}
        if args.profile:
            results["profile"] = profile_relay(args, runner)
        results["relay"]["exit_rss_mib"] = status_kib(relay.pid, "VmRSS") / 1024
        return results
    finally:
        if runner is not None:
            runner.clean()
        stop_relay(relay)
        finish_primary(args, primary)
        if primary is not None and args.destroy and not args.keep:
            log(f"--destroy: removing {primary.base_dir}")
            primary.destroy()


def summarize(single: list[dict[str, Any]], concurrent: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"single": {}, "concurrent": {}}
    for source in (RELAY, PRIMARY):
        mine = [r for r in single if r["source"] == source]
        summary["single"][source] = {
            "runs": len(mine),
            "median_seconds": median(r["seconds"] for r in mine),
            "median_mib_per_s": median(r["mib_per_s"] for r in mine),
            "median_events_per_s": median(r["events_per_s"] for r in mine),
            "median_client_cpu_s": median(r["client_cpu_user_s"] + r["client_cpu_sys_s"] for r in mine),
            "median_server_cpu_s": median(r["server_cpu_s"] for r in mine),
            "max_relay_peak_rss_mib": max((r["relay_peak_rss_mib"] or 0 for r in mine), default=0) or None,
        }
        many = [r for r in concurrent if r["source"] == source]
        if many:
            summary["concurrent"][source] = {
                "runs": len(many),
                "clients": many[0]["clients"],
                "median_seconds": median(r["seconds"] for r in many),
                "median_aggregate_mib_per_s": median(r["aggregate_mib_per_s"] for r in many),
                "median_server_cpu_s": median(r["server_cpu_s"] for r in many),
                "max_relay_peak_rss_mib": max((r["relay_peak_rss_mib"] or 0 for r in many), default=0) or None,
            }
    relay, primary = summary["single"][RELAY], summary["single"][PRIMARY]
    relay["ratio"] = relay["median_mib_per_s"] / primary["median_mib_per_s"]
    if PRIMARY in summary["concurrent"] and RELAY in summary["concurrent"]:
        c_relay, c_primary = summary["concurrent"][RELAY], summary["concurrent"][PRIMARY]
        c_relay["ratio"] = c_relay["median_aggregate_mib_per_s"] / c_primary["median_aggregate_mib_per_s"]
    summary["headline"] = {"ratio": relay["ratio"], "goal": GOAL_RATIO, "goal_met": relay["ratio"] >= GOAL_RATIO}
    return summary


def _rss(value: float | None) -> str:
    return f"{value:.0f}" if value else "-"


def report(results: dict[str, Any]) -> str:
    binlog, primary, relay = results["binlog"], results["primary"], results["relay"]
    lines = [
        f"Serve benchmark: mariadb-binlog --raw --to-last-log from the relay ({relay['commit']}) and from "
        f"MariaDB {primary['version']}; binlog of {len(binlog['files'])} files, {binlog['mib']:.1f} MiB "
        f"({binlog['bytes']:,} bytes), {binlog['events']:,} events, checksum {primary['binlog_checksum']}; "
        f"{results['machine']['cpus']} CPUs, load {results['machine']['loadavg'][0]:.2f} at start; "
        f"relay loops: {results['machine']['relay_loops']}",
        f"Relay: stored the binlog in {relay['ingest_s']:.1f} s before the runs (not measured), peak RSS "
        f"{relay['ingest_peak_rss_mib']:.0f} MiB then, {relay['idle_rss_mib']:.0f} MiB idle",
        "",
        "Single downloads (alternating; every copy checked byte for byte against the primary's files):",
        table(["round", "source", "seconds", "MiB/s", "M events/s", "client CPU usr+sys s", "server CPU s",
               "relay peak RSS MiB", "load"],
              [[r["round"], r["source"], f"{r['seconds']:.2f}", f"{r['mib_per_s']:.1f}",
                f"{r['events_per_s'] / 1e6:.3f}", f"{r['client_cpu_user_s']:.2f}+{r['client_cpu_sys_s']:.2f}",
                f"{r['server_cpu_s']:.2f}", _rss(r["relay_peak_rss_mib"]), f"{r['loadavg_1m_before']:.2f}"]
               for r in results["single"]]),
    ]
    if results["concurrent"]:
        lines += ["", "Concurrent downloads (all started together; aggregate = clients x binlog / time to the "
                  "last exit; every copy checked):",
                  table(["round", "source", "clients", "seconds", "aggregate MiB/s", "first done s",
                         "median client s", "clients CPU s", "server CPU s", "relay peak RSS MiB",
                         "max dirty MiB", "load"],
                        [[r["round"], r["source"], r["clients"], f"{r['seconds']:.2f}",
                          f"{r['aggregate_mib_per_s']:.1f}", f"{r['first_done_s']:.2f}",
                          f"{r['median_client_s']:.2f}", f"{r['clients_cpu_user_s'] + r['clients_cpu_sys_s']:.2f}",
                          f"{r['server_cpu_s']:.2f}", _rss(r["relay_peak_rss_mib"]),
                          f"{r['max_dirty_writeback_mib']:.0f}", f"{r['loadavg_1m_before']:.2f}"]
                         for r in results["concurrent"]])]
    summary = results["summary"]
    rows = []
    for source, s in summary["single"].items():
        rows.append([f"{source}, 1 download", s["runs"], f"{s['median_seconds']:.2f}", f"{s['median_mib_per_s']:.1f}",
                     f"{s['median_server_cpu_s']:.2f}", _rss(s["max_relay_peak_rss_mib"]),
                     f"{s['ratio']:.2f}" if "ratio" in s else "1.00 (ref)"])
    reference = "1.00 (ref)" if len(summary["concurrent"]) > 1 else "-"
    for source, s in summary["concurrent"].items():
        rows.append([f"{source}, {s['clients']} at once", s["runs"], f"{s['median_seconds']:.2f}",
                     f"{s['median_aggregate_mib_per_s']:.1f}", f"{s['median_server_cpu_s']:.2f}",
                     _rss(s["max_relay_peak_rss_mib"]), f"{s['ratio']:.2f}" if "ratio" in s else reference])
    lines += ["", "Medians (MiB/s: aggregate for concurrent runs; ratio = relay MiB/s / primary MiB/s):",
              table(["", "runs", "seconds", "MiB/s", "server CPU s", "relay peak RSS MiB", "ratio"], rows)]
    head = summary["headline"]
    lines += ["", f"Headline: one download, relay / primary = {head['ratio']:.2f} "
              f"(goal >= {head['goal']:.1f}: {'met' if head['goal_met'] else 'NOT met'})"]
    if profile := results.get("profile"):
        lines += ["", f"Profile of the relay serving {profile['clients']} more download(s) (py-spy, "
                  f"{profile['rate']} Hz; {profile['seconds']:.2f} s under the profiler, relay CPU "
                  f"{profile['relay_cpu_s']:.2f} s): {profile['file']}", profile["summary"]]
    return "\n".join(lines)


# ================================================================ command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = bench_parser("serve", __doc__, rounds="single downloads from each source, alternating",
                     workdir="/tmp/binlog-relay-bench/serve",
                     workdir_help="the relay's data_dir, config and log, and the downloads (one fresh directory "
                                  "each; a concurrent run needs clients x binlog size of free space)", timeout=600,
                     primary={"size_mb": 600, "min_mb": 500, "max_binlog_size": "256M", "port": 26306,
                              "name": "benchp"})
    p.add_argument("--destroy", action="store_true",
                   help="destroy the sandbox at the end even with --reuse (scripts/bench.sh all uses this "
                        "to share one primary between the benchmarks)")
    p.add_argument("--clients", type=int, default=20, help="downloads at once in a concurrent run")
    p.add_argument("--concurrent-rounds", type=int, default=1,
                   help="concurrent runs from each source (0: none)")
    p.add_argument("--no-primary-concurrent", action="store_true",
                   help="concurrent runs from the relay only (no reference from the primary)")
    p.add_argument("--relay-port", type=int, default=0, help="the relay's listen port (0: a free one)")
    p.add_argument("--metrics-port", type=int, default=0, help="the relay's metrics port (0: a free one)")
    p.add_argument("--relay-log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="the relay's logging.level (its log is WORKDIR/relay.log)")
    p.add_argument("--profile", choices=["py-spy"],
                   help="after the timed runs, profile the relay serving one more download and print the hot spots")
    p.add_argument("--profile-out", metavar="PATH",
                   help="where the speedscope profile goes (None: WORKDIR/serve-profile.speedscope.json)")
    p.add_argument("--profile-clients", type=int, default=1, help="downloads at once in the profiled run")
    p.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    args = parse_bench_args(p, argv)
    if args.clients < 1 or args.concurrent_rounds < 0 or args.profile_clients < 1:
        p.error("--clients and --profile-clients must be at least 1, --concurrent-rounds at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, parse_args, run_benchmark, report)


if __name__ == "__main__":
    sys.exit(main())

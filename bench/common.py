"""Shared helpers for the benchmarks: filling the sandbox primary, binlog walking and checking,
the relay child's progress, measured child processes, /proc figures, profiles, statistics and
tables.

The primary is a throw-away MariaDB server started by the project's own launcher
(``relay.sandbox.mariadb``, the one the tests and the demo use) and filled by sysbench
oltp_write_only; the relay is ``binlog-relay run`` in a child process
(``relay.sandbox.relayprocess``).  Everything here is synchronous; of the relay, the benchmark's
parent process imports only the sandbox (stdlib and the sans-IO protocol client), never the code
it measures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import mmap
import os
import platform
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.sandbox.binlogfiles import BINLOG_MAGIC, HEADER_LEN
from relay.sandbox.compare import mirror_file_differences
from relay.sandbox.errors import SandboxError, WaitTimeout
from relay.sandbox.mariadb import LocalMariaDB
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.sandbox.procfs import status_kib
from relay.sandbox.relayprocess import RELAY_SERVER_ID, RelayProcess, http_get, start_relay

REPO_ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20

MARIADB_BINLOG = "mariadb-binlog"
PRIMARY_SERVER_ID = 1
RELAY = "relay"
PRIMARY = "primary"
GOAL_RATIO = 1.0  # docs/architecture.md: the relay must never be the slowest link
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_LENGTH = struct.Struct("<I")


class BenchError(Exception):
    """The benchmark cannot go on (or its result would be wrong); the message says why."""


# What ends a benchmark with its message rather than a traceback: its own errors, and the sandbox's
# (a server that does not start, a relay that exits, a wait past its deadline).
STOPS_A_BENCHMARK = (BenchError, SandboxError)


def run_main(run: Callable[[], dict[str, Any]], finish: Callable[[dict[str, Any]], None]) -> int:
    """A benchmark's command line: ``run`` it, then ``finish`` with its results (print, write).  1 with
    the reason when it cannot go on, 130 when interrupted; SIGTERM interrupts as Ctrl-C does, so that
    the relay and the primary are stopped on the way out."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        results = run()
    except STOPS_A_BENCHMARK as exc:
        log(f"benchmark failed: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finish(results)
    return 0


def print_results(args: argparse.Namespace, report: Callable[[dict[str, Any]], str], results: dict[str, Any]) -> None:
    """The report on stdout, and the results as JSON in ``--json`` when given."""
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        log(f"results written to {args.json}")


Results = dict[str, Any]


def bench_main(argv: list[str] | None, parse_args: Callable[[list[str] | None], argparse.Namespace],
               run_benchmark: Callable[[argparse.Namespace], Results], report: Callable[[Results], str],
               child: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Every benchmark's ``main``: parse its command line (its ``parse_args``, which bench/suite.py
    calls too), then ``run_main`` its ``run_benchmark`` and ``print_results`` with its ``report``.
    ``child``: the benchmark's measured child process (``--child``, internal), run instead."""
    args = parse_args(argv)
    if child is not None and getattr(args, "child", None):
        return child(args)
    return run_main(lambda: run_benchmark(args), lambda results: print_results(args, report, results))


def bench_parser(module: str, doc: str | None, *, rounds: str | None = "runs of each tool, alternating",
                 workdir: str | None = None, workdir_help: str = "the relay's data_dir, config, log",
                 timeout: float | None = None, timeout_help: str = "seconds one run may take",
                 keep: str | None = None, primary: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    """The command line every benchmark starts from (``python3 -m bench.MODULE``, described by the first
    paragraph of its docstring ``doc``), with the options they share; each adds its own after.

    Always ``--json PATH``.  ``rounds``: the help of ``--rounds N`` (default 3, at least 1: see
    ``parse_bench_args``; None: no such option).  ``workdir``: the default of ``--workdir``;
    ``timeout``: of ``--timeout`` (seconds).  ``primary``: the defaults of the sandbox primary's
    options (``add_primary_options``: size_mb, min_mb, max_binlog_size, port, name), which include
    ``--keep``; otherwise ``keep``: the help of a ``--keep`` of the benchmark's own."""
    parser = argparse.ArgumentParser(prog=f"python3 -m bench.{module}", description=(doc or "").split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    if primary is not None:
        add_primary_options(parser, **primary)
    elif keep is not None:
        parser.add_argument("--keep", action="store_true", help=keep)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    if rounds is not None:
        parser.add_argument("--rounds", type=int, default=3, help=rounds)
    if workdir is not None:
        parser.add_argument("--workdir", default=workdir, help=workdir_help)
    if timeout is not None:
        parser.add_argument("--timeout", type=float, default=timeout, help=timeout_help)
    return parser


def parse_bench_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser``'s arguments, ``--rounds`` (when it has one) checked to be at least 1; an error ends
    the program with the usage, as argparse's own errors do."""
    args = parser.parse_args(argv)
    if getattr(args, "rounds", 1) < 1:
        parser.error("--rounds must be at least 1")
    return args


def int_list(text: str) -> list[int]:
    """An option's comma-separated whole numbers (client counts): ``"1,10,50"`` -> [1, 10, 50]."""
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)



def require_programs(*names: str) -> None:
    missing = [n for n in names if not (shutil.which(n) or Path("/usr/sbin", n).exists())]
    if missing:
        raise BenchError(f"missing programs: {', '.join(missing)} "
                         "(apt-get install mariadb-server mariadb-client sysbench)")


# ---------------------------------------------------------------- the sandbox primary


def sandbox_primary(args: Any) -> LocalMariaDB:
    """The benchmarks' primary: a LocalMariaDB in SANDBOX_DIR/NAME on --port.  Its directory stays
    between runs (``--reuse``); the server never outlives the benchmark."""
    return LocalMariaDB(Path(args.sandbox_dir) / args.name, PRIMARY_SERVER_ID, args.port)


def add_sandbox_options(parser: argparse.ArgumentParser, *, port: int, name: str,
                        reuse_when: str = "its binlog is big enough") -> None:
    """Where the sandbox primary lives and whether it outlives the run: --reuse, --keep, --port,
    --name, --sandbox-dir (``sandbox_primary`` reads them)."""
    parser.add_argument("--reuse", action="store_true",
                        help=f"reuse the sandbox primary of an earlier --reuse run if {reuse_when}, "
                             "and keep its directory (server stopped) for the next one")
    parser.add_argument("--keep", action="store_true",
                        help="keep the primary's directory at the end (the server stops)")
    parser.add_argument("--port", type=int, default=port, help="the sandbox primary's port")
    parser.add_argument("--name", default=name, help="the sandbox's name (benchmarks with the same name share it)")
    parser.add_argument("--sandbox-dir", default="/tmp/binlog-relay-bench/sandbox",
                        help="where the primary's directory (my.cnf, data/) lives")


def add_primary_options(parser: argparse.ArgumentParser, *, size_mb: float, min_mb: float, max_binlog_size: str,
                        port: int, name: str) -> None:
    """The sandbox primary's options, alike in every benchmark whose primary is filled by
    ``prepare_primary`` (bench/ingest.py): the sandbox's, and how its binlog is filled (the defaults
    differ: ingest and serve share a large one, capacity and catchup a smaller one)."""
    add_sandbox_options(parser, port=port, name=name)
    parser.add_argument("--size-mb", type=float, default=size_mb, help="MiB of binlog to generate for a new primary")
    parser.add_argument("--fill", choices=["sysbench", "sql"], default="sysbench",
                        help="how a new primary is filled (sql: a few plain INSERTs, for smoke runs)")
    parser.add_argument("--min-mb", type=float, default=min_mb, help="refuse to measure a smaller binlog (MiB)")
    parser.add_argument("--max-binlog-size", default=max_binlog_size, help="the primary's max_binlog_size")


def server_version(server: LocalMariaDB) -> str:
    return str(server.sql("SELECT VERSION()")[0][0])


def binlog_bytes(server: LocalMariaDB) -> int:
    return sum(size for _, size in server.binlog_files())


def fill_sysbench(server: LocalMariaDB, target_mib: float, threads: int = 4, *, stop_short: bool = False) -> None:
    """Fill the binlog with sysbench oltp_write_only until it holds ``target_mib`` MiB: the
    tables are prepared with bulk INSERTs (4 x 100k rows), then write-only transactions
    (two UPDATEs, a DELETE, an INSERT each) run in 20 s rounds (a few minutes for 600 MiB).
    ``stop_short``: the rounds shrink as the binlog nears the target (to 0.8 of what the last
    round's rate says is left, 1 s at least), so it ends a few MiB past it instead of up to a
    round's worth: for a binlog that must stay in one file below max_binlog_size."""
    sysbench = sysbench_command(server)
    started = time.monotonic()
    sysbench_prepare(server)
    log(f"sysbench prepare: {time.monotonic() - started:.0f} s, binlog {mib(binlog_bytes(server)):.0f} MiB")
    target = target_mib * MIB
    rate = 0.0  # bytes a second of the last round
    while (size := binlog_bytes(server)) < target:
        seconds = 20
        if stop_short and rate:
            seconds = max(1, min(seconds, int(0.8 * (target - size) / rate)))
        round_started = time.monotonic()
        run_quietly([*sysbench, f"--threads={threads}", f"--time={seconds}", "oltp_write_only", "run"])
        rate = (binlog_bytes(server) - size) / (time.monotonic() - round_started)
    log(f"sysbench: {time.monotonic() - started:.0f} s, binlog {mib(binlog_bytes(server)):.0f} MiB")


def sysbench_command(server: LocalMariaDB) -> list[str]:
    """sysbench's command line for the benchmarks' tables on ``server`` (the test and its action follow)."""
    require_programs("sysbench")
    return ["sysbench", "--db-driver=mysql", f"--mysql-host={LOOPBACK}", f"--mysql-port={server.port}",
            "--mysql-user=root", "--mysql-db=sbtest", "--tables=4", "--table-size=100000"]


def sysbench_prepare(server: LocalMariaDB) -> None:
    """oltp_write_only's tables (4 x 100k rows, bulk INSERTs)."""
    server.sql("CREATE DATABASE IF NOT EXISTS sbtest")
    run_quietly([*sysbench_command(server), "--threads=2", "oltp_write_only", "prepare"])


def fill_sql(server: LocalMariaDB, target_mib: float) -> None:
    """A small binlog without sysbench, for smoke runs of the benchmarks: single-row and
    100-row transactions on a sysbench-like table (the sequence engine makes the rows)."""
    server.sql("CREATE DATABASE IF NOT EXISTS smoke")
    server.sql("CREATE TABLE IF NOT EXISTS smoke.t (id INT AUTO_INCREMENT PRIMARY KEY, k INT, c CHAR(120), "
               "pad CHAR(60))")
    with server.client() as client:
        while binlog_bytes(server) < target_mib * MIB:
            client.query("INSERT INTO smoke.t (k, c, pad) SELECT seq, REPEAT('c', 120), REPEAT('p', 60) "
                         "FROM smoke.seq_1_to_100")
            for _ in range(20):
                client.query("INSERT INTO smoke.t (k, c, pad) VALUES (1, 'x', 'y')")


def run_quietly(argv: list[str]) -> None:
    result = subprocess.run(argv, text=True, capture_output=True)
    if result.returncode != 0:
        raise BenchError(f"{' '.join(argv[:1] + argv[-2:])} failed: {(result.stderr or result.stdout).strip()[-500:]}")


# ---------------------------------------------------------------- binlog files


@dataclass(frozen=True)
class BinlogFile:
    name: str
    path: Path
    size: int
    events: int


def count_events(path: Path, size: int | None = None) -> int:
    """Walk the event headers of a binlog file (the first ``size`` bytes) and count events.
    The walk must land exactly on the end, or the file is not what we think it is."""
    end = path.stat().st_size if size is None else size
    if end <= 4:
        return 0
    with open(path, "rb") as stream, mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != BINLOG_MAGIC:
            raise BenchError(f"{path} is not a binlog file")
        unpack = _LENGTH.unpack_from
        pos, count = 4, 0
        limit = end - HEADER_LEN
        while pos <= limit:
            length = unpack(data, pos + 9)[0]
            if length < HEADER_LEN:
                raise BenchError(f"{path}: bad event length {length} at {pos}")
            pos += length
            count += 1
    if pos != end:
        raise BenchError(f"{path}: the event walk ends at {pos}, not at {end}")
    return count


def primary_binlogs(primary: LocalMariaDB, cache: Path | None = None) -> list[BinlogFile]:
    """The primary's binlog files with event counts; counts are cached by (name, size)."""
    known: dict[str, int] = {}
    if cache is not None and cache.exists():
        try:
            known = json.loads(cache.read_text())
        except ValueError:
            known = {}
    files = []
    for name, size in primary.binlog_files():
        path = primary.binlog_path(name)
        key = f"{name}:{size}"
        if key not in known:
            known[key] = count_events(path, size)
        files.append(BinlogFile(name, path, size, known[key]))
    if cache is not None:
        cache.write_text(json.dumps(known, indent=1))
    return files


def check_copy(primary: Sequence[BinlogFile], copy_dir: Path) -> None:
    """``copy_dir`` must hold exactly the primary's binlog files, byte for byte (the active one
    may differ in its in-use flag: relay.sandbox.compare)."""
    problems = mirror_file_differences([f.path for f in primary], copy_dir)
    if problems:
        raise BenchError(f"{copy_dir} is not a copy of the primary's binlogs: {'; '.join(problems[:3])}")


# ---------------------------------------------------------------- the relay child


def start_bench_relay(work_dir: Path, upstream_port: int, *, sync: str = "none", log_level: str = "WARNING",
                      listen_port: int = 0, metrics_port: int = 0,
                      server_id: int = RELAY_SERVER_ID) -> RelayProcess:
    """The relay the benchmarks measure, listening when returned: a fresh data_dir (WORK_DIR/data),
    storage.sync ``sync`` (none: the disk is not what a serve benchmark measures), no retention, and
    metrics on a known port (``wait_stored`` reads them); ports 0 are free ones."""
    fresh_dir(Path(work_dir) / "data")
    return start_relay(work_dir, upstream_port, metrics_port=metrics_port or free_port(), server_id=server_id,
                       listen={"port": listen_port or free_port()},
                       storage={"sync": sync, "retention": {"max_size": None, "max_age": None}},
                       logging={"level": log_level})


def wait_stored(relay: RelayProcess, files: list[BinlogFile], timeout: float) -> float:
    """Wait until the relay's committed end is the primary's end and its data_dir holds the
    primary's files at their sizes; returns the seconds it took."""
    last = files[-1]
    target = (float(int(last.name.rsplit(".", 1)[1])), float(last.size))
    committed: tuple[float | None, float | None] = (None, None)
    started = time.monotonic()

    def stored() -> bool:
        nonlocal committed
        relay.check_alive()
        values = unlabelled_metrics(relay.metrics_port)
        committed = (values.get("binlog_relay_committed_file_number"),
                     values.get("binlog_relay_committed_position_bytes"))
        return committed == target and all(_size_of(relay.data_dir / f.name) == f.size for f in files)

    try:
        wait_for(stored, timeout, "the relay did not store the primary's binlog")
    except WaitTimeout as late:
        raise BenchError(f"{late} (committed {committed}, want {target})\n{relay.log_tail()}") from None
    return time.monotonic() - started


def unlabelled_metrics(port: int) -> dict[str, float]:
    """The unlabelled samples of a relay's /metrics, by name."""
    status, text = http_get(port, "/metrics", timeout=10)
    if status != 200:
        raise BenchError(f"/metrics on port {port} answered {status}: {text[:200]}")
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            try:
                values[name] = float(value.split()[0])
            except (ValueError, IndexError):
                pass
    return values


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def stop_relay(relay: RelayProcess | None, remove_data: bool = True) -> None:
    """Stop the relay at the end of a benchmark (killed if it does not stop), saying so if it did not
    exit cleanly; then remove its data_dir, unless told not to."""
    if relay is None:
        return
    status = relay.close()
    if status not in (0, None):
        log(f"the relay exited with status {status}\n{relay.log_tail()}")
    if remove_data:
        shutil.rmtree(relay.data_dir, ignore_errors=True)


# ---------------------------------------------------------------- measured processes


@dataclass
class Measured:
    """A finished child process: wall clock from spawn to exit, its CPU time, its peak RSS."""

    argv: list[str]
    returncode: int
    wall_s: float
    user_s: float
    sys_s: float
    peak_rss_kib: int
    stdout: str
    stderr: str
    timed_out: bool = False

    def failed(self) -> str | None:
        if self.timed_out:
            return "timed out"
        if self.returncode != 0:
            tail = "\n".join(self.stderr.strip().splitlines()[-15:])
            return f"exit status {self.returncode}:\n{tail}"
        return None


def running_pid(pid: int | None, what: str) -> int:
    """``pid``; BenchError when it is None: ``what`` (the primary, the relay) is not running."""
    if pid is None:
        raise BenchError(f"the {what} is not running")
    return pid


def cpu_seconds(pid: int) -> float:
    """user + system CPU time of a running process (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15)


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so the next peak is of what follows."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


def run_measured(argv: Sequence[str], cwd: Path | str | None = None, env: dict[str, str] | None = None,
                 timeout: float | None = None, rss_poll: float = 0.01) -> Measured:
    """Run ``argv`` to its end: wall time, CPU time and peak RSS of that one process.

    CPU time comes from ``os.wait4`` (this child only; RUSAGE_CHILDREN would mix in every
    child so far).  Its ``ru_maxrss`` is useless here: it carries over the parent's peak
    into the child (vfork + exec), so the peak RSS is the child's VmHWM, read every
    ``rss_poll`` seconds while it runs (VmHWM only grows; a child may also report its own
    at exit, which is exact).  Output goes to temporary files so nothing reads pipes."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err)
        deadline = started + timeout if timeout else None
        done = threading.Event()
        expired = threading.Event()
        peak = [0]

        def watch() -> None:
            while not done.wait(rss_poll):
                peak[0] = max(peak[0], status_kib(proc.pid, "VmHWM"))
                if deadline is not None and time.perf_counter() > deadline:
                    expired.set()
                    try:
                        os.kill(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            done.set()
        wall = time.perf_counter() - started
        watcher.join()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Measured(list(argv), proc.returncode, wall, usage.ru_utime, usage.ru_stime,
                        peak[0], out.read(), err.read(), expired.is_set())


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def settle() -> None:
    """Flush dirty pages of earlier runs so their writeback does not land in the next run."""
    os.sync()
    time.sleep(0.2)


# ---------------------------------------------------------------- statistics and output


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def mib(n_bytes: float) -> float:
    return n_bytes / MIB


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine_info() -> dict[str, object]:
    return {
        "hostname": platform.node(),
        "cpus": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "relay_loops": relay_loops(),
    }


def git_commit() -> str:
    """The checkout's commit, and whether relay/ has uncommitted changes: what was measured."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "relay"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' + uncommitted changes in relay/' if dirty else ''}" if head else "unknown"


COMPILED_MODULES = ("relay.binlog._scan", "relay.rows.coltypes._rowread", "relay.pipeline._jsontext")


def missing_compiled_modules() -> list[str]:
    """The relay's optional C modules (setup.py) this checkout lacks: without them it runs the same
    loops in Python, several times slower, and a benchmark measures those."""
    missing = []
    for name in COMPILED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def relay_loops() -> str:
    """Which per-event loops the relay runs: the compiled ones or Python's."""
    missing = missing_compiled_modules()
    return f"python ({', '.join(missing)} not built)" if missing else "compiled"


# ---------------------------------------------------------------- profiles


def summarize_speedscope(path: Path, sampled: str, top: int = 20) -> str:
    """Hot spots of a py-spy speedscope profile: per function (self and inclusive) and per line
    (self), as % of all samples.  ``sampled`` says what a sample is: with py-spy --idle, waiting
    counts too (so % of wall time); without it, a sample counts when the thread is not waiting in
    a system call (running, or ready to run: on a busy machine a thread waiting for a CPU is
    sampled too)."""
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]

    def where(i: int) -> str:
        return "/".join(Path(frames[i].get("file") or "?").parts[-3:])

    func = [f"{f['name']} ({where(i)})" for i, f in enumerate(frames)]
    line = [f"{f['name']} ({where(i)}:{f.get('line', '?')})" for i, f in enumerate(frames)]
    self_fn: dict[str, float] = {}
    total_fn: dict[str, float] = {}
    self_line: dict[str, float] = {}
    grand = 0.0
    samples = 0
    for prof in data["profiles"]:
        samples += len(prof["samples"])
        for stack, weight in zip(prof["samples"], prof["weights"]):
            grand += weight
            if not stack:
                continue
            self_fn[func[stack[-1]]] = self_fn.get(func[stack[-1]], 0) + weight
            self_line[line[stack[-1]]] = self_line.get(line[stack[-1]], 0) + weight
            for name in {func[i] for i in stack}:
                total_fn[name] = total_fn.get(name, 0) + weight
    if not grand:
        return "(no samples)"

    def rows(weights: dict[str, float]) -> list[list[object]]:
        best = sorted(weights.items(), key=lambda kv: -kv[1])[:top]
        return [[f"{100 * w / grand:5.1f}%", name] for name, w in best]

    return (f"{samples} samples ({grand:.2f} s), {sampled}.\n"
            "Self time per function (% of samples):\n"
            + table(["self", "function"], rows(self_fn))
            + "\n\nInclusive time per function:\n" + table(["total", "function"], rows(total_fn))
            + "\n\nSelf time per line:\n" + table(["self", "line"], rows(self_line)))

"""Shared helpers for the benchmarks: a sandbox primary, binlog walking and checking,
measured child processes, statistics and tables.

The primary is a throw-away MariaDB server started by the project's own launcher
(``relay.localdb``, the one the tests use) and filled by sysbench oltp_write_only.  Everything
here is synchronous; of the relay, the benchmark's parent process imports only that launcher
(stdlib and the sans-IO protocol client), never the code it measures.
"""

from __future__ import annotations

import json
import mmap
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from relay.localdb import LocalMariaDB, MariaDBNotInstalled

REPO_ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20

REPL_USER = "repl"
REPL_PASSWORD = "replpass"

BINLOG_MAGIC = b"\xfebin"
HEADER_LEN = 19
MARIADB_BINLOG = "mariadb-binlog"
RELAY_SERVER_ID = 1001
GOAL_RATIO = 1.0  # docs/architecture.md: the relay must never be the slowest link
_LENGTH = struct.Struct("<I")


class BenchError(Exception):
    """The benchmark cannot go on (or its result would be wrong); the message says why."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)



def require_programs(*names: str) -> None:
    missing = [n for n in names if not (shutil.which(n) or Path("/usr/sbin", n).exists())]
    if missing:
        raise BenchError(f"missing programs: {', '.join(missing)} "
                         "(apt-get install mariadb-server mariadb-client sysbench)")


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


# ---------------------------------------------------------------- the sandbox primary


class Sandbox:
    """The benchmarks' primary: a ``relay.localdb.LocalMariaDB`` in ``sandbox_dir/name`` (my.cnf,
    data/, error.log), the project's own launcher, filled with sysbench (``fill``).  The data
    directory stays between runs (``--reuse``); the server never outlives the benchmark."""

    def __init__(self, name: str, port: int, sandbox_dir: Path | str, server_id: int = 1) -> None:
        self.name = name
        self.port = port
        self.server_id = server_id
        self.dir = Path(sandbox_dir) / name
        self.server = LocalMariaDB(self.dir, server_id, port)
        self.datadir = self.server.datadir

    def exists(self) -> bool:
        return (self.datadir / "mysql").is_dir()

    def running(self) -> bool:
        return self.server.running

    def start(self, *server_options: str) -> None:
        if self.running():
            return
        if port_in_use(self.port):
            raise BenchError(f"port {self.port} is already taken by another server; choose --port")
        self.server.extra_args = list(server_options)
        try:
            self.server.start()
        except MariaDBNotInstalled as missing:
            raise BenchError(str(missing)) from None

    def stop(self) -> None:
        self.server.stop()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def sql(self, query: str) -> list[list[str]]:
        """Rows of ``query`` as root, through the mariadb client (tab-separated, no headers)."""
        result = subprocess.run(["mariadb", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "-N", "-B",
                                 "-e", query], text=True, capture_output=True)
        if result.returncode != 0:
            raise BenchError(f"{query!r} on the primary failed: {result.stderr.strip()}")
        return [line.split("\t") for line in result.stdout.splitlines() if line]

    def version(self) -> str:
        return self.sql("SELECT VERSION()")[0][0]

    def binary_logs(self) -> list[tuple[str, int]]:
        return [(row[0], int(row[1])) for row in self.sql("SHOW BINARY LOGS")]

    def master_status(self) -> tuple[str, int]:
        rows = self.sql("SHOW MASTER STATUS")
        if not rows:
            raise BenchError("SHOW MASTER STATUS is empty: is log_bin on?")
        return rows[0][0], int(rows[0][1])

    def binlog_bytes(self) -> int:
        return sum(size for _, size in self.binary_logs())

    def fill(self, target_mib: int, threads: int = 4) -> None:
        """Fill the binlog with sysbench oltp_write_only until it holds ``target_mib`` MiB: the
        tables are prepared with bulk INSERTs (4 x 100k rows), then write-only transactions
        (two UPDATEs, a DELETE, an INSERT each) run in 20 s rounds (a few minutes for 600 MiB)."""
        require_programs("sysbench")
        sysbench = ["sysbench", "--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={self.port}",
                    "--mysql-user=root", "--mysql-db=sbtest", "--tables=4", "--table-size=100000"]
        self.sql("CREATE DATABASE IF NOT EXISTS sbtest")
        started = time.monotonic()
        _run_quietly([*sysbench, "--threads=2", "oltp_write_only", "prepare"])
        log(f"sysbench prepare: {time.monotonic() - started:.0f} s, binlog {mib(self.binlog_bytes()):.0f} MiB")
        while self.binlog_bytes() < target_mib << 20:
            _run_quietly([*sysbench, f"--threads={threads}", "--time=20", "oltp_write_only", "run"])
        log(f"sysbench: {time.monotonic() - started:.0f} s, binlog {mib(self.binlog_bytes()):.0f} MiB")


    def wait_settled(self, timeout: float = 30.0) -> None:
        """Until the binlog stops growing: after a rotation MariaDB writes the new file's
        BINLOG_CHECKPOINT event in the background, so the end right after the last write can
        still move."""
        deadline = time.monotonic() + timeout
        last = self.binary_logs()
        while time.monotonic() < deadline:
            time.sleep(0.3)
            now = self.binary_logs()
            if now == last:
                return
            last = now
        raise BenchError(f"the primary's binlog kept growing for {timeout:.0f} s after the fill")

    def fill_sql(self, target_mib: float) -> None:
        """A small binlog without sysbench, for smoke runs of the benchmarks: single-row and
        100-row transactions on a sysbench-like table (the sequence engine makes the rows)."""
        self.sql("CREATE DATABASE IF NOT EXISTS smoke")
        self.sql("CREATE TABLE IF NOT EXISTS smoke.t (id INT AUTO_INCREMENT PRIMARY KEY, k INT, c CHAR(120), "
                 "pad CHAR(60))")
        while self.binlog_bytes() < target_mib * MIB:
            self.sql("INSERT INTO smoke.t (k, c, pad) SELECT seq, REPEAT('c', 120), REPEAT('p', 60) "
                     "FROM smoke.seq_1_to_100; " + "INSERT INTO smoke.t (k, c, pad) VALUES (1, 'x', 'y'); " * 20)


def _run_quietly(argv: list[str]) -> None:
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


def primary_binlogs(sandbox: Sandbox, cache: Path | None = None) -> list[BinlogFile]:
    """The primary's binlog files with event counts; counts are cached by (name, size)."""
    known: dict[str, int] = {}
    if cache is not None and cache.exists():
        try:
            known = json.loads(cache.read_text())
        except ValueError:
            known = {}
    files = []
    for name, size in sandbox.binary_logs():
        path = sandbox.datadir / name
        key = f"{name}:{size}"
        if key not in known:
            known[key] = count_events(path, size)
        files.append(BinlogFile(name, path, size, known[key]))
    if cache is not None:
        cache.write_text(json.dumps(known, indent=1))
    return files


def check_copy(primary: Sequence[BinlogFile], copy_dir: Path) -> None:
    """``copy_dir`` must hold exactly the primary's binlog files, byte for byte (the active one
    may differ in its in-use flag: relay.storage.compare)."""
    from relay.storage.compare import copy_differences

    names = {f.name for f in primary}
    stem = re.escape(primary[0].name.rsplit(".", 1)[0])
    extra = sorted(p.name for p in copy_dir.iterdir()
                   if re.fullmatch(stem + r"\.\d+", p.name) and p.name not in names)
    if extra:
        raise BenchError(f"{copy_dir} holds binlog files the primary does not have: {extra}")
    problems = copy_differences([f.path for f in primary], copy_dir)
    if problems:
        raise BenchError(f"{copy_dir} is not a copy of the primary's binlogs: {'; '.join(problems[:3])}")


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


def vm_hwm_kib(pid: int | str = "self") -> int:
    """The peak resident set size of a running process's address space (VmHWM), in KiB."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


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
                peak[0] = max(peak[0], vm_hwm_kib(proc.pid))
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


def relay_loops() -> str:
    """Which per-event loops the relay runs: the compiled ones (relay/binlog/_scan.c) or Python's."""
    from relay.binlog import outbound, stream

    compiled = stream._compiled_scan is not None and outbound._compiled_frame is not None
    return "compiled" if compiled else "python (relay/binlog/_scan.c not built)"

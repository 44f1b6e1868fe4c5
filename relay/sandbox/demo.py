"""``binlog-relay demo``: a local MariaDB primary, the relay in-process, a MariaDB replica of
the relay, a stream of writes, a live view, and at the end a byte-for-byte comparison of what
the relay stored and a comparison of the replica's data with the primary's.

Everything lives in one temporary directory that is removed at the end. The pieces:

    primary -> relay (server_id 1001, metrics on 127.0.0.1) -> replica (server_id 2)

    attach_replica       CHANGE MASTER TO the relay (mysql-bin.000001:4) and START SLAVE (replication.py)
    Demo.write_rows      small transactions into demo.events, now and then a multi-row one
    Demo.status          one Status per refresh (positions, lag, files, metrics URL), shown by LiveView
    Demo.wait_caught_up  after the writes stop: the relay's committed end and the replica's
                         executed position reach the primary's
    mirror_differences   the stored files against the primary's, byte for byte (compare.py)
    Demo.data_differences  row counts and CHECKSUM TABLE demo.events, replica against primary

The servers are driven by the sandbox's synchronous helpers, in worker threads, while the relay
runs in this process's trio loop.  To show more, add a component to Demo, a field to Status and
its line in Status.fields().
"""

from __future__ import annotations

import math
import random
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import trio

from ..app import Relay
from ..config import Config, parse_config
from ..logs import setup_logging
from ..protocol.packets import ServerError
from ..storage.relaylog import RelayLog
from ..trio_run import run_trio
from .compare import mirror_differences
from .mariadb import (
    REPL_PASSWORD,
    REPL_USER,
    LocalMariaDB,
    MariaDBNotInstalled,
    check_installed,
    kill_quietly,
    set_template_parent,
    sql_string,
)
from .ports import LOOPBACK
from .replication import FIRST_FILE, attach_replica, is_stopped, replica_note, replica_position

Position = tuple[str, int]
T = TypeVar("T")

PRIMARY_SERVER_ID = 1
RELAY_SERVER_ID = 1001
REPLICA_SERVER_ID = 2
HOST = LOOPBACK
# The demo writes about 5 KB a second: a small max_binlog_size rotates the binlog every
# second or two, so even a short run shows the relay following the primary across files.
MAX_BINLOG_SIZE = 8 * 1024
WRITE_INTERVAL = 0.2  # seconds between transactions: "a few per second"
MULTI_ROW_EVERY = 6  # every 6th transaction inserts several rows at once
MULTI_ROW_COUNT = (5, 20)
REFRESH_INTERVAL = 1.0
CATCH_UP_TIMEOUT = 30.0  # one deadline for the relay and the replica together
CATCH_UP_POLL = 0.1
VERIFY_ATTEMPTS = 3  # a comparison is retried when the primary moved meanwhile (a late BINLOG_CHECKPOINT)
DETACH_TIMEOUT = 10.0

SCHEMA = (
    "CREATE DATABASE IF NOT EXISTS demo",
    "CREATE TABLE IF NOT EXISTS demo.events ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " message VARCHAR(255) NOT NULL,"
    " created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    ") ENGINE=InnoDB",
)
_WORDS = ("order", "payment", "login", "logout", "signup", "refund", "shipment", "review",
          "cart", "invoice", "coupon", "upgrade", "search", "click", "comment", "export")


async def in_thread(function: Callable[..., T], *args: Any) -> T:
    """A blocking call of the sandbox (a statement, SHOW SLAVE STATUS) off the trio loop, so that the
    relay running in that loop keeps moving meanwhile."""
    return await trio.to_thread.run_sync(function, *args)


# ------------------------------------------------------------------- the view


@dataclass(frozen=True)
class Status:
    """What one refresh of the live view shows."""

    elapsed: float
    rows_written: int
    primary: Position
    relay: Position | None
    relay_lag_bytes: int  # the primary's binlog bytes past the relay's committed end
    replica: Position | None  # Relay_Master_Log_File:Exec_Master_Log_Pos
    replica_lag_bytes: int  # the relay's committed bytes past what the replica executed
    replica_note: str  # "" while both replica threads run, else their state and last error
    files_stored: int
    bytes_stored: int
    metrics_url: str

    def fields(self) -> list[tuple[str, str]]:
        replica = _show_position(self.replica) + (f" ({self.replica_note})" if self.replica_note else "")
        return [
            ("time", f"{self.elapsed:5.1f}s"),
            ("rows written", str(self.rows_written)),
            ("primary at", _show_position(self.primary)),
            ("relay committed", _show_position(self.relay)),
            ("relay lag", _show_size(self.relay_lag_bytes)),
            ("replica at", replica),
            ("replica lag", _show_size(self.replica_lag_bytes)),
            ("files stored", f"{self.files_stored} ({_show_size(self.bytes_stored)})"),
            ("metrics", self.metrics_url),
        ]

    @property
    def caught_up(self) -> bool:
        return self.relay == self.primary and self.replica == self.primary


def _show_position(position: Position | None) -> str:
    return "-" if position is None else f"{position[0]}:{position[1]}"


def _show_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


class LiveView:
    """A block of lines redrawn in place on a terminal; one line per refresh otherwise
    (a pipe or a log file wants a history, not escape codes)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.redraw = out.isatty()
        self._lines_on_screen = 0

    def show(self, status: Status) -> None:
        fields = status.fields()
        if self.redraw:
            if self._lines_on_screen:
                # Back to the start of the block, and clear it (it may have been longer).
                self.out.write(f"\x1b[{self._lines_on_screen}F\x1b[J")
            lines = [f"  {label:<16} {value}" for label, value in fields]
            self.out.write("\n".join(lines) + "\n")
            self._lines_on_screen = len(lines)
        else:
            self.out.write(" | ".join(f"{label} {value}" for label, value in fields) + "\n")
        self.out.flush()

    def keep(self) -> None:
        """Leave the last block on screen; what is printed next goes below it."""
        self._lines_on_screen = 0


# ------------------------------------------------------------------- the demo


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str

    def line(self) -> str:
        return f"VERDICT: {'OK' if self.ok else 'FAILED'} - {self.detail}"


class Demo:
    """The primary, the relay, the replica and the writes: what the live view and the verdict
    look at."""

    def __init__(self, primary: LocalMariaDB, relay: Relay, replica: LocalMariaDB) -> None:
        self.primary = primary
        self.relay = relay
        self.replica = replica
        self.rows_written = 0
        self.started = trio.current_time()

    @property
    def relay_log(self) -> RelayLog:
        return self.relay.relay_log

    @property
    def metrics_url(self) -> str:
        return f"http://{self.relay.config.metrics.host}:{self.relay.http.port}/metrics"

    async def master_status(self) -> Position:
        return await in_thread(self.primary.master_status)

    # --- the replica

    async def attach_replica(self) -> None:
        """Point the replica at the relay, from the first file, and start it."""
        await in_thread(attach_replica, self.replica, self.relay.downstream.port)

    async def detach_replica(self) -> None:
        """STOP SLAVE, so the replica does not retry the relay while everything shuts down."""
        await in_thread(self.replica.stop_slave)

    async def slave_status(self) -> dict[str, Any]:
        """SHOW SLAVE STATUS as a dict ({} before CHANGE MASTER)."""
        return await in_thread(self.replica.slave_status)

    # --- the load

    async def write_rows(self, stop: trio.Event) -> None:
        """Insert until stop is set; the transaction under way when it is set completes, so
        rows_written is exactly what the primary committed."""
        rng = random.Random()
        transactions = 0
        while not stop.is_set():
            multi_row = transactions % MULTI_ROW_EVERY == MULTI_ROW_EVERY - 1
            count = rng.randint(*MULTI_ROW_COUNT) if multi_row else 1
            values = ", ".join(f"({sql_string(_message(rng, self.rows_written + i + 1))})"
                               for i in range(count))
            await in_thread(self.primary.sql, f"INSERT INTO demo.events (message) VALUES {values}")
            self.rows_written += count
            transactions += 1
            with trio.move_on_after(WRITE_INTERVAL):
                await stop.wait()

    # --- the view

    async def status(self) -> Status:
        # Downstream first: the replica trails the relay and the relay the primary, and each
        # only moves forward, so read in this order none is shown ahead of its source.
        slave = await self.slave_status()
        committed = self.relay_log.committed
        relay_files = [(name, self.relay_log.file_end(name)) for name in self.relay_log.files]
        primary = await self.master_status()
        logs = await in_thread(self.primary.binlog_files)
        replica = replica_position(slave)
        return Status(
            elapsed=trio.current_time() - self.started,
            rows_written=self.rows_written,
            primary=primary,
            relay=committed,
            relay_lag_bytes=lag_bytes(logs, committed),
            replica=replica,
            replica_lag_bytes=lag_bytes(relay_files, replica),
            replica_note=replica_note(slave),
            files_stored=len(relay_files),
            bytes_stored=sum(size for _, size in relay_files),
            metrics_url=self.metrics_url,
        )

    async def show_live(self, view: LiveView, stop: trio.Event) -> None:
        """Refresh the view every REFRESH_INTERVAL until stop is set."""
        while not stop.is_set():
            view.show(await self.status())
            with trio.move_on_after(REFRESH_INTERVAL):
                await stop.wait()

    # --- the end

    async def wait_caught_up(self, timeout: float = CATCH_UP_TIMEOUT) -> tuple[Status | None, str | None]:
        """(the status, None) once the relay's committed end and the replica's executed
        position are the primary's position; else (the last status, what is wrong).

        Not replication.wait_caught_up: this one also waits for the relay in this process, says
        which of the two lags, and stays in trio, so that Ctrl-C ends it at once."""
        status: Status | None = None
        with trio.move_on_after(timeout):
            while True:
                status = await self.status()
                if status.caught_up:
                    return status, None
                slave = await self.slave_status()
                if is_stopped(slave):
                    return status, f"the replica stopped replicating: {replica_note(slave)}"
                await trio.sleep(CATCH_UP_POLL)
        if status is None:
            return None, f"no status within {timeout:g} s"
        if status.relay != status.primary:
            error = self.relay.upstream.status.last_error
            return status, (f"the relay did not catch up within {timeout:g} s: primary at "
                            f"{_show_position(status.primary)}, relay at {_show_position(status.relay)}"
                            + (f" (last upstream error: {error})" if error else ""))
        return status, (f"the replica did not catch up within {timeout:g} s: relay at "
                        f"{_show_position(status.relay)}, replica at {_show_position(status.replica)}"
                        + (f" ({status.replica_note})" if status.replica_note else ""))

    async def verdict(self) -> tuple[Verdict, Status | None]:
        """Wait until everything caught up, then compare; (the verdict, the caught-up status)."""
        for _ in range(VERIFY_ATTEMPTS):
            status, lagging = await self.wait_caught_up()
            if lagging:
                return Verdict(False, lagging), status
            assert status is not None
            problems = await self.differences()
            # The primary may write on its own (a BINLOG_CHECKPOINT shortly after a rotation):
            # differences found while it moved are compared again once everything caught up.
            if not problems or await self.master_status() == status.primary:
                break
        if problems:
            return Verdict(False, "; ".join(problems)), status
        assert status is not None  # the last attempt found nothing lagging
        return Verdict(True, f"relay mirrors the primary ({status.files_stored} files, {status.bytes_stored} "
                             f"bytes) and the replica matches it ({self.rows_written} rows)"), status

    async def differences(self) -> list[str]:
        copies = await in_thread(mirror_differences, self.primary, self.relay_log.data_dir)
        return copies + await self.data_differences()

    async def data_differences(self) -> list[str]:
        """Row counts (against what the writer wrote) and CHECKSUM TABLE, replica against primary."""
        problems = []
        facts: dict[str, tuple[int, str | None]] = {}
        for name, server in (("primary", self.primary), ("replica", self.replica)):
            try:
                counted = int((await in_thread(server.sql, "SELECT COUNT(*) FROM demo.events"))[0][0] or 0)
                checksum = (await in_thread(server.sql, "CHECKSUM TABLE demo.events"))[0][1]
            except ServerError as err:
                problems.append(f"the {name}: {err}")
                continue
            facts[name] = counted, checksum
            if counted != self.rows_written:
                problems.append(f"demo.events on the {name} has {counted} rows, the writer wrote {self.rows_written}")
        if len(facts) == 2 and facts["primary"][1] != facts["replica"][1]:
            problems.append(f"CHECKSUM TABLE demo.events differs: primary {facts['primary'][1]}, "
                            f"replica {facts['replica'][1]}")
        return problems


def _message(rng: random.Random, number: int) -> str:
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 30)))
    return f"event {number}: {words}"


def lag_bytes(primary_logs: list[Position], committed: Position | None) -> int:
    """How many bytes of the primary's binlogs lie past the relay's committed end."""
    names = [name for name, _ in primary_logs]
    if committed is None or committed[0] not in names:
        return sum(size for _, size in primary_logs)
    current = names.index(committed[0])
    behind_in_file = max(primary_logs[current][1] - committed[1], 0)
    return behind_in_file + sum(size for _, size in primary_logs[current + 1:])


# ------------------------------------------------------------------- running it


def relay_config(data_dir: Path, upstream_port: int) -> Config:
    return parse_config({
        "server_id": RELAY_SERVER_ID,
        "data_dir": str(data_dir),
        "upstream": {"host": HOST, "port": upstream_port, "user": REPL_USER, "password": REPL_PASSWORD},
        "listen": {"host": HOST, "port": 0},
        "users": [{"name": REPL_USER, "password": REPL_PASSWORD}],
        "metrics": {"host": HOST, "port": 0},
        "storage": {"sync": "commit"},
    }, environ={}, source="<demo>")  # the demo is self-contained: no BINLOG_RELAY_* overrides


async def wait_for_stop(seconds: float | None, stop: trio.Event) -> None:
    """Set stop after `seconds`, or at the first Ctrl-C."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        with trio.move_on_after(math.inf if seconds is None else seconds):
            async for _ in signals:
                break
    stop.set()


async def run_with_servers(primary: LocalMariaDB, replica: LocalMariaDB, work_dir: Path,
                           seconds: float | None, out: TextIO) -> Verdict:
    for statement in SCHEMA:
        await in_thread(primary.sql, statement)
    relay = Relay(relay_config(work_dir / "relay", primary.port))
    async with trio.open_nursery() as relay_nursery:
        await relay_nursery.start(relay.run)
        demo = Demo(primary, relay, replica)
        print(f"relay:   server_id {RELAY_SERVER_ID}, data_dir {relay.relay_log.data_dir}, "
              f"replicas may connect to {HOST}:{relay.downstream.port}", file=out)
        print(f"metrics: {demo.metrics_url}  (curl it while the demo runs)", file=out, flush=True)
        await demo.attach_replica()
        print(f"replica: replicating from the relay at {HOST}:{relay.downstream.port} "
              f"from {FIRST_FILE}:4", file=out)
        how_long = "Ctrl-C to stop" if seconds is None else f"for {seconds:g} s (Ctrl-C stops sooner)"
        print(f"writing rows to demo.events, {how_long}", file=out, flush=True)
        view = LiveView(out)
        stop = trio.Event()
        async with trio.open_nursery() as load:
            load.start_soon(wait_for_stop, seconds, stop)
            load.start_soon(demo.write_rows, stop)
            load.start_soon(demo.show_live, view, stop)
        view.keep()  # what follows goes below the last refresh instead of being redrawn over
        print("stopped writing; waiting for the relay and the replica to catch up, then comparing",
              file=out, flush=True)
        verdict, final = await demo.verdict()
        view.show(final if final is not None else await demo.status())
        view.keep()
        with trio.move_on_after(DETACH_TIMEOUT):
            await demo.detach_replica()
        relay_nursery.cancel_scope.cancel()
    return verdict


def run_demo(seconds: float | None = None, out: TextIO | None = None) -> int:
    """The `binlog-relay demo` command: 0 when the relay mirrored the primary, else 1."""
    out = out if out is not None else sys.stdout
    try:
        check_installed()
    except MariaDBNotInstalled as err:
        print(f"binlog-relay demo: {err}", file=sys.stderr)
        return 1
    setup_logging("WARNING")  # the relay's INFO lines would scroll the live view away
    # `docker stop`, `timeout` and `kill` send SIGTERM: the demo stops as at Ctrl-C, its servers and
    # directory with it, instead of dying and leaving two mariadbd running.
    previous = signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    try:
        with tempfile.TemporaryDirectory(prefix="binlog-relay-demo-") as tmp:
            verdict = run_in(Path(tmp), seconds, out)
        print(f"removed {tmp}", file=out)
    except KeyboardInterrupt:
        print("binlog-relay demo: interrupted; everything was stopped and removed", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(verdict.line(), file=out, flush=True)
    return 0 if verdict.ok else 1


def _sigterm_as_ctrl_c(signum: int, frame: object) -> None:
    # Raised again as SIGINT, it goes where a Ctrl-C goes at that moment: the receiver that ends the
    # writes, or trio's KeyboardInterrupt.  Where only Python's own handler would take it, or nothing
    # (a shell's background job, `cmd &`, starts with SIGINT ignored, and a SIGINT raised then is
    # lost), the KeyboardInterrupt is raised here.
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, signal.SIG_IGN, signal.SIG_DFL):
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)


def run_in(work_dir: Path, seconds: float | None, out: TextIO) -> Verdict:
    """Start the primary and the replica in work_dir, run the demo with them, stop them."""
    print(f"binlog-relay demo: working in {work_dir}", file=out)
    print("starting a MariaDB primary (mariadb-install-db takes a few seconds) ...", file=out, flush=True)
    set_template_parent(work_dir)  # the template datadir goes away with the rest
    primary = LocalMariaDB(work_dir / "primary", PRIMARY_SERVER_ID,
                           extra_args=[f"--max-binlog-size={MAX_BINLOG_SIZE}"])
    replica = LocalMariaDB(work_dir / "replica", REPLICA_SERVER_ID)
    try:
        primary.start()
        print(f"primary: mariadbd pid {primary.pid}, {HOST}:{primary.port}, server_id {PRIMARY_SERVER_ID}, "
              f"max_binlog_size {MAX_BINLOG_SIZE}, datadir {primary.datadir}", file=out, flush=True)
        replica.start()
        print(f"replica: mariadbd pid {replica.pid}, {HOST}:{replica.port}, server_id {REPLICA_SERVER_ID}, "
              f"datadir {replica.datadir}", file=out, flush=True)
        # run_trio: a second Ctrl-C must reach run_demo as KeyboardInterrupt, not inside an ExceptionGroup
        return run_trio(run_with_servers, primary, replica, work_dir, seconds, out)
    except Exception as exc:  # noqa: BLE001 - a demo reports every failure as its verdict
        traceback.print_exc(file=sys.stderr)
        return Verdict(False, f"the demo stopped: {_describe(exc)}")
    finally:
        # The replica first: it replicates from the relay, which reads from the primary.
        for role, server in (("replica", replica), ("primary", primary)):
            _stop_server(role, server, out)


def _stop_server(role: str, server: LocalMariaDB, out: TextIO) -> None:
    pid = server.pid
    if pid is None:
        return
    try:
        server.stop()
    except Exception as exc:  # noqa: BLE001 - the other server must be stopped too
        print(f"stopping the {role} failed ({_describe(exc)}); killing it", file=sys.stderr)
        kill_quietly(server)
    print(f"stopped the {role} (pid {pid})", file=out, flush=True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"

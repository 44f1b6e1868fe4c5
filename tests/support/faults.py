"""Helpers of the fault suite (tests/faults): a write load whose transactions can be counted on a
replica (lost or applied twice shows), convergence with the time it took, and a relay's metrics.

    with SequenceLoad(primary) as load:      # transaction k inserts the row n = k, in a thread
        ...faults...
    commits = load.stop()
    seconds = converged(primary, relay, [replica, ...])   # mirror + every replica exactly once
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from relay.sandbox.compare import copy_differences
from relay.sandbox.errors import ReplicationStopped, WaitTimeout
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess, http_get
from relay.sandbox.replication import is_stopped, replica_summary, wait_binlog_settled
from relay.storage.index import read_index

from .mariadb import MariaDB
from .metrics import Scrape
from .relay import wait_for_mirror
from .replication import assert_healthy, assert_same_data

SCHEMA = "faults"
T = TypeVar("T")
PATIENCE = 3600.0  # the longest a backlog that keeps moving is waited for (wait_while_moving)

# Every relay the fault tests started in this session: (work_dir, the passwords it was given); filled by the
# fault_relay fixture (tests/faults/conftest.py), read by tests/faults/test_secrets.py. Here, not in the
# conftest, so both see one list whatever name pytest imports the conftest under.
STARTED_RELAYS: list[tuple[Path, tuple[str, ...]]] = []
ENDPOINTS_FILE = "endpoints-at-stop.txt"  # the relay's /metrics, /healthz and /readyz just before it stopped


class SequenceLoad:
    """Transactions one after another on one connection, until stopped: transaction k inserts the row
    n = k (the primary key) into faults.seq. Every 8th carries a 48 KiB value and a second statement,
    so a cut lands inside an event and inside a transaction often (big_every=None: none). A replica that
    lost a transaction has fewer rows than MAX(n); one that applied one twice stops on a duplicate key."""

    def __init__(self, primary: MariaDB, big_every: int | None = 8, rate: float | None = None) -> None:
        """rate: at most this many transactions a second (None: as fast as the primary commits)."""
        self.primary = primary
        self.big_every = big_every
        self.rate = rate
        self.commits = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        primary.execute_many([f"CREATE DATABASE IF NOT EXISTS {SCHEMA}",
                              f"CREATE TABLE IF NOT EXISTS {SCHEMA}.seq (n BIGINT PRIMARY KEY, pad MEDIUMBLOB,"
                              " touched INT NOT NULL DEFAULT 0) ENGINE=InnoDB"])
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            conn = self.primary.connect()
            started = time.monotonic()
            with conn.cursor() as cur:
                while not self._stop.is_set():
                    if self.rate is not None:  # the pace of the load (not a wait for a condition)
                        ahead = self.commits / self.rate - (time.monotonic() - started)
                        if ahead > 0:
                            self._stop.wait(ahead)
                            continue
                    n = self.commits + 1
                    big = self.big_every is not None and n % self.big_every == 0
                    cur.execute("BEGIN")
                    cur.execute(f"INSERT INTO {SCHEMA}.seq (n, pad) VALUES (%s, REPEAT('p', %s))",
                                (n, 48 * 1024 if big else n % 200))
                    if big:
                        cur.execute(f"UPDATE {SCHEMA}.seq SET touched = touched + 1 WHERE n = %s", (n - 1,))
                    cur.execute("COMMIT")
                    self.commits = n
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def start(self) -> SequenceLoad:
        self._thread.start()
        return self

    def wait_commits(self, count: int, timeout: float = 60.0) -> None:
        target = self.commits + count
        wait_for(lambda: self.commits >= target or self.error is not None, timeout, "the load stopped committing")
        assert self.error is None, f"the write load failed: {self.error!r}"

    def stop(self) -> int:
        """Stop after the transaction in progress; the number of commits. Raises if the load failed."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the write load did not stop"
        assert self.error is None, f"the write load failed: {self.error!r}"
        return self.commits

    def __enter__(self) -> SequenceLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def sequence_counts(server: MariaDB) -> tuple[int, int, int]:
    """(rows, distinct n, max n) of faults.seq."""
    rows, distinct, top = server.sql(f"SELECT COUNT(*), COUNT(DISTINCT n), COALESCE(MAX(n), 0) FROM {SCHEMA}.seq")[0]
    return int(rows), int(distinct), int(top)


def assert_exactly_once(primary: MariaDB, replica: MariaDB, commits: int) -> None:
    """Every transaction of the load on the replica once: as many rows as commits, n = 1..commits."""
    assert sequence_counts(primary) == (commits, commits, commits), sequence_counts(primary)
    assert sequence_counts(replica) == (commits, commits, commits), (
        f"replica server_id {replica.server_id}: (rows, distinct, max) {sequence_counts(replica)}, "
        f"{commits} transactions committed on the primary")


def gtid_binlog_pos(server: MariaDB) -> str:
    return str(server.sql("SELECT @@GLOBAL.gtid_binlog_pos")[0][0])


def wait_while_moving(position: Callable[[], T], reached: Callable[[T], bool], still: float, what: str) -> None:
    """Until ``reached(position())``, failing once the position stayed the same for ``still`` seconds:
    a long backlog (a long fault run leaves gigabytes and hundreds of thousands of transactions) is
    worked through at its own pace, a stall fails."""
    seen, moved_at = None, time.monotonic()

    def arrived() -> bool:
        nonlocal seen, moved_at
        now = position()
        if reached(now):
            return True
        if now != seen:
            seen, moved_at = now, time.monotonic()
        elif time.monotonic() - moved_at > still:
            raise WaitTimeout(f"{what}: it stayed at {now} for {still:g} s")
        return False

    wait_for(arrived, PATIENCE, f"{what} in {PATIENCE:g} s")


def wait_replica_gtid(primary: MariaDB, replica: MariaDB, timeout: float = 120.0) -> None:
    """Until the replica executed the primary's whole GTID position, failing at once if it stopped,
    and once it executed nothing for ``timeout`` seconds."""
    def executed() -> str:
        status = replica.slave_status()
        if is_stopped(status):
            raise ReplicationStopped(f"replica server_id {replica.server_id} stopped: {replica_summary(status)}")
        return str(replica.sql("SELECT @@GLOBAL.gtid_slave_pos")[0][0])

    wait_while_moving(executed, lambda now: now == gtid_binlog_pos(primary), timeout,
                      f"replica server_id {replica.server_id} did not reach {gtid_binlog_pos(primary)}")


def wait_relay_caught_up(primary: MariaDB, relay: RelayProcess, timeout: float = 120.0) -> None:
    """Until the relay stored the primary's newest file to its end, failing at once if the relay
    exits, and once it stored nothing for ``timeout`` seconds."""
    def newest() -> tuple[str, int] | None:
        relay.check_alive()
        names = read_index(relay.data_dir)
        return (names[-1], (relay.data_dir / names[-1]).stat().st_size) if names else None

    wait_while_moving(newest, lambda now: now == primary.binlog_files()[-1], timeout,
                      "the relay did not store the primary's newest file to its end")


@dataclass(frozen=True)
class Recovery:
    """Seconds from the call of converged() until the relay was a mirror, and until every replica was current."""

    mirror: float
    replicas: float

    def __str__(self) -> str:
        return f"mirror {self.mirror:.1f}s, replicas {self.replicas:.1f}s"


def converged(primary: MariaDB, relay: RelayProcess, replicas: list[MariaDB], commits: int | None = None,
              timeout: float = 120.0) -> Recovery:
    """Wait until the relay's files are the primary's and every replica executed everything, then check
    the data (CHECKSUM TABLE, and each load transaction exactly once when commits is given); returns how
    long the waiting took (the time to recover, counted from the call)."""
    started = time.monotonic()
    wait_binlog_settled(primary, timeout)
    wait_relay_caught_up(primary, relay, timeout)
    wait_for_mirror(primary, relay, timeout=timeout)
    mirror = time.monotonic() - started
    for replica in replicas:
        wait_replica_gtid(primary, replica, timeout)
    recovered = Recovery(mirror, time.monotonic() - started)
    for replica in replicas:
        # caught up, its IO thread may be between two connections (a kill's reconnect): running again soon
        wait_for(lambda replica=replica: replica.slave_status()["Slave_IO_Running"] == "Yes", timeout,
                 f"replica server_id {replica.server_id}: its IO thread did not run again")
        assert_healthy(replica)
        assert_same_data(primary, replica)
        if commits is not None:
            assert_exactly_once(primary, replica, commits)
    return recovered


def converged_after_purges(primary: MariaDB, relay: RelayProcess, replicas: list[MariaDB], commits: int,
                           timeout: float = 120.0) -> Recovery:
    """converged() for a relay whose retention purged its oldest files: the files it keeps are the
    primary's files of those names, its newest the primary's newest; every replica holds every
    transaction exactly once."""
    started = time.monotonic()
    wait_binlog_settled(primary, timeout)
    wait_relay_caught_up(primary, relay, timeout)

    def mirrored() -> bool:
        relay.check_alive()
        names = read_index(relay.data_dir)
        if not names or names[-1] != primary.binlog_files()[-1][0]:
            return False
        problems = copy_differences([primary.binlog_path(name) for name in names], relay.data_dir)
        # Retention goes on purging while the files are compared (an archive's backlog of thousands
        # is purged as it is uploaded): a file it took away meanwhile is not a difference.
        purged = set(names) - set(read_index(relay.data_dir))
        return not [problem for problem in problems if problem.partition(":")[0] not in purged]

    wait_for(mirrored, timeout, "the relay's files did not become the primary's")
    mirror = time.monotonic() - started
    for replica in replicas:
        wait_replica_gtid(primary, replica, timeout)
        assert_exactly_once(primary, replica, commits)
    return Recovery(mirror, time.monotonic() - started)


def written_bytes(relay: RelayProcess) -> int:
    """Bytes the running relay process appended to its binlog files: a counter, which retention's
    purges do not lower (a sum of the stored files' sizes does)."""
    return int(metric(relay, "binlog_relay_stored_written_bytes_total") or 0)


# ------------------------------------------------------------------ the relay's metrics


def scrape(relay: RelayProcess) -> Scrape:
    return Scrape.fetch(relay.metrics_port)


def metric(relay: RelayProcess, name: str, **labels: Any) -> float | None:
    return scrape(relay).value(name, **labels)


def endpoint_texts(relay: RelayProcess) -> str:
    """/metrics, /healthz and /readyz bodies, for the secrets check."""
    return "\n".join(http_get(relay.metrics_port, path)[1] for path in ("/metrics", "/healthz", "/readyz"))

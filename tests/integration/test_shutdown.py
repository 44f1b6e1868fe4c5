"""Clean shutdown on SIGTERM / SIGINT while a real MariaDB primary commits small transactions and a
MariaDB replica reads from the relay: a prompt exit 0, a state file naming a durable checkpoint,
stored files that end at an event-group boundary, and a restart that carries on without repairs."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time

import pymysql
import pytest

from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess, relay_config, start_relay
from relay.sandbox.replication import FIRST_FILE, attach_replica, wait_caught_up
from relay.storage.files import IN_USE_FLAG_OFFSET
from tests.support.mariadb import MariaDB
from tests.support.metrics import RawDump
from tests.support.relay import wait_for_mirror
from tests.support.replication import WriteLoad, assert_healthy

STOP_WITHIN = 5.0
# MariaDB event types that begin something other than the middle of an event group: a stored file
# may end right before one of these (or at the primary's current end of the file).
NOT_INSIDE_A_GROUP = {"Gtid", "Gtid_list", "Binlog_checkpoint", "Rotate", "Stop", "Format_desc"}


def _group_boundaries(primary: MariaDB, name: str) -> tuple[set[int], dict[int, str], dict[int, int]]:
    """Positions in the primary's file ``name`` where no event group is open; the event type starting
    at each position, and where that event ends (SHOW BINLOG EVENTS)."""
    rows = primary.sql(f"SHOW BINLOG EVENTS IN '{name}'")
    starts = {int(row[1]): str(row[2]) for row in rows}
    ends = {int(row[1]): int(row[4]) for row in rows}
    boundaries = {4} | {pos for pos, kind in starts.items() if kind in NOT_INSIDE_A_GROUP}
    boundaries.add(max(ends.values()))  # the end of what the primary has written so far
    return boundaries, starts, ends


def _same_prefix(stored: bytes, primary_copy: bytes) -> bool:
    mine, theirs = bytearray(stored), bytearray(primary_copy[: len(stored)])
    if len(mine) > IN_USE_FLAG_OFFSET:
        mine[IN_USE_FLAG_OFFSET] &= 0xFE
        theirs[IN_USE_FLAG_OFFSET] &= 0xFE
    return mine == theirs


def _stop_with(relay: RelayProcess, signum: signal.Signals) -> float:
    assert relay.proc is not None
    started = time.monotonic()
    relay.proc.send_signal(signum)
    try:
        code = relay.proc.wait(STOP_WITHIN)
    except subprocess.TimeoutExpired:
        relay.kill9()
        raise AssertionError(f"the relay did not exit within {STOP_WITHIN} s of {signum.name}:\n"
                             f"{relay.log_text()[-3000:]}") from None
    elapsed = time.monotonic() - started
    assert code == 0, f"exit code {code} after {signum.name}:\n{relay.log_text()[-3000:]}"
    return elapsed


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_under_write_load(mariadb_factory, tmp_path, signum):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=262144"])
    replica = mariadb_factory(server_id=2)
    relay = start_relay(tmp_path / "relay", primary.port)
    load = WriteLoad(primary)
    try:
        attach_replica(replica, relay.port)
        load.start()
        # under way: commits flow through the relay into the replica, across a rotation or two
        wait_for(lambda: len(relay.stored_files()) >= 2 and
                 replica.sql("SELECT COUNT(*) FROM loadtest.t")[0][0] > 300, 30,
                 "the write load did not reach the replica through the relay",
                 ignore=(pymysql.err.MySQLError,))  # loadtest.t not created on the replica yet
        # and a consumer that stopped reading, with the relay blocked sending to it
        stalled = RawDump(relay.port, rcvbuf=4096)
        stalled.start_dump(FIRST_FILE, 4, server_id=77)
        primary.execute_many(["CREATE TABLE loadtest.big (id INT PRIMARY KEY, v LONGTEXT)",
                              f"INSERT INTO loadtest.big VALUES (1, REPEAT('x', {8 << 20}))"])
        wait_for(lambda: any((relay.data_dir / name).stat().st_size > 8 << 20 for name in relay.stored_files()),
                 15, "the big row was not stored", ignore=(FileNotFoundError,))
        commits_at_signal = load.commits
        try:
            elapsed = _stop_with(relay, signum)
        finally:
            stalled.close()
        log_after_stop = relay.log_text()
        assert f"received {signum.name}, stopping" in log_after_stop
        assert "relay stopped; state written" in log_after_stop
        assert "Traceback" not in log_after_stop

        # The state file parses and names a checkpoint at or before the stored end.
        stored = relay.stored_files()
        state = json.loads((relay.data_dir / "relay-state.json").read_text())
        checkpoint = state["checkpoint"]
        assert checkpoint["file"] in stored, (checkpoint, stored)
        last = stored[-1]
        end = (relay.data_dir / last).stat().st_size
        if checkpoint["file"] == last:
            assert 4 <= checkpoint["position"] <= end, (checkpoint, end)
        assert state["upstream_server_id"] == primary.server_id

        # Every stored file is a prefix of the primary's, and the last one ends at a group boundary.
        for name in stored:
            assert _same_prefix((relay.data_dir / name).read_bytes(), primary.binlog_path(name).read_bytes()), name
        boundaries, starts, ends = _group_boundaries(primary, last)
        assert end in boundaries, (
            f"{last} ends at {end}, inside an event group (the primary's event there: {starts.get(end)!r}; "
            f"the nearest group boundaries: {sorted(b for b in boundaries if abs(b - end) < 3000)})")

        # A restart finds nothing to repair and catches up, while the load goes on.
        offset = len(log_after_stop)
        relay.start()
        relay.wait_listening()
        wait_for(lambda: "upstream: dumping from" in relay.log_text()[offset:], 15, "the restarted relay did not dump")
        restart_log = relay.log_text()[offset:]
        assert "recovery:" not in restart_log, restart_log
        # it resumes at the stored end, re-reading the last stored event to check the history
        resumed = re.search(r"upstream: dumping from (\S+):(\d+)", restart_log)
        assert resumed and resumed.group(1) == last, restart_log
        resume_at = int(resumed.group(2))
        assert resume_at == end or ends.get(resume_at) == end, (resume_at, end, restart_log)
        wait_for(lambda: load.commits > commits_at_signal + 200, 30, "the write load stalled")
        commits = load.stop()

        wait_for_mirror(primary, relay)
        wait_caught_up(primary, replica)
        assert_healthy(replica)
        rows = primary.sql("SELECT COUNT(*), SUM(n) FROM loadtest.t")[0]
        assert rows[0] == 3 * commits, (rows, commits)
        assert replica.sql("SELECT COUNT(*), SUM(n) FROM loadtest.t")[0] == rows
    finally:
        load.stop_quietly()
        if relay.alive():
            assert relay.stop() == 0
    assert elapsed < STOP_WITHIN
    assert "Traceback" not in relay.log_text()


class HoldingProxy:
    """A TCP forwarder between the relay and the primary that changes no byte, but stops passing the
    primary's bytes on once ``hold_at`` of them have gone through (the relay then waits in the middle
    of whatever it was receiving) until ``release()``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.forwarded = 0  # bytes from the primary, all connections
        self.hold_at: int | None = None
        self.holding = threading.Event()
        self._released = threading.Event()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                return
            self._socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_primary: bool) -> None:
        try:
            while True:
                want = 1 << 16
                if from_primary and self.hold_at is not None and not self._released.is_set():
                    if self.forwarded >= self.hold_at:
                        self.holding.set()
                        self._released.wait()
                        continue
                    want = min(want, self.hold_at - self.forwarded)
                data = source.recv(want)
                if not data:
                    break
                sink.sendall(data)
                if from_primary:
                    self.forwarded += len(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.close()
            except OSError:
                pass

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self.release()
        for sock in [self._listener, *self._socks]:
            try:
                sock.close()
            except OSError:
                pass


def test_sigterm_in_the_middle_of_a_large_transaction(mariadb_factory, tmp_path):
    """The relay has stored part of an event group when SIGTERM comes: it cuts that part off, exits
    0, and the restarted relay fetches the whole group again without any recovery repair."""
    primary = mariadb_factory(server_id=1)
    proxy = HoldingProxy(primary.port)
    relay = RelayProcess(tmp_path / "relay", relay_config(tmp_path / "relay" / "data", proxy.port))
    relay.start()
    relay.wait_listening()
    try:
        primary.execute_many(["CREATE DATABASE big", "CREATE TABLE big.t (id INT PRIMARY KEY, v TEXT)"])
        wait_for_mirror(primary, relay)
        name, group_start = primary.master_status()
        path = relay.data_dir / name
        assert path.stat().st_size == group_start
        proxy.hold_at = proxy.forwarded + 4 * 1024 * 1024  # 4 MB into the ~8 MB transaction
        primary.execute_many(["BEGIN"] + [
            f"INSERT INTO big.t SELECT seq + {k * 1000}, REPEAT('x', 1000) FROM big.seq_1_to_1000" for k in range(8)
        ] + ["COMMIT"])
        assert primary.master_status()[1] - group_start > 8 * 1000 * 1000
        assert proxy.holding.wait(15), "the proxy never held the stream"
        # the relay has written part of the group (appended as it arrives) but not committed it
        wait_for(lambda: path.stat().st_size > group_start + 3 * 1024 * 1024, 5, "the relay stored no partial group")

        _stop_with(relay, signal.SIGTERM)
        assert "reconnecting" not in relay.log_text(), "the relay gave up on the held stream before the signal"
        assert path.stat().st_size == group_start, "the partial event group was not cut off at shutdown"
        checkpoint = json.loads((relay.data_dir / "relay-state.json").read_text())["checkpoint"]
        assert (checkpoint["file"], checkpoint["position"]) == (name, group_start), checkpoint

        proxy.release()
        offset = len(relay.log_text())
        relay.start()
        wait_for_mirror(primary, relay)
        assert "recovery:" not in relay.log_text()[offset:]
    finally:
        proxy.close()
        if relay.alive():
            assert relay.stop() == 0
    assert "Traceback" not in relay.log_text()

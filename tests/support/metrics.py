"""Helpers of the operations tests (test_metrics, test_retention, test_shutdown).

Reading the relay's HTTP endpoint: /metrics parsed into samples, /healthz, /readyz, and
``promtool check metrics`` on the scraped text:

    scrape = Scrape.fetch(port)
    scrape.value("binlog_relay_upstream_events_total", type="xid")   # None when absent
    promtool_check(scrape.text)                                      # AssertionError on a finding

and around it: ``start_relay`` (with a known metrics port), ``attach_replica`` / ``wait_caught_up``
for MariaDB replicas of the relay, ``WriteLoad`` (small transactions in a thread), and ``RawDump``,
a raw dump client built on the relay's own sans-IO ``ClientConnection`` (a dump that stops reading).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from relay.protocol.client import NEED_DATA, ClientConnection, Connected

from .mariadb import MariaDB, wait_for
from .relay import RelayProcess, relay_config

PROMTOOL_HINT = "promtool is missing: install it with `apt-get install -y prometheus` (Debian ships promtool in it)"


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:port/path; 4xx/5xx are returned, not raised."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass(frozen=True)
class Scrape:
    """One /metrics scrape: the text and its samples by (name, sorted labels)."""

    text: str
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]

    @classmethod
    def fetch(cls, port: int) -> Scrape:
        status, text = http_get(port, "/metrics")
        assert status == 200, f"/metrics answered {status}: {text[:500]}"
        return cls.parse(text)

    @classmethod
    def parse(cls, text: str) -> Scrape:
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
        return cls(text, samples)

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def require(self, name: str, **labels: str) -> float:
        value = self.value(name, **labels)
        if value is None:
            present = sorted({f"{n}{dict(l) if l else ''}" for n, l in self.samples if n.startswith(name)})
            raise AssertionError(f"no sample {name}{labels or ''} in the scrape; samples of that name: {present}")
        return value

    def label_values(self, name: str, label: str) -> set[str]:
        return {dict(labels)[label] for n, labels in self.samples if n == name and label in dict(labels)}


def promtool_path() -> str:
    path = shutil.which("promtool")
    if path is None:
        raise AssertionError(PROMTOOL_HINT)
    return path


def promtool_check(text: str) -> None:
    """``promtool check metrics`` reads the exposition on stdin; any finding (syntax or lint) fails."""
    result = subprocess.run([promtool_path(), "check", "metrics"], input=text, capture_output=True, text=True,
                            timeout=30)
    findings = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and not findings, (
        f"promtool check metrics failed (exit {result.returncode}):\n{findings}\n--- the scraped text ---\n{text}")


# ------------------------------------------------------------------------------------------
# Shared by the operations tests (test_metrics, test_retention, test_shutdown): the relay with a
# known metrics port, MariaDB replicas of it, a write load, and a raw dump client.
# ------------------------------------------------------------------------------------------

FIRST_FILE = "mysql-bin.000001"


def start_relay(work_dir: Path, upstream_port: int, *, metrics_port: int | None = None,
                **overrides: Any) -> RelayProcess:
    """A relay subprocess in work_dir (relay.yaml, relay.log, data/), listening for replicas when
    returned; with metrics_port, its /metrics endpoint is on 127.0.0.1:metrics_port and answering."""
    if metrics_port is not None:
        overrides["metrics"] = {"host": "127.0.0.1", "port": metrics_port}
    relay = RelayProcess(work_dir, relay_config(work_dir / "data", upstream_port, **overrides))
    relay.start()
    relay.wait_listening()
    if metrics_port is not None:
        wait_for(lambda: http_get(metrics_port, "/healthz")[0] == 200, 15,
                 f"no metrics endpoint on port {metrics_port}", ignore=(urllib.error.URLError, ConnectionError))
    return relay


def attach_replica(replica: MariaDB, port: int, log_file: str = FIRST_FILE, log_pos: int = 4) -> None:
    """CHANGE MASTER TO 127.0.0.1:port (file/position, repl/replpass) and START SLAVE."""
    replica.change_master("127.0.0.1", port, log_file=log_file, log_pos=log_pos)
    replica.start_slave()


def _slave_summary(status: dict[str, Any]) -> str:
    keys = ("Slave_IO_Running", "Slave_SQL_Running", "Master_Log_File", "Read_Master_Log_Pos",
            "Relay_Master_Log_File", "Exec_Master_Log_Pos", "Last_IO_Errno", "Last_IO_Error", "Last_SQL_Errno",
            "Last_SQL_Error")
    return ", ".join(f"{key}={status.get(key)!r}" for key in keys)


def wait_caught_up(primary: MariaDB, replica: MariaDB, timeout: float = 45.0) -> dict[str, Any]:
    """Poll SHOW SLAVE STATUS until the replica executed up to the primary's SHOW MASTER STATUS (read
    again at every poll: MariaDB appends a Binlog_checkpoint event a moment after a rotation); fail
    at once if its SQL thread stopped (the IO thread may be reconnecting: that is allowed)."""
    last: dict[str, Any] = {}
    target: tuple[str, int] = ("", 0)

    def arrived() -> bool:
        nonlocal last, target
        last = replica.slave_status()
        if last.get("Slave_SQL_Running") == "No":
            raise AssertionError(f"replica server_id {replica.server_id}: SQL thread stopped: {_slave_summary(last)}")
        target = primary.master_status()
        return (last["Relay_Master_Log_File"], int(last["Exec_Master_Log_Pos"])) == target

    try:
        wait_for(arrived, timeout, f"replica server_id {replica.server_id} did not reach the primary's position")
    except AssertionError as exc:
        raise AssertionError(f"{exc} {target}; its status: {_slave_summary(last)}") from None
    return last


def assert_replica_healthy(replica: MariaDB) -> None:
    status = replica.slave_status()
    assert status["Slave_IO_Running"] == "Yes" and status["Slave_SQL_Running"] == "Yes", _slave_summary(status)
    assert int(status["Last_IO_Errno"]) == 0 and int(status["Last_SQL_Errno"]) == 0, _slave_summary(status)


class WriteLoad:
    """Small transactions (3 inserts and an update) committed one after another on the primary, in
    a thread, until stop(). The table is ``loadtest.t``; every commit adds 3 rows."""

    def __init__(self, primary: MariaDB, schema: str = "loadtest") -> None:
        self.primary = primary
        self.schema = schema
        self.commits = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        primary.execute_many([f"CREATE DATABASE IF NOT EXISTS {schema}",
                              f"CREATE TABLE IF NOT EXISTS {schema}.t (id INT PRIMARY KEY AUTO_INCREMENT,"
                              " v VARCHAR(255), n INT)"])
        self._thread = threading.Thread(target=self._run, name="write-load", daemon=True)

    def _run(self) -> None:
        try:
            conn = self.primary.connect()
            try:
                with conn.cursor() as cur:
                    while not self._stop.is_set():
                        cur.execute("BEGIN")
                        for _ in range(3):
                            cur.execute(f"INSERT INTO {self.schema}.t (v, n) VALUES (REPEAT('v', 200), 1)")
                        cur.execute(f"UPDATE {self.schema}.t SET n = n + 1 WHERE id = LAST_INSERT_ID()")
                        cur.execute("COMMIT")
                        self.commits += 1
            finally:
                conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def start(self) -> WriteLoad:
        self._thread.start()
        return self

    def stop_quietly(self) -> None:
        """For a finally: stop if running, raise nothing."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def stop(self) -> int:
        """Stop after the transaction in progress; the number of commits. Raises if the load failed."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the write load did not stop"
        if self.error is not None:
            raise AssertionError(f"the write load failed: {self.error!r}")
        return self.commits


class RawDump:
    """A blocking-socket client of the relay, driven by the relay's own sans-IO ClientConnection:
    logs in, runs queries, and sends COM_BINLOG_DUMP for dumps a MariaDB replica cannot be made to do
    (a consumer that stops reading: give a small ``rcvbuf`` and never call ``packets``)."""

    def __init__(self, port: int, user: str = "repl", password: str = "replpass", *, rcvbuf: int | None = None,
                 timeout: float = 15.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect, so the window the relay sees is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.conn = ClientConnection(user, password)
        event = self._next_event()
        assert isinstance(event, Connected), event

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def _receive(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the relay closed the connection")
        self.conn.receive_data(data)

    def _next_event(self) -> object:
        while True:
            event = self.conn.next_event()
            self._flush()  # what handling the last packet queued (the handshake response, a command)
            if event is not NEED_DATA:
                return event
            self._receive()

    def query(self, sql: str) -> object:
        """A ResultSet or OkPacket; an ERR raises relay.protocol.packets.ServerError."""
        self.conn.query(sql)
        return self._next_event()

    def start_dump(self, file: str, position: int, server_id: int, *, checksum: bool = True,
                   flags: int = 0) -> None:
        if checksum:
            self.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        self.conn.binlog_dump(file, position, server_id, flags)
        self._flush()

    def first_packet(self) -> bytes:
        """The first packet of the dump stream (an ERR packet starts with 0xFF)."""
        while True:
            packets = self.conn.read_binlog_packets()
            if packets:
                return bytes(packets[0])
            self._receive()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> RawDump:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

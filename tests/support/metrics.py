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
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .mariadb import MariaDB, wait_for
from .relay import RelayProcess, relay_config
from .replication import RawClient, WriteLoad  # noqa: F401 - WriteLoad is imported from here by tests

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


class RawDump(RawClient):
    """RawClient for dumps a MariaDB replica cannot be made to do (a consumer that stops
    reading: give a small ``rcvbuf`` and never read)."""

    def start_dump(self, file: str, position: int, server_id: int, flags: int = 0, *,  # type: ignore[override]
                   checksum: bool = True) -> None:
        if checksum:
            self.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        super().start_dump(file, position, server_id, flags)

    def first_packet(self) -> bytes:
        """The first packet of the dump stream (an ERR packet starts with 0xFF)."""
        return self.next_dump_packets()[0]


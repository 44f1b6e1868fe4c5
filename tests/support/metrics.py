"""Helpers of the operations tests (test_metrics, test_retention, test_shutdown).

Reading the relay's HTTP endpoint: /metrics parsed into samples, /healthz, /readyz, and
``promtool check metrics`` on the scraped text:

    scrape = Scrape.fetch(port)
    scrape.value("binlog_relay_upstream_events_total", type="xid")   # None when absent
    promtool_check(scrape.text)                                      # AssertionError on a finding

and ``RawDump``, a raw dump client for a dump that stops reading.  The relay itself with a known
metrics port is relay.sandbox.relayprocess.start_relay(..., metrics_port=PORT).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from relay.sandbox.relayprocess import http_get

from .replication import RawClient

PROMTOOL_HINT = "promtool is missing: install it with `apt-get install -y prometheus` (Debian ships promtool in it)"


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
            present = sorted({f"{n}{dict(ls) if ls else ''}" for n, ls in self.samples if n.startswith(name)})
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


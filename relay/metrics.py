"""Prometheus metrics: collects the figures the rest of the relay keeps and exports them.

The figures are plain counters on the objects that own them (UpstreamStatus, RelayLog, Registry,
the dump streams) and bounded histograms of relay/stats.py; this module only reads them at scrape
time (a custom collector) and derives the lags, so ingest and serving pay nothing per event for
metrics and nothing grows between scrapes.  The HTTP endpoint is relay/httpserver.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .binlog.events import HEARTBEAT_LOG_EVENT, HEARTBEAT_LOG_EVENT_V2, event_name
from .binlog.names import file_number
from .downstream.registry import Registry
from .ingest.lag import lag_seconds
from .ingest.status import UpstreamStatus
from .storage.relaylog import RelayLog

if TYPE_CHECKING:  # a relay without an archive does not load it (relay/app.py)
    from .archive.archiver import Archiver

PREFIX = "binlog_relay"
Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily


class RelayCollector(Collector):
    def __init__(self, upstream: UpstreamStatus, relay_log: RelayLog, registry: Registry,
                 archiver: Archiver | None = None) -> None:
        self.upstream = upstream
        self.relay_log = relay_log
        self.registry = registry
        self.archiver = archiver

    def collect(self) -> Iterator[Family]:
        yield from self._upstream()
        yield from self._storage()
        yield from self._downstream()
        if self.archiver is not None:
            yield from self._archive(self.archiver)

    # ------------------------------------------------------------ archive

    def _archive(self, archiver: Archiver) -> Iterator[Family]:
        status = archiver.status
        lag_files, lag_bytes = archiver.lag()
        yield _gauge("archive_lag_files", "Closed stored files not archived yet", lag_files)
        yield _gauge("archive_lag_bytes", "Bytes of the closed stored files not archived yet", lag_bytes)
        yield _gauge("archive_files", "Files in the archive", len(archiver.files))
        yield _gauge("archive_store_up", "1 while the archive's object store answered the archiver's last round",
                     int(status.store_ok))
        offset = archiver.clock.offset()
        yield _gauge("archive_store_clock_offset_seconds", "The object store's clock minus this host's, from the Date "
                     "of its last answer, to about a second (S3 refuses requests more than 900 s off; NaN before "
                     "its first answer)", math.nan if offset is None else offset)
        yield _gauge("archive_writer", "1 while this relay writes the archive, 0 while it reads one another relay "
                     "of its primary writes", int(status.writing))
        yield _counter("archive_uploaded_files", "Files uploaded to the archive and verified there",
                       status.uploaded_files)
        yield _counter("archive_uploaded_file_bytes", "Bytes of the binlog files uploaded to the archive",
                       status.uploaded_file_bytes)
        yield _counter("archive_uploaded_object_bytes", "Bytes of their compressed (and encrypted) objects",
                       status.uploaded_object_bytes)
        ratio = status.uploaded_file_bytes / status.uploaded_object_bytes if status.uploaded_object_bytes else math.nan
        yield _gauge("archive_compression_ratio", "File bytes per object byte of the files uploaded since start "
                     "(NaN before the first)", ratio)
        yield _counter("archive_deleted_files", "Archived files deleted by archive.retention", status.deleted_files)
        yield _labelled_counter("archive_errors", "Archive operations that failed, by operation (claim, list, verify, "
                                "upload, delete, read, compare: a local file whose archived copy is other bytes)",
                                "operation", status.errors)
        yield _counter("archive_damaged_reads", "Reads of archived objects that failed their checks (damaged, "
                       "cut short, wrong key)", status.damaged_reads)
        yield _counter("archive_served_bytes", "Bytes of archived files read back for clients", status.served_bytes)

    # ------------------------------------------------------------ upstream

    def _upstream(self) -> Iterator[Family]:
        status = self.upstream
        yield _gauge("upstream_connected", "1 while the relay is connected to the primary and dumping",
                     int(status.connected))
        yield _counter("upstream_reconnects", "Connections to the primary lost and retried", status.reconnects)
        yield _counter("upstream_received_bytes", "Bytes received from the primary", status.bytes_received)
        events = CounterMetricFamily(f"{PREFIX}_upstream_events", "Binlog events received, by type",
                                     labels=["type"])
        event_bytes = CounterMetricFamily(f"{PREFIX}_upstream_event_bytes",
                                          "Bytes of binlog events received, by type", labels=["type"])
        stream = status.stream
        if stream is not None:
            for etype, count in enumerate(stream.event_counts):
                if count:
                    events.add_metric([event_name(etype)], count)
                    event_bytes.add_metric([event_name(etype)], stream.event_bytes[etype])
        yield events
        yield event_bytes
        heartbeats = CounterMetricFamily(f"{PREFIX}_upstream_heartbeats", "Heartbeats received from the primary "
                                         "(on the current connection), by version (2: MySQL 8.0.26+'s)",
                                         labels=["version"])
        for etype, version in ((HEARTBEAT_LOG_EVENT, "1"), (HEARTBEAT_LOG_EVENT_V2, "2")):
            heartbeats.add_metric([version], stream.heartbeats[etype] if stream is not None else 0)
        yield heartbeats
        last = stream.last_event_timestamp if stream else 0
        yield _gauge("upstream_last_event_timestamp_seconds", "Timestamp of the newest stored event", last)
        yield _gauge("upstream_lag_seconds", "As a replica's Seconds_Behind_Master: 0 when everything the "
                     "primary sent is read and committed, else the age of the newest stored event (primary's "
                     "clock); NaN while not connected", self._upstream_lag_seconds())
        yield from self._failover()

    def _failover(self) -> Iterator[Family]:
        status = self.upstream
        current = GaugeMetricFamily(f"{PREFIX}_upstream_current", "1 for the candidate primary replicated from "
                                    "(upstream.hosts)", labels=["candidate"])
        if status.current is not None:
            current.add_metric([str(status.current)], int(status.connected))
        yield current
        yield _counter("upstream_switches", "Times ingest moved to another candidate primary", status.switches)
        yield _labelled_counter("upstream_candidates_refused", "Candidate primaries refused, by reason "
                                "(read_only, replicating, behind, diverged; position: not followable by file and "
                                "position, with MASTER_USE_GTID=no)", "reason", status.refusals)
        yield _gauge("upstream_semi_sync", "1 while the relay is a semi-sync replica of its primary",
                     int(status.semi_sync and status.connected))
        yield _counter("upstream_semi_sync_acks", "Transactions acknowledged to a semi-sync primary",
                       status.semi_sync_acks)
        yield _gauge("upstream_stopped", "1 while ingest is stopped by STOP SLAVE (replicas are served what is "
                     "stored; START SLAVE resumes)", int(status.stopped))
        yield _gauge("upstream_disk_full", "1 while ingest waits for space in data_dir (serving goes on)",
                     int(status.disk_full))
        yield _counter("upstream_disk_full_pauses", "Times ingest paused because data_dir was full",
                       status.disk_full_pauses)
        yield _counter("semi_sync_replica_timeouts", "Times the relay stopped waiting for its semi-sync replicas "
                       "(semi_sync.replica_timeout) and acknowledged alone", status.replica_ack_timeouts)

    def _upstream_lag_seconds(self) -> float:
        """MariaDB's Seconds_Behind_Master for the relay (relay/ingest/lag.py), NaN for NULL."""
        return lag_seconds(self.upstream, self.relay_log.committed, time.time())

    # ------------------------------------------------------------ storage

    def _storage(self) -> Iterator[Family]:
        files = list(self.relay_log.files)
        yield _gauge("stored_files", "Binlog files in the data directory", len(files))
        yield _gauge("stored_bytes", "Bytes of binlog files in the data directory",
                     sum(self._size(name) for name in files))
        committed = self.relay_log.committed
        yield _gauge("committed_file_number", "Sequence number of the file holding the committed end",
                     _file_number(committed[0]) if committed else 0)
        yield _gauge("committed_position_bytes", "Offset of the committed end in that file",
                     committed[1] if committed else 0)
        yield _counter("stored_written_bytes", "Bytes appended to binlog files", self.relay_log.bytes_written)
        yield _counter("purged_files", "Binlog files removed by retention or PURGE BINARY LOGS",
                       self.relay_log.purged_files)
        fsync = self.relay_log.fsync_seconds
        yield HistogramMetricFamily(f"{PREFIX}_fsync_duration_seconds", "Time an fsync of a binlog file took",
                                    buckets=fsync.cumulative(), sum_value=fsync.sum)

    def _size(self, name: str) -> int:
        try:
            return self.relay_log.file_end(name)
        except OSError:
            return 0

    # ------------------------------------------------------------ downstream

    def _downstream(self) -> Iterator[Family]:
        registry = self.registry
        connections = GaugeMetricFamily(f"{PREFIX}_downstream_connections", "Downstream connections by state",
                                        labels=["state"])
        dumping = len(registry.dumps)
        for state, count in sorted(registry.sessions_by_state.items()):
            connections.add_metric([state], count - (dumping if state == "command" else 0))
        connections.add_metric(["dump"], dumping)
        yield connections
        yield _gauge("registered_replicas", "Replicas registered with COM_REGISTER_SLAVE and dumping",
                     len(registry.slave_hosts(0)))
        yield _counter("downstream_events_sent", "Binlog events sent to replicas", registry.events_sent)
        yield _counter("downstream_sent_bytes", "Bytes of binlog events sent to replicas", registry.bytes_sent)
        yield _labelled_counter("groups_filtered", "Event groups not sent to a replica, by reason", "reason",
                                registry.groups_filtered)
        yield _labelled_counter("gtid_start_passed_bytes", "Bytes of stored files GTID dumps passed over before their "
                                "start: jumped with the index of the stored history, or walked", "how",
                                registry.gtid_start_passed)
        yield _counter("auth_failures", "Downstream logins refused", registry.auth_failures)
        yield _labelled_counter("protocol_errors", "Downstream protocol errors, by kind", "kind",
                                registry.protocol_errors)
        yield from self._replica_lag()

    def _replica_lag(self) -> Iterator[Family]:
        lag_bytes = GaugeMetricFamily(f"{PREFIX}_replica_lag_bytes", "Stored bytes a replica has not been sent "
                                      "yet", labels=["server_id"])
        lag_seconds = GaugeMetricFamily(f"{PREFIX}_replica_lag_seconds", "Age difference between the newest "
                                        "stored event and the newest event sent to a replica",
                                        labels=["server_id"])
        newest = self.upstream.stream.last_event_timestamp if self.upstream.stream else 0
        for server_id, dump in sorted(self.registry.dumps.items()):
            behind = self._bytes_behind(dump.file, dump.position)
            lag_bytes.add_metric([str(server_id)], behind)
            seconds = max(0, newest - dump.last_event_timestamp) if behind and dump.last_event_timestamp else 0
            lag_seconds.add_metric([str(server_id)], seconds)
        yield lag_bytes
        yield lag_seconds

    def _bytes_behind(self, file: str, position: int) -> int:
        files = list(self.relay_log.files)
        if file not in files:
            return 0
        index = files.index(file)
        behind = self._size(file) - position + sum(self._size(name) for name in files[index + 1 :])
        return max(0, behind)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)


def _labelled_counter(name: str, doc: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=[label])
    for key, count in sorted(values.items()):
        family.add_metric([key], count)
    return family


def _file_number(name: str) -> int:
    return file_number(name) or 0


class Metrics:
    """The collector registry and its text exposition (served by relay/httpserver.py)."""

    def __init__(self, upstream: UpstreamStatus, relay_log: RelayLog, registry: Registry,
                 archiver: Archiver | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(RelayCollector(upstream, relay_log, registry, archiver))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def metrics_reference() -> str:
    """The README's metrics table: every family the relay exports, with its help text."""
    from .archive.archiver import Archiver, ArchiveSettings
    from .archive.store import StoreConfig
    from .storage.relaylog import RelayLog as _RelayLog

    relay_log = _RelayLog("/nonexistent-binlog-relay-docs")
    archiver = Archiver(ArchiveSettings(StoreConfig("s3://bucket")), relay_log)
    metrics = Metrics(UpstreamStatus(), relay_log, Registry(), archiver)
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for family in metrics.registry.collect():
        labels = list(getattr(family, "_labelnames", ())) or sorted(
            {key for sample in family.samples for key in sample.labels if key != "le"})
        name = family.name + ("_total" if family.type == "counter" else "")
        lines.append(f"| `{name}` | {family.type} | {', '.join(labels)} | {family.documentation} |")
    return "\n".join(lines)

"""What ingest reports: live figures read by the metrics (relay/metrics.py), readiness
(relay/httpserver.py) and the facts the downstream answers with (downstream/listener.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from ..replication.stream import IngestStream
from ..replication.translate import TranslatingStream
from .settings import Candidate


@dataclass
class UpstreamStatus:
    """Live figures for logs and metrics."""

    connected: bool = False
    stopped: bool = False  # by STOP SLAVE: no connection to the primary until START SLAVE
    reconnects: int = 0
    last_error: str | None = None
    last_errno: int = 0  # the MySQL error number of last_error (ingest/errors.py, error_number)
    last_error_time: float | None = None  # time.time() of last_error
    server_version: str | None = None
    server_id: int | None = None
    checksum_alg: int | None = None
    stream: IngestStream | TranslatingStream | None = None
    events_received: int = 0
    bytes_received: int = 0
    connected_event: trio.Event = field(default_factory=trio.Event)
    current: Candidate | None = None  # the candidate replicated from (or last tried)
    semi_sync: bool = False  # the current dump is semi-sync: the primary waits for the relay's ACKs
    semi_sync_acks: int = 0
    clock_difference: float = 0.0  # this machine's clock minus the primary's, taken at connect
    # bytes the primary sent that wait unread on this machine (the current connection's receive queue)
    unread_bytes: Callable[[], int] = lambda: 0
    disk_full: bool = False  # ingest is paused: data_dir has no space
    disk_full_pauses: int = 0
    # time.monotonic() when ingest last stopped working (or the relay started), None while it works
    failing_since: float | None = field(default_factory=time.monotonic)
    replica_ack_timeouts: int = 0  # ACKs sent without the replicas' after semi_sync.replica_timeout
    switches: int = 0  # times ingest moved to another candidate than the one before
    refusals: dict[str, int] = field(default_factory=dict)  # candidates refused, by reason

"""What ingest is told: the candidate primaries and how to reach, follow and acknowledge them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Candidate:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class UpstreamSettings:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    relay_server_id: int
    start_file: str | None = None
    heartbeat_period: float = 15.0
    connect_timeout: float = 10.0
    reconnect_initial_delay: float = 0.5
    reconnect_max_delay: float = 30.0
    ssl_mode: str = "disabled"
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    # upstream.hosts: the candidate primaries in order of preference (empty: host and port alone)
    candidates: tuple[Candidate, ...] = ()
    semi_sync: bool = False
    behind_wait: float = 0.0  # upstream.behind_wait
    server_public_key: bytes | None = field(default=None, repr=False)  # PEM, for caching_sha2 over RSA
    wait_for_replicas: int = 0  # semi_sync.wait_for_replicas
    replica_timeout: float = 10.0

    @property
    def all_candidates(self) -> tuple[Candidate, ...]:
        return self.candidates or (Candidate(self.host, self.port),)

    @property
    def replica_uuid(self) -> str:
        """The relay's @replica_uuid towards a MySQL primary: the same for every connection."""
        return str(uuid.uuid5(uuid.NAMESPACE_OID, f"binlog-relay-{self.relay_server_id}"))

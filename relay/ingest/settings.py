"""What ingest is told: the candidate primaries and how to reach, follow and acknowledge them; what
CHANGE MASTER TO changes of it (``UpstreamChange``), and the upstream as an operator sees it
(``EffectiveUpstream``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

# MASTER_USE_GTID's values.  "no": the relay follows only a server that serves its stored files
# (the primary that wrote them, or a relay of it), by file and position.  "slave_pos" and
# "current_pos" (the same for the relay, which has no transactions of its own): it also follows any
# other server holding its history, by GTID into files of its own (decision 8).
USE_GTID_MODES = ("no", "slave_pos", "current_pos")


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
    start_gtid: str | None = None  # upstream.start.gtid: a fresh data_dir begins with the file holding it
    use_gtid: str = "slave_pos"  # one of USE_GTID_MODES
    # Set by CHANGE MASTER TO: the one upstream is vetted like a candidate on every connect (its
    # history must hold the stored one), but need not be writable (a replica may be chosen on purpose).
    repointed: bool = False

    @property
    def all_candidates(self) -> tuple[Candidate, ...]:
        return self.candidates or (Candidate(self.host, self.port),)

    @property
    def replica_uuid(self) -> str:
        """The relay's @replica_uuid towards a MySQL primary: the same for every connection."""
        return str(uuid.uuid5(uuid.NAMESPACE_OID, f"binlog-relay-{self.relay_server_id}"))


@dataclass(frozen=True)
class UpstreamChange:
    """The options of one CHANGE MASTER TO; None: not given (the current value stays, as on MariaDB).
    An empty ssl_ca, ssl_cert or ssl_key clears it."""

    host: str | None = None
    port: int | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: bool | None = None
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    ssl_verify_server_cert: bool | None = None
    use_gtid: str | None = None

    def applied_to(self, settings: UpstreamSettings, current: Candidate) -> UpstreamSettings:
        """``settings`` following one upstream as this change says, from ``current`` (the candidate
        followed now) for what it leaves out."""
        ssl_ca = _path_or_cleared(self.ssl_ca, settings.ssl_ca)
        ssl_mode = settings.ssl_mode
        if (self.ssl, self.ssl_ca, self.ssl_verify_server_cert) != (None, None, None):
            enabled = self.ssl if self.ssl is not None else settings.ssl_mode != "disabled"
            verify = (self.ssl_verify_server_cert if self.ssl_verify_server_cert is not None
                      else settings.ssl_mode == "verify_identity")
            ssl_mode = ssl_mode_of(enabled, ssl_ca, verify)
        return replace(
            settings, host=self.host if self.host is not None else current.host,
            port=self.port if self.port is not None else current.port, candidates=(),
            user=self.user if self.user is not None else settings.user,
            password=self.password if self.password is not None else settings.password,
            ssl_mode=ssl_mode, ssl_ca=ssl_ca, ssl_cert=_path_or_cleared(self.ssl_cert, settings.ssl_cert),
            ssl_key=_path_or_cleared(self.ssl_key, settings.ssl_key),
            use_gtid=self.use_gtid if self.use_gtid is not None else settings.use_gtid, repointed=True)


def _path_or_cleared(given: str | None, current: str | None) -> str | None:
    if given is None:
        return current
    return given or None


def ssl_mode_of(enabled: bool, ca: str | None, verify_server_cert: bool) -> str:
    """upstream.ssl.mode for MariaDB's MASTER_SSL, MASTER_SSL_CA and MASTER_SSL_VERIFY_SERVER_CERT: a CA
    given is checked (verify_ca), and the host name too with VERIFY_SERVER_CERT (against the CA, or the
    system's CAs without one)."""
    if not enabled:
        return "disabled"
    if verify_server_cert:
        return "verify_identity"
    return "verify_ca" if ca else "required"


@dataclass(frozen=True)
class EffectiveUpstream:
    """The upstream ingest follows (or will follow at START SLAVE), as SHOW SLAVE STATUS shows a
    replica's: Master_Host, Master_Port, Master_User, Using_Gtid, the TLS options; ``source`` says
    where it comes from: "upstream.host", "upstream.hosts" (the candidate followed, or the first) or
    "CHANGE MASTER" (kept in data_dir, overriding the YAML's)."""

    host: str
    port: int
    user: str
    use_gtid: str
    ssl: bool
    ssl_ca: str | None
    ssl_verify_server_cert: bool
    source: str
    running: bool  # False after STOP SLAVE

    @classmethod
    def of(cls, settings: UpstreamSettings, current: Candidate | None, running: bool) -> EffectiveUpstream:
        candidate = current if current is not None and current in settings.all_candidates \
            else settings.all_candidates[0]
        source = "CHANGE MASTER" if settings.repointed else "upstream.hosts" if settings.candidates else "upstream.host"
        return cls(candidate.host, candidate.port, settings.user, settings.use_gtid, settings.ssl_mode != "disabled",
                   settings.ssl_ca, settings.ssl_mode == "verify_identity", source, running)

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port} (MASTER_USE_GTID={self.use_gtid}, from {self.source})"

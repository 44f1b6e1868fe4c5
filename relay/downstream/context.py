"""What every downstream session shares (storage, the registry, configuration-derived facts): made by
the listener, read by the sessions and their dumps."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from ..protocol import server as proto
from ..storage.gtidindex import GtidIndex, MysqlGtidIndex
from ..storage.relaylog import RelayLog
from . import queries
from .control import ControlHandler
from .purge import PurgeHandler
from .registry import Registry


@dataclass
class SessionContext:
    """What every session shares: storage, the registry, configuration-derived facts."""

    relay_log: RelayLog
    registry: Registry
    relay_server_id: int
    ignore_server_ids: frozenset[int]
    lookup_user: Callable[[str], proto.Credentials | None]
    facts: Callable[[], queries.ServerFacts]
    handshake_timeout: float
    tls_context: ssl.SSLContext | None
    tls_required: bool
    next_connection_id: Callable[[], int]
    gtid_index: GtidIndex
    mysql_gtid_index: MysqlGtidIndex
    purge: PurgeHandler
    control: ControlHandler  # STOP/START SLAVE, CHANGE MASTER TO, RESET SLAVE
    wait_for_replica_acks: bool = False  # semi_sync.wait_for_replicas > 0: ask semi-sync replicas for ACKs
    max_packet: int = proto.DEFAULT_MAX_PACKET  # listen.max_packet, for logged-in clients
    # caching_sha2_password: users who passed a full authentication since the start, and the key
    # pair (private, public PEM) for full authentications without TLS
    sha2_cache: set[str] = field(default_factory=set)
    rsa_key_pair: tuple[bytes, bytes] | None = None
